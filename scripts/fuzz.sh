#!/usr/bin/env bash
# Runs every fuzz target for a short fixed time each (default 5s): the
# decoders of everything that arrives from outside (wire format, spec files,
# moduli). Usage: scripts/fuzz.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-5s}
targets=(
  "./pkg/codec FuzzOpen"
  "./pkg/codec FuzzUnmarshalPayloads"
  "./pkg/codec FuzzMatrixDecode"
  "./pkg/mpc FuzzElemFromBytes"
  "./pkg/mpc FuzzParseModulus"
  "./pkg/mpc FuzzParseControllerSpec"
  "./pkg/plant FuzzParseSpec"
)
for tg in "${targets[@]}"; do
  set -- $tg
  echo "fuzz $1 $2 ($t)"
  go test -run='^$' -fuzz="^$2\$" -fuzztime="$t" "$1"
done

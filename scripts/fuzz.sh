#!/usr/bin/env bash
# Runs every fuzz target for a short fixed amount of work each (default
# 20000 inputs): the decoders of everything that arrives from outside (wire
# format, the parties' batches, the services' own records as the broker
# stores them, JetStream's acknowledgements of state writes, spec files,
# moduli). Usage: scripts/fuzz.sh [N]
#
# A fixed input count rather than a duration: Go's fuzzer can end a timed run
# with a spurious "context deadline exceeded" when the machine is loaded and a
# worker answers late. Such a run (with no failing input written) is retried
# once; a real finding fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
targets=(
  "./pkg/codec FuzzOpen"
  "./pkg/codec FuzzUnmarshalPayloads"
  "./pkg/codec FuzzMatrixDecode"
  "./pkg/codec FuzzPeekItems"
  "./pkg/codec FuzzSplitBatch"
  "./pkg/codec FuzzOpenRecord"
  "./internal/party FuzzPubAck"
  "./pkg/mpc FuzzElemFromBytes"
  "./pkg/mpc FuzzParseModulus"
  "./pkg/mpc FuzzParseControllerSpec"
  "./pkg/plant FuzzParseSpec"
)
for tg in "${targets[@]}"; do
  set -- $tg
  for attempt in 1 2; do
    echo "fuzz $1 $2 (${n} inputs, attempt $attempt)"
    if out=$(go test -run='^$' -fuzz="^$2\$" -fuzztime="${n}x" -parallel=1 "$1" 2>&1); then
      echo "$out" | tail -2
      break
    fi
    echo "$out" | tail -20
    if [ "$attempt" = 2 ] || ! grep -q "context deadline exceeded" <<<"$out" || grep -q "Failing input written" <<<"$out"; then
      echo "fuzz $2 failed"
      exit 1
    fi
  done
done

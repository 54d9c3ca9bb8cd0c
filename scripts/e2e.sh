#!/usr/bin/env bash
# End-to-end test of the docker compose stack (make e2e).
#
# Builds the images (unless SKIP_BUILD=1), starts the stack under its own
# compose project and checks, reading the services' Prometheus metrics on
# 127.0.0.1:
#   0. the keys service run again on the keys volume (as `make up` runs it
#      after an upgrade) keeps the keys and rewrites an earlier release's
#      nats-auth.conf with this release's permissions; the stack then runs
#      under the rewritten file;
#   1. the loop runs: the actuator reconstructs u_t every tick and the
#      simulated pendulum stays in range (the sensor rejects no measurement),
#      and every service labels its metrics with its role;
#   2. 30 s of steady state with no new deadline miss (a window the host
#      stalled past the 30 ms deadline is measured once more), at least 90 %
#      of its ticks in two hops (DUET_TWO_HOP is on in docker-compose.yml);
#   3. dealers scaled 1 -> 3 -> 1 with duet_mismatches_total{kind="item"}
#      unchanged at the parties (never tolerated) and at most SCALE_MAX_MISSES
#      deadline misses and state version mismatches;
#   4. party0 cut off the network for 2 s: the loop resumes and balances the
#      pendulum again;
#   5. party1 killed (SIGKILL) and started again: the same (needs the parties'
#      crash recovery: state shares persisted in JetStream);
#   6. with PROMETHEUS (a prometheus binary; make e2e builds one), a real
#      Prometheus scrapes every service with deploy/prometheus/duet-alerts.yaml
#      loaded: every rule evaluates and none fires that a healthy stack must
#      not (TestLivePrometheus in deploy/prometheus).
# The stack is always torn down (trap). Exits non-zero on any failure, after a
# summary of what it saw.
#
# Environment: COMPOSE (default: `docker compose` if present, else
# docker-compose), E2E_PROJECT (default duet-e2e), SKIP_BUILD=1, PREFLIGHT=1 (only check that the published ports are free), STEADY (30),
# PROMETHEUS, E2E_PROMETHEUS_PORT (19190), MAX_MISSES (default 0: deadline misses, and state version mismatches, that
# a phase tolerates; a machine busy with other work starves the loop of CPU
# for more than a period now and then, and item mismatches are never
# tolerated), SKIP="partition kill" (phases to leave out), KEEP=1 (leave the
# stack running for inspection).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in docker curl jq; do
	command -v $tool >/dev/null || { echo "e2e: $tool not found" >&2; exit 1; }
done

if [[ -z "${COMPOSE:-}" ]]; then
	if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
PROJECT=${E2E_PROJECT:-duet-e2e}
STEADY=${STEADY:-30}
MAX_MISSES=${MAX_MISSES:-0}
# Starting two dealer containers on a 2-core host costs ticks their deadline:
# docker-compose, the containers' start and the dealers' queue refill share
# the two cores with the loop (the issue asks this phase for no item
# mismatch, checked strictly). On the shared CI VM this took 0-16 ticks in
# one session's seven runs (load averages up to 6), so the budget is one
# second of ticks.
SCALE_MAX_MISSES=${SCALE_MAX_MISSES:-25}
SKIP=" ${SKIP:-} "
read -r -a DC <<<"$COMPOSE"
DC+=(-p "$PROJECT" -f docker-compose.yml -f scripts/e2e.compose.yml)

# Host ports published by docker-compose.yml (127.0.0.1 only).
P_SENSOR=19101 P_PARTY0=19102 P_PARTY1=19103 P_ACTUATOR=19104 P_PLANT=19105 P_NATS=18222
P_PROM=${E2E_PROMETHEUS_PORT:-19190} # the e2e step's own Prometheus

T0=$SECONDS
declare -a SUMMARY=()
FAILED=0
log() { printf '[e2e %3ds] %s\n' $((SECONDS - T0)) "$*"; }
note() { SUMMARY+=("$*"); log "$*"; }
pass() { note "PASS  $*"; }
fail() {
	note "FAIL  $*"
	FAILED=1
	exit 1
}

dump() {
	log "--- compose ps"
	"${DC[@]}" ps || true
	for s in nats sensor party0 party1 actuator plant dealer; do
		log "--- last log lines of $s"
		"${DC[@]}" logs --no-color --tail=15 "$s" 2>&1 | tail -15 || true
	done
}

# The published ports must be free, checked before anything is built or
# started: 'make e2e' runs this part alone first (PREFLIGHT=1), so that a
# stack left by 'make up' stops it at once, not after the images' build.
for p in $P_SENSOR $P_PARTY0 $P_PARTY1 $P_ACTUATOR $P_PLANT $P_NATS $P_PROM; do
	if curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$p/"; then
		echo "e2e: port 127.0.0.1:$p is in use (a stack from 'make up' still running? 'make down' first)" >&2
		exit 1
	fi
done
[[ "${PREFLIGHT:-}" == 1 ]] && exit 0

cleanup() {
	local rc=$?
	# || true: under set -e a failed kill (Prometheus already exited, as it
	# does on a rule file it cannot load) would end the trap here, before the
	# dump and the teardown.
	if [[ -n "${PROM_PID:-}" ]]; then kill "$PROM_PID" 2>/dev/null || true; fi
	[[ $rc -ne 0 ]] && FAILED=1
	if [[ $FAILED -ne 0 ]]; then dump; fi
	if [[ "${KEEP:-}" == 1 ]]; then
		log "KEEP=1: stack $PROJECT left running (${DC[*]} down -v to remove)"
	else
		log "tearing down"
		"${DC[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
	fi
	echo
	echo "== e2e summary ($((SECONDS - T0)) s)"
	local npass=0 nfail=0
	for l in "${SUMMARY[@]}"; do
		echo "  $l"
		case $l in PASS*) npass=$((npass + 1)) ;; FAIL*) nfail=$((nfail + 1)) ;; esac
	done
	if [[ $FAILED -ne 0 ]]; then
		echo "== e2e FAILED"
		((nfail > 0)) || nfail=1
	else
		echo "== e2e PASSED"
	fi
	echo "e2e: $npass passed, $nfail failed"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# metric PORT NAME [SUBSTRING]: the sum of a metric's samples (0 if none;
# -1 if the endpoint did not answer three tries: a loaded host can miss one).
metric() {
	local body try
	for try in 1 2 3; do
		if body=$(curl -fsS --max-time 3 "http://127.0.0.1:$1/metrics" 2>/dev/null); then
			awk -v name="$2" -v sub_="${3:-}" '
				$1 !~ /^#/ { n = $1; sub(/\{.*/, "", n)
				  if (n == name && (sub_ == "" || index($1, sub_) > 0)) { s += $2; found = 1 } }
				END { printf "%d\n", found ? s : 0 }' <<<"$body"
			return
		fi
		sleep 0.5
	done
	echo "-1"
}
# party_metric NAME [SUBSTRING]: the sum over both parties, or -1 if either
# party's metrics could not be read (callers check with readable).
party_metric() {
	local a b
	a=$(metric $P_PARTY0 "$@") b=$(metric $P_PARTY1 "$@")
	if ((a < 0 || b < 0)); then echo "-1"; else echo $((a + b)); fi
}
# readable WHAT VALUE...: fail the run if a metric read returned -1, so that
# an unanswered scrape never enters a difference as a count.
readable() {
	local what=$1 v
	shift
	for v in "$@"; do
		((v >= 0)) || fail "$what: a service's /metrics did not answer three tries (load average $(cut -d' ' -f1-3 /proc/loadavg))"
	done
}
ticks() { metric $P_ACTUATOR duet_ticks_total; }
misses() { metric $P_ACTUATOR duet_deadline_misses_total; }
range_rejects() { metric $P_SENSOR duet_rejects_total 'reason="range"'; }
mismatches() { party_metric duet_mismatches_total; }
item_mismatches() { party_metric duet_mismatches_total 'kind="item"'; }
version_mismatches() { party_metric duet_mismatches_total 'kind="version"'; }
# ticks the sensor sent masked (the two-hop tick, DUET_TWO_HOP in docker-compose.yml)
two_hop() { metric $P_SENSOR duet_tick_paths_total 'path="two_hop"'; }
# run_queue: party0's Go scheduler, from one scrape: "WAITS OVER", the
# run-queue waits counted and those over 0.92 ms (go_sched_latencies_seconds:
# the count less the bucket that ends there); "-1 -1" if /metrics did not
# answer three tries.
run_queue() {
	local body try
	for try in 1 2 3; do
		if body=$(curl -fsS --max-time 3 "http://127.0.0.1:$P_PARTY0/metrics" 2>/dev/null); then
			awk '$1 == "go_sched_latencies_seconds_count" { n = $2 }
				index($1, "go_sched_latencies_seconds_bucket{le=\"0.000917") == 1 { le = $2 }
				END { printf "%d %d\n", n, n - le }' <<<"$body"
			return
		fi
		sleep 0.5
	done
	echo "-1 -1"
}

# wait_ticks N TIMEOUT: wait until the actuator's ticks_total reaches N.
wait_ticks() {
	local want=$1 deadline=$((SECONDS + $2)) t
	while ((SECONDS < deadline)); do
		t=$(ticks)
		((t >= want)) && return 0
		sleep 0.5
	done
	return 1
}

# wait_healthy SERVICE COUNT TIMEOUT: wait until COUNT containers of SERVICE are healthy.
wait_healthy() {
	local svc=$1 want=$2 deadline=$((SECONDS + $3)) n ids
	while ((SECONDS < deadline)); do
		ids=$("${DC[@]}" ps -q "$svc" 2>/dev/null || true)
		n=0
		if [[ -n "$ids" ]]; then
			# shellcheck disable=SC2086
			n=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' $ids | grep -c '^healthy$' || true)
		fi
		((n == want)) && return 0
		sleep 1
	done
	return 1
}

# -a: Compose v2 lists only running containers without it, and the plant
# drill starts the container it stopped.
cid() { "${DC[@]}" ps -a -q "$1"; }
# up runs "compose up" with its arguments and fails the run at once with
# compose's output when it fails (a port or subnet taken, an image missing),
# rather than 120 s later as a service that did not become healthy; its
# progress lines are left out.
up() {
	local out
	out=$("${DC[@]}" up "$@" 2>&1) || fail "compose up $*: $out"
	grep -v -e '^Creating' -e '^Starting' -e '^Stopping' -e '^Removing' -e '^Recreating' -e '^ *Container ' -e '^ *Network ' -e '^ *Volume ' -e '^$' <<<"$out" || true
}

# connz IP FIELD: a field of the NATS server's view of the client at IP.
connz() {
	curl -fsS --max-time 2 "http://127.0.0.1:$P_NATS/connz" 2>/dev/null |
		jq -r --arg ip "$1" --arg f "$2" '[.connections[] | select(.ip == $ip) | .[$f]] | first // -1'
}

if [[ "${SKIP_BUILD:-}" != 1 ]]; then
	log "building images (make images)"
	make --no-print-directory images
fi

log "starting stack $PROJECT"
"${DC[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
"${DC[@]}" run --rm keys >/dev/null || fail "duet keys into the keys volume"
# The keys service again, as `make up` runs it on a volume that holds keys
# (an upgrade): it keeps them and rewrites an earlier release's nats-auth.conf
# with this release's permissions, which the NATS server below then runs
# under; on a current file it says so. The earlier file stands in for the
# grants before 1b713ad: the dealers may not pull their set-up records, so
# after a rewrite that did not happen they exit (naming the remedy), and the
# stack below does not become healthy.
kvol=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT" --filter "label=com.docker.compose.volume=keys")
[[ -n $kvol ]] || fail "no keys volume of project $PROJECT"
kc=$(docker create -v "$kvol:/keys" "duet-tools:${IMAGE_TAG:-latest}" keys --dir /keys) || fail "docker create on the keys volume $kvol"
kdir=$(mktemp -d)
staled=0
if docker cp "$kc:/keys/nats-auth.conf" "$kdir/current" >/dev/null &&
	sed 's/, "\$JS\.API\.CONSUMER\.MSG\.NEXT\.KV_[^"]*"//' "$kdir/current" >"$kdir/nats-auth.conf" &&
	! cmp -s "$kdir/current" "$kdir/nats-auth.conf" &&
	chmod 644 "$kdir/nats-auth.conf" &&
	docker cp "$kdir/nats-auth.conf" "$kc:/keys/nats-auth.conf" >/dev/null; then
	staled=1
fi
docker rm -f "$kc" >/dev/null 2>&1 || true
rm -rf "$kdir"
((staled)) || fail "could not put an earlier release's nats-auth.conf (without the dealers' pull right) into the keys volume"
out=$("${DC[@]}" run --rm keys 2>&1) || fail "duet keys --if-missing on a volume with keys: $out"
[[ $out == *"kept them, and rewrote nats-auth.conf"* ]] || fail "duet keys --if-missing did not rewrite a stale nats-auth.conf: $out"
out=$("${DC[@]}" run --rm keys 2>&1) || fail "duet keys --if-missing on a volume with keys: $out"
[[ $out == *"already has this release's permissions"* ]] || fail "duet keys --if-missing on a current nats-auth.conf: $out"
pass "keys service on a volume with keys: kept them, a stale nats-auth.conf rewritten with this release's permissions"
up -d --scale keys=0 --scale dealer=1
for s in nats sensor party0 party1 actuator dealer plant; do
	wait_healthy "$s" 1 120 || fail "$s did not become healthy within 120 s"
done
pass "stack healthy after $((SECONDS - T0)) s (nats, sensor, party0, party1, actuator, 1 dealer, plant)"

# 1. The loop runs and the pendulum is held up.
wait_ticks 100 60 || fail "the actuator reconstructed only $(ticks) ticks within 60 s of start"
sleep 3
r=$(range_rejects)
((r == 0)) || fail "the pendulum left the measurable range during start-up ($r measurements rejected)"
pass "loop running: $(ticks) ticks at the actuator, $(misses) start-up misses, pendulum in range"

# Every service labels its metrics with its role: the alert rules in
# deploy/prometheus select by it (service="party0", ...), and their test
# checks them against the roles.
for sp in sensor:$P_SENSOR party0:$P_PARTY0 party1:$P_PARTY1 actuator:$P_ACTUATOR plant:$P_PLANT; do
	body=$(curl -fsS --max-time 3 "http://127.0.0.1:${sp#*:}/metrics" 2>/dev/null) || body=
	[[ $body == *"duet_nats_reconnects_total{service=\"${sp%%:*}\"}"* ]] ||
		fail "${sp%%:*}'s metrics are not labelled service=\"${sp%%:*}\" (the alert rules select by role)"
done
pass "metrics labelled by role (sensor, party0, party1, actuator, plant)"

# 2. Steady state: no new deadline miss for $STEADY s. Beside it, `duet
# stalls` measures the host: a wake-up of a sleeping thread more than 20 ms
# late is a stall of the machine, and one longer than the 30 ms deadline
# costs ticks whatever the stack does. A window with more than MAX_MISSES
# misses during which the host stalled past the deadline is measured once
# more (and reported); a second such window fails.
steady_window() {
	t0=$(ticks) m0=$(misses) h0=$(two_hop)
	read -r q0 o0 < <(run_queue)
	local out
	out=$(mktemp)
	build/bin/duet stalls --for "${STEADY}s" --over 20ms >"$out" 2>&1 &
	local pid=$!
	sleep "$STEADY"
	t1=$(ticks) m1=$(misses) r=$(range_rejects) h1=$(two_hop)
	read -r q1 o1 < <(run_queue)
	wait "$pid" || true
	host="host: $(cat "$out" 2>/dev/null || true)"
	# the worst host stall in ms, 0 if none was measured
	host_worst=$(sed -n 's/.*the worst \([0-9.]*\) ms late.*/\1/p' "$out" 2>/dev/null | head -n1)
	host_worst=${host_worst:-0}
	rm -f "$out"
}
past_deadline() { awk -v w="$1" 'BEGIN { exit !(w > 30) }'; }
steady_window
if ((m1 >= 0 && m0 >= 0 && m1 - m0 > MAX_MISSES)) && past_deadline "$host_worst"; then
	note "NOTE  steady state: $((m1 - m0)) new deadline misses in ${STEADY} s while the host stalled past the 30 ms deadline ($host): measuring a second window"
	steady_window
fi
readable "steady state" "$t0" "$m0" "$t1" "$m1" "$r" "$q0" "$o0" "$q1" "$o1" "$h0" "$h1"
dt=$((t1 - t0)) dm=$((m1 - m0)) dq=$((q1 - q0)) dover=$((o1 - o0)) dh=$((h1 - h0))
min=$((STEADY * 25 * 8 / 10)) # 80% of the ticks of a 40 ms period
((dm <= MAX_MISSES)) || fail "steady state: $dm new deadline misses in ${STEADY} s ($dt ticks; load average $(cut -d' ' -f1-3 /proc/loadavg); $host)"
((dt >= min)) || fail "steady state: only $dt ticks in ${STEADY} s, want >= $min"
((r == 0)) || fail "steady state: the pendulum left the measurable range ($r rejects)"
((dq > 0)) || fail "steady state: party0 exports no run-queue waits (go_sched_latencies_seconds_count $q0, then $q1)"
((dh * 10 >= dt * 9)) || fail "steady state: only $dh of $dt ticks sent masked (two hops; DUET_TWO_HOP is on in docker-compose.yml)"
pass "steady ${STEADY} s: $dt ticks ($dh in two hops), $dm new misses (allowed $MAX_MISSES), pendulum in range ($host; party0: $dover of $dq run-queue waits over 0.92 ms)"

# 3. Dealers 1 -> 3 -> 1: parties never disagree on an item.
im0=$(item_mismatches) vm0=$(version_mismatches) m0=$(misses) t0=$(ticks)
up -d --no-recreate --scale keys=0 --scale dealer=3 dealer
wait_healthy dealer 3 60 || fail "3 dealers did not become healthy"
sleep 8
up -d --no-recreate --scale keys=0 --scale dealer=1 dealer
wait_healthy dealer 1 60 || fail "did not scale back to 1 dealer"
sleep 8
im1=$(item_mismatches) vm1=$(version_mismatches) m1=$(misses) t1=$(ticks)
readable "dealer scaling" "$im0" "$vm0" "$m0" "$t0" "$im1" "$vm1" "$m1" "$t1"
im=$((im1 - im0)) vm=$((vm1 - vm0))
((im == 0)) || fail "dealer scaling: $im item mismatches at the parties (duet_mismatches_total{kind=\"item\"} $im0 -> $im1)"
((vm <= SCALE_MAX_MISSES)) || fail "dealer scaling: $vm state version mismatches (ticks abandoned by one party; allowed $SCALE_MAX_MISSES; load average $(cut -d' ' -f1-3 /proc/loadavg))"
((m1 - m0 <= SCALE_MAX_MISSES)) || fail "dealer scaling: $((m1 - m0)) deadline misses ($((t1 - t0)) ticks; load average $(cut -d' ' -f1-3 /proc/loadavg))"
((t1 - t0 >= 300)) || fail "dealer scaling: only $((t1 - t0)) ticks"
pass "dealers 1 -> 3 -> 1: $((t1 - t0)) ticks, 0 item mismatches, $vm state version mismatches, $((m1 - m0)) new misses (allowed $SCALE_MAX_MISSES)"

# The simulated pendulum cannot survive a 2 s outage of its controller: it
# falls, its angles leave the range the controller's fixed point encodes,
# and the sensor stops sampling it. So, as an operator would, the test
# catches it (stops the plant simulator) when a party goes and sets it upright
# again (starts the simulator) once the party is back, at 1° (e2e.plant.json:
# from the testbed's 3° a single late tick among the first ten can make it
# fall, and a restarted party's first tick is always lost to the items'
# resynchronization; see TestQubeStartToleratesLateTicks). The parties' state
# does not advance while either of them is away, so the loop must balance the
# pendulum again: that checks that the state shares came back consistent, not
# only that ticks flow. It must be caught before anything of a falling
# pendulum completes a tick: a single such measurement winds up the
# controller state so far that it cannot balance a fresh pendulum. A killed
# party's messages are lost, so nothing completes until it is back; a
# partitioned party's are only delayed (TCP) and complete when it returns,
# so for the partition the pendulum is caught first.
catch_pendulum() { docker stop -t 0 "$(cid plant)" >/dev/null; }
release_pendulum() {
	docker start "$(cid plant)" >/dev/null
	wait_healthy plant 1 30 || fail "the plant did not come back"
}

# recovered WHAT T0 M0: ticks resume and then run 5 s clean with the pendulum held.
recovered() {
	local what=$1 t0=$2 m0=$3 t1 m1 t2 m2 r1 r2
	wait_ticks $((t0 + 50)) 60 || return 1
	t1=$(ticks) m1=$(misses) r1=$(range_rejects)
	sleep 5
	t2=$(ticks) m2=$(misses) r2=$(range_rejects)
	readable "$what" "$t1" "$m1" "$r1" "$t2" "$m2" "$r2"
	((r2 == r1)) || fail "$what: the loop resumed but did not balance the pendulum again ($((r2 - r1)) measurements out of range within 5 s; $((t2 - t1)) ticks and $((m2 - m1)) misses in them, $((m1 - m0)) misses before; party mismatches $(mismatches); load average $(cut -d' ' -f1-3 /proc/loadavg)): inconsistent state shares?"
	((t2 - t1 >= 100)) || fail "$what: only $((t2 - t1)) ticks in the 5 s after the loop resumed"
	((m2 - m1 <= MAX_MISSES)) || fail "$what: $((m2 - m1)) misses in the 5 s after the loop resumed"
	RECOVERED="$((m1 - m0)) misses while it was away, then 5 s clean: $((t2 - t1)) ticks, pendulum balanced"
}

# drill_mismatches WHAT IM0 VM0: the parties' item and state version
# mismatches since IM0 and VM0 into MISMATCHES, for the drill's line (a
# party that was away resynchronizes its items and state version with the
# other's; these count how often that took a tick).
drill_mismatches() {
	local what=$1 im0=$2 vm0=$3 im1 vm1
	im1=$(item_mismatches) vm1=$(version_mismatches)
	readable "$what" "$im0" "$vm0" "$im1" "$vm1"
	MISMATCHES="$((im1 - im0)) item and $((vm1 - vm0)) state version mismatches at the parties"
}

# 4. party0 partitioned for 2 s (its TCP connection to NATS survives: same
# address after reconnecting, as when a link flaps).
if [[ $SKIP == *" partition "* ]]; then
	note "SKIP  party0 partition (SKIP)"
else
	t0=$(ticks) m0=$(misses) im0=$(item_mismatches) vm0=$(version_mismatches)
	p0=$(cid party0)
	net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$p0")
	ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$p0")
	catch_pendulum
	docker network disconnect "$net" "$p0"
	sleep 2
	docker network connect --ip "$ip" "$net" "$p0"
	# TCP retransmits with exponential backoff (0.2, 0.4, 0.8, 1.6, 3.2 s):
	# give the connection 5 s to resume, and the server time to flush what it
	# held for party0, before the pendulum goes up.
	sleep 5
	deadline=$((SECONDS + 30))
	until (($(connz "$ip" pending_bytes) == 0)); do
		((SECONDS < deadline)) || fail "party0 partition: NATS still holds $(connz "$ip" pending_bytes) bytes for party0 after 30 s"
		sleep 0.2
	done
	release_pendulum
	recovered "party0 partition" "$t0" "$m0" ||
		fail "party0 partition: ticks did not resume within 60 s (actuator at $(ticks), was $t0; party mismatches $(mismatches))"
	drill_mismatches "party0 partition" "$im0" "$vm0"
	pass "party0 cut off for 2 s: loop resumed ($RECOVERED; $MISMATCHES)"
fi

# 5. party1 killed (SIGKILL) and started again: it must restore its state
# share (crash recovery: persisted, sealed, in JetStream KV) for the loop to
# resume without a controller reset.
if [[ $SKIP == *" kill "* ]]; then
	note "SKIP  party1 kill + restart (SKIP)"
else
	t0=$(ticks) m0=$(misses) im0=$(item_mismatches) vm0=$(version_mismatches)
	p1=$(cid party1)
	# Only this run of the container counts: docker logs also returns the
	# lines of its earlier runs.
	# Seconds since the epoch: a date without a zone is read by docker logs
	# in the client's local time, hours off on a host not set to UTC.
	since=$(date +%s)
	docker kill "$p1" >/dev/null
	catch_pendulum
	sleep 1
	docker start "$p1" >/dev/null
	wait_healthy party1 1 60 || fail "party1 not healthy again within 60 s of its restart"
	release_pendulum
	if ! recovered "party1 restart" "$t0" "$m0"; then
		why=$(docker logs --since "$since" "$p1" 2>&1 | grep '"state version mismatch"' | tail -1 | grep -o '"own":[0-9]*,"peer":[0-9]*' || true)
		fail "party1 restart: ticks did not resume (actuator at $(ticks), was $t0 at the kill${why:+; party1 reports state version mismatch $why: its state share was not restored})"
	fi
	# DUET_PERSIST is on in docker-compose.yml: the share must come from KV
	# (the pendulum balancing again shows it is the right one).
	restored=$(docker logs --since "$since" "$p1" 2>&1 | grep '"state restored"' | tail -1 | grep -o '"version":[0-9]*,"tick":[0-9]*' || true)
	[[ -n $restored ]] || fail "party1 restart: ticks resumed, but party1 did not log \"state restored\" (crash recovery off?)"
	drill_mismatches "party1 restart" "$im0" "$vm0"
	pass "party1 kill + restart: state share restored from JetStream KV ($restored), loop resumed ($RECOVERED; $MISMATCHES)"
fi

# 6. A real Prometheus scrapes the stack, after the drills, with the alert
# rules loaded (make e2e builds one and passes PROMETHEUS; without it the step
# is skipped; it runs last so that its load does not touch the drills):
# TestLivePrometheus checks that every rule evaluates, every role is scraped,
# the loop runs at its rate and nothing fires that a healthy stack must not.
if [[ -n "${PROMETHEUS:-}" ]]; then
	[[ -x $PROMETHEUS ]] || fail "PROMETHEUS=$PROMETHEUS is not an executable"
	PROM_DIR=$(mktemp -d)
	dealer=$("${DC[@]}" port --index 1 dealer 9100 2>/dev/null | tail -1) || dealer=
	[[ -n $dealer ]] || fail "the dealer's metrics port is not published"
	cat >"$PROM_DIR/prometheus.yml" <<-EOF
		global: {scrape_interval: 5s, evaluation_interval: 5s}
		rule_files: ['$PWD/deploy/prometheus/duet-alerts.yaml']
		scrape_configs:
		  - job_name: duet
		    static_configs:
		      - targets: ['127.0.0.1:$P_SENSOR', '127.0.0.1:$P_PARTY0', '127.0.0.1:$P_PARTY1', '127.0.0.1:$P_ACTUATOR', '127.0.0.1:$P_PLANT', '$dealer']
	EOF
	"$PROMETHEUS" --config.file="$PROM_DIR/prometheus.yml" --storage.tsdb.path="$PROM_DIR/data" \
		--web.listen-address="127.0.0.1:$P_PROM" >"$PROM_DIR/log" 2>&1 &
	PROM_PID=$!
	if out=$(DUET_PROMETHEUS_URL="http://127.0.0.1:$P_PROM" go test -count=1 -run TestLivePrometheus -v ./deploy/prometheus 2>&1); then
		active=$(grep -o 'alert Duet[A-Za-z]* [a-z]*' <<<"$out" | cut -d' ' -f2,3 | paste -sd, - || true)
		pass "Prometheus scraped every service and evaluated every alert rule (active: ${active:-none})"
	else
		tail -20 <<<"$out"
		tail -5 "$PROM_DIR/log"
		fail "Prometheus against the stack: $(grep -m1 -E 'live_test.go|FAIL' <<<"$out")"
	fi
	kill "$PROM_PID" 2>/dev/null || true
	wait "$PROM_PID" 2>/dev/null || true
	PROM_PID=
	rm -rf "$PROM_DIR"
fi

note "INFO  totals since the stack started, the drills included: at the actuator $(ticks) ticks, $(misses) misses; at the parties $(item_mismatches) item and $(version_mismatches) version mismatches"

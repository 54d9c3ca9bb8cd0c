package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func TestScaleQuick(t *testing.T) {
	ns, url := startServerNS(t)
	cs, _ := pendulum(t)
	dir := t.TempDir()
	quiesced := countQuiesce(t)
	// 1.5 s, not less: the floor's few relays use about 0.05 cores, and its
	// CPU profile (100 samples a second) must catch them; over 0.6 s a CI
	// run's got no sample at all.
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{4}, Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Controller: cs, Variant: mpc.PerTick, Compress: true, ProfileDir: dir, Server: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	if *quiesced != len(rows) {
		t.Errorf("quiesced %d times for %d steps: each step starts without the garbage of the ones before it", *quiesced, len(rows))
	}
	for _, r := range rows {
		if r.Ticks < r.Loops*30 || r.Wrong != 0 {
			t.Errorf("%+v: want about 37 ticks per loop and no wrong result", r)
		}
		// By default the step's heap headroom is faulted in after the
		// set-up (prefaultHeap): at least the 16 MB goal of Go's smallest
		// heap, less what is live.
		if r.PrefaultMB < 1 {
			t.Errorf("%+v: %.1f MB faulted in after the set-up, want the heap's headroom", r, r.PrefaultMB)
		}
		if r.CPU <= 0 || r.FloorCPU <= 0 {
			t.Errorf("%+v: want the run's and the floor's CPU measured", r)
		}
		checkSteal(t, fmt.Sprintf("%+v", r), r.Steal)
		checkSteal(t, fmt.Sprintf("%+v (floor)", r), r.FloorSteal)
		checkWaits(t, fmt.Sprintf("%+v", r), r.SchedP99, r.SyscallsPerTick)
		checkWaits(t, fmt.Sprintf("%+v (floor)", r), r.FloorSchedP99, r.FloorSyscallsPerTick)
		checkRSS(t, fmt.Sprintf("%+v", r), r.RSS)
		// Every tick allocates at least its messages (the server's and the
		// clients' copies), and far less than a megabyte.
		if r.AllocPerTick < 1000 || r.AllocPerTick > 1<<20 || r.GCs < 0 {
			t.Errorf("%+v: allocation per tick %.0f B, %d GCs: not measured", r, r.AllocPerTick, r.GCs)
		}
		// The collector's CPU is in seconds, not nanoseconds: within what
		// the whole machine had over the run, and the assists a part of it.
		if r.GCAssist < 0 || r.GCAssist > r.GCCPU || r.GCCPU > time.Duration(runtime.NumCPU())*time.Minute {
			t.Errorf("%+v: collector CPU %v of which assists %v", r, r.GCCPU, r.GCAssist)
		}
		// Per tick the parties exchange three protocol messages (two
		// Protocol 1 messages, P0's Protocol 2 message), batched or not.
		if r.PeerEnvsPerTick < 2.5 || r.PeerEnvsPerTick > 3.5 || r.PeerMsgsPerTick <= 0 || r.PeerMsgsPerTick > r.PeerEnvsPerTick {
			t.Errorf("%+v: %.2f peer messages for %.2f envelopes per tick", r, r.PeerMsgsPerTick, r.PeerEnvsPerTick)
		}
		// The server's messages per tick: at least the sensor's two, the
		// exchange's three (batched into no fewer than one) and the two
		// output shares in, and as many out; far fewer than 20.
		if r.BrokerInPerTick < 6 || r.BrokerInPerTick > 20 || r.BrokerOutPerTick < 6 || r.BrokerOutPerTick > 20 {
			t.Errorf("%+v: the server's messages per tick %.2f in, %.2f out", r, r.BrokerInPerTick, r.BrokerOutPerTick)
		}
		// The CPU by role was measured, each part within what the machine
		// has, and the parts add up to the process's CPU (the profile
		// samples it; its window is a little longer than the meter's).
		rc := r.Roles
		parts := []float64{rc.Party[0], rc.Party[1], rc.Broker, rc.Harness, rc.Collector, rc.Other}
		for _, v := range parts {
			if math.IsNaN(v) || v < 0 || v > float64(runtime.NumCPU()) {
				t.Errorf("%+v: CPU by role %+v", r, rc)
			}
		}
		if rc.Samples == 0 || rc.Total() > 2*r.CPU+0.05 {
			t.Errorf("%+v: CPU by role %+v (total %.3f) against %.3f cores for the process", r, rc, rc.Total(), r.CPU)
		}
		// The floor's relays and server were labelled too.
		if fr := r.FloorRoles; math.IsNaN(fr.Pair()) || fr.Samples == 0 || fr.Pair() < 0 || fr.Broker < 0 || fr.Total() > 2*r.FloorCPU+0.05 {
			t.Errorf("%+v: the floor's CPU by role %+v against %.3f cores", r, fr, r.FloorCPU)
		}
		if r.Period != 40*time.Millisecond {
			t.Errorf("%+v: period %v", r, r.Period)
		}
		abandoned := 0
		for _, n := range r.PartyAbandoned {
			abandoned += n
		}
		if abandoned != r.PartyMisses {
			t.Errorf("%+v: %d abandoned by reason (%s), %d in all", r, abandoned, r.AbandonedBy(), r.PartyMisses)
		}
		// The harness sends nothing a party should refuse.
		if r.Rejected() != 0 {
			t.Errorf("%+v: the parties refused %s", r, r.RejectsBy())
		}
		t.Logf("%+v", r)
	}
	// The profile directory holds the CPU profile and every measured tick.
	if _, err := os.Stat(filepath.Join(dir, "scale-4-persist.pprof")); err != nil {
		t.Error(err)
	}
	// What the server received from and sent to each connection, the
	// parties' among them.
	if b, err := os.ReadFile(filepath.Join(dir, "scale-4-persist.conns.csv")); err != nil {
		t.Error(err)
	} else if s := string(b); !strings.HasPrefix(s, "connection,in_msgs_per_tick,out_msgs_per_tick,in_bytes_per_tick,out_bytes_per_tick\n(server),") ||
		!strings.Contains(s, "\nduet-bench-party0,") || !strings.Contains(s, "\nduet-bench-party1,") {
		t.Errorf("connections:\n%s", b)
	}
	// And who allocated the window's bytes: the NATS server and client at
	// least (a few ticks allocate a few samples' worth).
	if b, err := os.ReadFile(filepath.Join(dir, "scale-4-persist.alloc-split.csv")); err != nil {
		t.Error(err)
	} else if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 6 || lines[0] != "who,bytes,share" ||
		!strings.HasPrefix(lines[1], "nats-server,") || !strings.HasPrefix(lines[5], "other,") {
		t.Errorf("alloc split:\n%s", b)
	}
	b, err := os.ReadFile(filepath.Join(dir, "scale-4-persist.ticks.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "sent_ms,loop,latency_us" || len(lines)-1 != rows[0].Ticks {
		t.Errorf("tick series: header %q, %d ticks; want %d", lines[0], len(lines)-1, rows[0].Ticks)
	}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		sent, err1 := strconv.ParseFloat(f[0], 64)
		loop, err2 := strconv.Atoi(f[1])
		lat, err3 := strconv.ParseFloat(f[2], 64)
		if len(f) != 3 || err1 != nil || err2 != nil || err3 != nil || sent < 0 || loop < 0 || loop >= 4 || (lat <= 0 && lat != -1) {
			t.Fatalf("tick series line %q", l)
		}
	}
}

// TestScaleQuickFixedMask: the scale search runs its loops with the fixed
// mask when asked (duet bench --mask fixed): every output is checked
// against the clear controller, and the row says which variant it ran.
func TestScaleQuickFixedMask(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{3}, Duration: 300 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Controller: cs, Variant: mpc.FixedMask, Compress: true, NoPersist: true, Prefetch: 8, ColdHeap: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	if r := rows[0]; r.Variant != mpc.FixedMask || r.Ticks < r.Loops*6 || r.Wrong != 0 || r.PartyMisses != 0 || r.TwoHop || r.TwoHopTicks != 0 {
		t.Errorf("%+v: want the fixed mask, about 7 ticks per loop, no wrong result, no miss and three hops", r)
	}
	// With a prefetch of 8 (one stream message a pull) no tick went without
	// its item, and the row says which prefetch it ran with.
	if r := rows[0]; r.Prefetch != 8 || r.NoItem != 0 {
		t.Errorf("prefetch %d, %d ticks without an item: want 8 and none", r.Prefetch, r.NoItem)
	}
	// A cold heap: nothing faulted in after the set-up.
	if r := rows[0]; r.PrefaultMB != 0 {
		t.Errorf("with ColdHeap %.0f MB faulted in after the set-up, want none", r.PrefaultMB)
	}
}

// TestScaleQuickTwoHop: with TwoHop (duet bench --two-hop) the light
// sensors send masked measurements once both parties' mask shares are in,
// and every output still matches the clear controller's.
func TestScaleQuickTwoHop(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	dir := t.TempDir()
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{3}, Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Controller: cs, Variant: mpc.PerTick, Compress: true, TwoHop: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	// The first tick of each loop goes in three hops (no mask yet), then
	// every tick the parties completed in time pre-opens the next.
	if !r.TwoHop || r.Ticks < r.Loops*8 || r.Wrong != 0 || r.PartyMisses != 0 || r.TwoHopTicks < r.Ticks*3/4 || r.TwoHopTicks > r.Ticks {
		t.Errorf("%+v: want about 10 ticks per loop, most of them sent masked, no wrong result and no miss", r)
	}
	if r.FallbackTicks < 0 || r.FallbackTicks > r.TwoHopTicks {
		t.Errorf("%+v: %d fallbacks for %d masked ticks", r, r.FallbackTicks, r.TwoHopTicks)
	}
	if r.Rejected() != 0 {
		t.Errorf("%+v: the parties refused %s", r, r.RejectsBy())
	}
	rep := &Report{Scale: rows}
	if err := rep.WriteCSVs(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "scale_detail.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// The parties ran in the bench's process: their own heaps' columns are
	// empty (unknown), not zero; the prefetch is the parties' default; the
	// collector's background sweeping is measured; the server's messages
	// are unknown (empty) without the server (ScaleOptions.Server).
	// The dealers stopped before the step (no --live-dealers): 0. Over
	// TCP, not in process. The heap faulted in after the set-up and the
	// step's page faults.
	want := fmt.Sprintf(",true,%d,%d,,,,%d,%.3f,,,0,%.2f,false,%.0f,%.0f", r.TwoHopTicks, r.FallbackTicks, party.DefaultPrefetch, r.Roles.Sweep, r.PeerHeldPerTick, r.PrefaultMB, r.FaultsPerSec)
	if len(lines) != 2 || !strings.HasSuffix(lines[0], ",two_hop,two_hop_ticks,fallback_ticks,party_rejects_by,party_alloc_kb_per_tick,party_gc_cycles,prefetch,collector_sweep_cores,broker_msgs_in_per_tick,broker_msgs_out_per_tick,live_dealers_poll_max_ms,peer_held_per_tick,in_process,prefault_mb,page_faults_per_s") || !strings.HasSuffix(lines[1], want) || math.IsNaN(r.Roles.Sweep) {
		t.Errorf("scale_detail.csv %q: want the two-hop columns and empty party-process heap columns, ending %q", lines, want)
	}
	if !math.IsNaN(r.PartyAllocPerTick) || r.PartyGCs != 0 {
		t.Errorf("in-process parties: PartyAllocPerTick %v, PartyGCs %d; want NaN and 0", r.PartyAllocPerTick, r.PartyGCs)
	}
}

// TestScaleRepeat: with Repeat the search runs that many steps at each
// loop count, numbered, each with its own profile.
func TestScaleRepeat(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	dir := t.TempDir()
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{2}, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Controller: cs, Variant: mpc.PerTick, Compress: true, NoPersist: true, Repeat: 2, ProfileDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Try != 1 || rows[1].Try != 2 || rows[0].Loops != 2 || rows[1].Loops != 2 {
		t.Fatalf("rows %+v: want two steps at 2 loops, tries 1 and 2", rows)
	}
	for _, name := range []string{"scale-2-try1.pprof", "scale-2-try2.pprof"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}

// TestLoopSizes: the floor alone sends the scale loops' message sizes, so
// with the fixed mask (duet bench --mask fixed) its exchange is smaller
// (S does not travel) and the rest the same.
func TestLoopSizes(t *testing.T) {
	cs, _ := pendulum(t)
	per, err := loopSizes(cs, mpc.PerTick)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := loopSizes(cs, mpc.FixedMask)
	if err != nil {
		t.Fatal(err)
	}
	if fixed.Exchange <= 0 || fixed.Exchange >= per.Exchange || fixed.Measure != per.Measure || fixed.Output != per.Output || fixed.OneWay || per.OneWay {
		t.Errorf("per-tick %+v, fixed %+v: want a smaller exchange with the fixed mask, the rest equal", per, fixed)
	}
}

func TestScaleFloorQuick(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	quiesced := countQuiesce(t)
	rows, err := RunScaleFloor(context.Background(), url, nil, cs, mpc.PerTick, []int{3, 6}, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	if *quiesced != 2 {
		t.Errorf("quiesced %d times for 2 steps of the floor alone: want one before each", *quiesced)
	}
	for _, r := range rows {
		// 25 Hz for 0.4 s measured: about 10 ticks per loop, each completed.
		if r.Ticks < r.Loops*8 || r.Ticks > r.Loops*12 || r.P50 <= 0 || r.P99 < r.P50 || r.CPU <= 0 {
			t.Errorf("%+v: want about 10 ticks per loop, p50 <= p99", r)
		}
		checkSteal(t, fmt.Sprintf("%+v", r), r.Steal)
		checkWaits(t, fmt.Sprintf("%+v", r), r.SchedP99, r.SyscallsPerTick)
		checkRSS(t, fmt.Sprintf("%+v", r), r.RSS)
		// A stall monitor ran through the step (0.4 s of 1 ms sleeps), so
		// its latest wake-up was late by some microseconds at least.
		if r.Stalls < 0 || r.StallMax <= 0 || r.StallMax > 10*time.Second {
			t.Errorf("%+v: stalls %d, the worst %v", r, r.Stalls, r.StallMax)
		}
	}
}

// checkRSS checks a resident size: on Linux a process of the bench holds at
// least a few MB and far less than the machine.
func checkRSS(t *testing.T, what string, mb float64) {
	t.Helper()
	if runtime.GOOS == "linux" && (math.IsNaN(mb) || mb < 4 || mb > 1<<20) {
		t.Errorf("%s: resident %v MB", what, mb)
	}
}

func TestParseRSS(t *testing.T) {
	checkParser(t, "parseRSS", parseRSS, "Name:\tduet\nVmPeak:\t 1000 kB\nVmRSS:\t  759432 kB\nRssAnon:\t 700000 kB\n", 759432, map[string]string{
		"no VmRSS line": "Name:\tduet\nRssAnon:\t 700000 kB\n",
		"no unit":       "VmRSS:\t759432\n",
		"other unit":    "VmRSS:\t759432 MB\n",
		"not a number":  "VmRSS:\tlots kB\n",
	})
	if mb := processRSS(); runtime.GOOS == "linux" && (math.IsNaN(mb) || mb <= 0) {
		t.Errorf("processRSS() = %v on Linux", mb)
	}
}

func TestAbandonedBy(t *testing.T) {
	if got := (ScaleRow{}).AbandonedBy(); got != "" {
		t.Errorf("no abandoned tick: %q, want empty", got)
	}
	r := ScaleRow{PartyAbandoned: map[string]int{"late": 12, "item_mismatch": 1, "no_item": 3}}
	if got, want := r.AbandonedBy(), "item_mismatch=1 late=12 no_item=3"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := r.RejectsBy(); got != "" || r.Rejected() != 0 {
		t.Errorf("no refused message: %q, %d", got, r.Rejected())
	}
	r.PartyRejects = map[string]int{"overload": 7, "kind": 2}
	if got, want := r.RejectsBy(), "kind=2 overload=7"; got != want || r.Rejected() != 9 {
		t.Errorf("got %q (%d in all), want %q (9)", got, r.Rejected(), want)
	}
}

func TestParseSteal(t *testing.T) {
	// 3062: the aggregate line's eighth value.
	checkParser(t, "parseSteal", parseSteal, "cpu  52911 0 15591 202786 379 0 5638 3062 0 0\ncpu0 26000 0 7000 101000 200 0 2800 1500 0 0\nintr 1 2 3\n", 3062, map[string]string{
		"no aggregate line": "cpu0 1 2 3 4 5 6 7 8\nintr 1\n",
		"no steal field":    "cpu  1 2 3 4 5 6 7\n",
		"not a number":      "cpu  1 2 3 4 5 6 7 x 0 0\n",
		"negative":          "cpu  1 2 3 4 5 6 7 -8 0 0\n",
		"empty":             "",
	})
	// The meter: NaN only where steal cannot be read, and both readings are
	// rates over the interval.
	m := startCPUMeter()
	busy, c0 := time.Now(), cpuTime()
	for cpuTime()-c0 < 20*time.Millisecond && time.Since(busy) < 5*time.Second {
	}
	cpu, stolen := m.cores(0)
	if cpu <= 0 || cpu > float64(runtime.NumCPU())+0.5 {
		t.Errorf("process CPU %v cores over a busy loop", cpu)
	}
	if _, ok := machineSteal(); ok == math.IsNaN(stolen) {
		t.Errorf("steal readable %v, stolen %v", ok, stolen)
	}
	if got := Cores(math.NaN()); got != "n/a" {
		t.Errorf("Cores(NaN) = %q", got)
	}
}

// checkSteal checks a row's stolen CPU: read on Linux (NaN elsewhere), never
// negative, and never more than the machine's cores.
func checkSteal(t *testing.T, what string, s float64) {
	t.Helper()
	if runtime.GOOS == "linux" && math.IsNaN(s) || s < 0 || s > float64(runtime.NumCPU()) {
		t.Errorf("%s: stolen %v cores", what, s)
	}
}

// TestWriteGCSeries: a collection inside the window is written, relative to
// its start; one before the window is not.
func TestWriteGCSeries(t *testing.T) {
	runtime.GC()
	time.Sleep(5 * time.Millisecond)
	from := time.Now()
	time.Sleep(5 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	to := time.Now()
	path := filepath.Join(t.TempDir(), "gc.csv")
	if err := writeGCSeries(path, from, to); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "end_ms,pause_us" || len(lines) != 3 {
		t.Fatalf("gc series %q: want the header and the window's two collections", b)
	}
	window := float64(to.Sub(from)) / 1e6
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		end, err1 := strconv.ParseFloat(f[0], 64)
		pause, err2 := strconv.ParseFloat(f[1], 64)
		if len(f) != 2 || err1 != nil || err2 != nil || end < 5 || end > window || pause <= 0 {
			t.Errorf("gc series line %q (window %.1f ms)", l, window)
		}
	}
}

// countQuiesce counts the calls of quiesce until the test ends (the real
// one still runs).
func countQuiesce(t *testing.T) *int {
	n := new(int)
	orig := quiesce
	quiesce = func() { *n++; orig() }
	t.Cleanup(func() { quiesce = orig })
	return n
}

// With many loops' ticks close together (40 loops 1 ms apart, against the
// parties' DUET_PERSIST_DELAY of 2 ms) P0 holds its Protocol 2 messages for
// the batch of the other loops' deferred work, and the loops still run
// right: every answer within the float controller's bound, nothing refused,
// the ticks answered.
func TestScaleHoldsTrunc(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 40 loops")
	}
	ns, url := startServerNS(t)
	cs, _ := pendulum(t)
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{40}, Duration: 1500 * time.Millisecond, Warmup: 300 * time.Millisecond,
		Controller: cs, Variant: mpc.PerTick, Compress: true, TwoHop: true, Server: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	t.Logf("%+v", r)
	if r.PeerHeldPerTick < 0.05 || r.PeerHeldPerTick > 1 {
		t.Errorf("%.2f of P0's Protocol 2 messages held per tick, want some and at most one", r.PeerHeldPerTick)
	}
	if r.Wrong != 0 || r.Rejected() != 0 {
		t.Errorf("%d wrong answers, refused %s", r.Wrong, r.RejectsBy())
	}
	if r.Ticks < 40*30 || r.Misses > r.Ticks/20 {
		t.Errorf("%d ticks, %d misses: want about 37 a loop, nearly all answered in time", r.Ticks, r.Misses)
	}
	// Held, they travel in batches: fewer NATS messages than envelopes.
	if r.PeerMsgsPerTick >= r.PeerEnvsPerTick || r.PeerEnvsPerTick < 2.5 {
		t.Errorf("%.2f peer messages per tick for %.2f envelopes", r.PeerMsgsPerTick, r.PeerEnvsPerTick)
	}
}

// countingPipes is the embedded server's InProcessConn, counting the
// connections made through it.
type countingPipes struct {
	srv *server.Server
	n   atomic.Int64
}

func (c *countingPipes) InProcessConn() (net.Conn, error) {
	c.n.Add(1)
	return c.srv.InProcessConn()
}

// TestScaleQuickInProcess: with InProcess (duet bench --in-process) every
// connection of a step but the set-up's admin one reaches the server in
// process (none of the loops' services, dealers or floor relays over TCP),
// the persisted two-hop loops still compute every output right, and the
// row and its CSV line say so. Another process cannot share the bench's
// memory: with PartyBin or ServerOutside the search refuses at once.
func TestScaleQuickInProcess(t *testing.T) {
	ns, url := startServerNS(t)
	cs, _ := pendulum(t)
	pipes := &countingPipes{srv: ns}
	connections := func() uint64 {
		v, err := ns.Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.TotalConnections
	}
	before := connections()
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Server: ns, InProcess: pipes, Loops: []int{3}, Duration: 400 * time.Millisecond,
		Warmup: 200 * time.Millisecond, Controller: cs, Variant: mpc.PerTick, Compress: true, TwoHop: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if !r.InProcess || !r.Persist || r.Ticks < r.Loops*8 || r.Wrong != 0 || r.PartyMisses != 0 || r.TwoHopTicks < r.Ticks*3/4 || r.FloorTicks < r.Loops*8 || r.FloorMisses != 0 {
		t.Errorf("%+v: want in process, persisted, about 10 ticks per loop and its floor's, most sent masked, no wrong result and no miss", r)
	}
	piped := pipes.n.Load()
	tcp := connections() - before - uint64(piped)
	if piped < 10 || tcp != 1 {
		t.Errorf("%d connections in process, %d over TCP: want the services', the dealers' and the floor's in process (at least 10) and only the admin's over TCP", piped, tcp)
	}
	dir := t.TempDir()
	if err := (&Report{Scale: rows}).WriteCSVs(dir); err != nil {
		t.Fatal(err)
	}
	if recs := readCSV(t, filepath.Join(dir, "scale_detail.csv")); len(recs) != 2 || recs[0][len(recs[0])-3] != "in_process" || recs[1][len(recs[1])-3] != "true" {
		t.Errorf("scale_detail.csv %q: want an in_process column, true", recs)
	}
	for _, opt := range []ScaleOptions{
		{URL: url, InProcess: pipes, PartyBin: "/bin/true", Loops: []int{3}, Controller: cs},
		{URL: url, InProcess: pipes, ServerOutside: true, Loops: []int{3}, Controller: cs},
	} {
		n := pipes.n.Load()
		if _, err := RunScale(context.Background(), opt); !errors.Is(err, ErrInProcess) || pipes.n.Load() != n {
			t.Errorf("PartyBin %q, ServerOutside %v: %v, %d connections made; want ErrInProcess before any", opt.PartyBin, opt.ServerOutside, err, pipes.n.Load()-n)
		}
	}
	if _, err := Run(context.Background(), Options{URL: url, Out: t.TempDir(), Sections: []string{"scale"}, Plan: &Plan{ScaleInProcess: true}}); !errors.Is(err, ErrInProcess) {
		t.Errorf("Run with an external server and ScaleInProcess: %v, want ErrInProcess", err)
	}
}

// TestLightLoopVerdicts feeds the harness's actuator side sealed output
// shares: a right u, a wrong one, a tick with one share only, a replayed
// share and an out-of-range tick, and checks the verdicts its results give.
func TestLightLoopVerdicts(t *testing.T) {
	cs, _ := pendulum(t)
	rz, err := cs.Resolve(mpc.PerTick)
	if err != nil {
		t.Fatal(err)
	}
	prm := rz.Params
	f := prm.Field
	ids, err := newIdentities()
	if err != nil {
		t.Fatal(err)
	}
	const loop = "verdicts"
	bound := sim.OutputBound(cs, rz)
	l, err := newLightLoop(ids, nil, loop, cs, prm, bound, false)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, prm.M)
	for i := range want {
		want[i] = 0.25 * float64(i+1)
	}
	// send seals party id's share of u (encoded as the parties' outputs
	// are, at scale 2L) for tick tk.
	shares := map[uint64][2]mpc.Matrix{}
	send := func(tk uint64, id int, u []float64) {
		t.Helper()
		s, ok := shares[tk]
		if !ok {
			enc := mpc.NewMatrix(prm.M, 1)
			if err := f.EcdInto(enc.Data, u, prm.K+prm.L, 2*prm.L); err != nil {
				t.Fatal(err)
			}
			s = [2]mpc.Matrix{mpc.NewMatrix(prm.M, 1), mpc.NewMatrix(prm.M, 1)}
			if err := f.ShareInto(rand.Reader, enc, s[0], s[1]); err != nil {
				t.Fatal(err)
			}
			shares[tk] = s
		}
		sl, err := ids.sealer(codec.PartyRole(id))
		if err != nil {
			t.Fatal(err)
		}
		body, err := codec.Marshal(codec.OutputPayload{Item: tk, U: codec.PutMatrix(f, s[id])})
		if err != nil {
			t.Fatal(err)
		}
		env, err := sl.Seal(codec.Header{Kind: codec.KindOutput, Loop: loop, Tick: tk, From: codec.PartyRole(id), To: codec.RoleActuator}, body)
		if err != nil {
			t.Fatal(err)
		}
		l.onOutput(&nats.Msg{Data: env})
	}
	for tk := uint64(1); tk <= 4; tk++ {
		l.record(tk, want, tk > 1, false) // tick 1 is warm-up
	}
	wrongU := append([]float64(nil), want...)
	wrongU[0] += 100 * bound
	send(1, 0, want)
	send(1, 1, want)
	send(2, 1, want)
	send(2, 1, want) // a replay: not a second share
	send(2, 0, want)
	send(3, 0, wrongU)
	send(3, 1, wrongU)
	send(4, 0, want) // tick 4's second share never comes
	send(9, 0, want) // a tick never sent
	send(9, 1, want)
	lat, sent, misses, wrong := l.results(time.Minute)
	if sent != 3 || len(lat) != 1 || misses != 1 || wrong != 1 {
		t.Fatalf("sent %d, on time %d, misses %d, wrong %d: want 3 measured, 1 on time, 1 miss (tick 4), 1 wrong (tick 3)", sent, len(lat), misses, wrong)
	}
	// A deadline every tick missed turns the completed ones into misses.
	if _, _, misses, _ := l.results(0); misses != 3 {
		t.Fatalf("with a zero deadline %d misses, want 3", misses)
	}
}

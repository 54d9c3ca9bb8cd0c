package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/duet-mpc/duet/internal/party"
)

func TestParsePidStatCPU(t *testing.T) {
	// 52 fields as the kernel writes them; utime 150 and stime 50 ticks.
	rest := " S 1 100 100 0 -1 4194560 2000 0 0 0 150 50 0 0 20 0 9 0 1234 2000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	for _, tc := range []struct {
		line string
		want float64
		ok   bool
	}{
		{"4242 (party)" + rest, 2.0, true},
		{"4242 (a (b) c)" + rest, 2.0, true}, // a name with spaces and parentheses
		{"4242 (party) S 1 100", 0, false},   // too few fields
		{"4242 party" + rest, 0, false},      // no name
		{"4242 (party)" + strings.Replace(rest, " 150 ", " x ", 1), 0, false},
	} {
		got, err := parsePidStatCPU(tc.line)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parsePidStatCPU(%.30q...) = %v, %v; want %v (ok %v)", tc.line, got, err, tc.want, tc.ok)
		}
	}
	// This process's own line parses, and its CPU does not go backwards.
	a, err := pidCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
	}
	if b, err := pidCPU(os.Getpid()); err != nil || b < a {
		t.Errorf("pidCPU: %v then %v (%v)", a, b, err)
	}
}

// partyCounts reads the counters a step needs from a party's exposition,
// summed over loops, the abandoned ticks by reason.
func TestPartyCountsAdd(t *testing.T) {
	text := `# TYPE duet_deadline_misses_total counter
duet_deadline_misses_total{loop="a"} 2
duet_deadline_misses_total{loop="b"} 3
# TYPE duet_ticks_abandoned_total counter
duet_ticks_abandoned_total{loop="a",reason="late"} 1
duet_ticks_abandoned_total{loop="b",reason="late"} 1
duet_ticks_abandoned_total{loop="b",reason="no_item"} 3
# TYPE duet_queue_low_water_total counter
duet_queue_low_water_total{loop="a"} 4
# TYPE duet_measurements_held_total counter
duet_measurements_held_total{loop="a"} 5
# TYPE duet_peer_messages_total counter
duet_peer_messages_total 70
# TYPE duet_peer_envelopes_total counter
duet_peer_envelopes_total 90
# TYPE duet_rejects_total counter
duet_rejects_total{reason="kind"} 2
duet_rejects_total{reason="overload"} 5
# TYPE duet_tick_paths_total counter
duet_tick_paths_total{loop="a",path="two_hop"} 50
duet_tick_paths_total{loop="a",path="fallback"} 6
duet_tick_paths_total{loop="b",path="fallback"} 1
# TYPE duet_other_total counter
duet_other_total 1000
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	c := partyCounts{abandoned: map[string]float64{}}
	c.add(mfs)
	c.add(mfs) // the other party
	if c.misses != 10 || c.noItem != 8 || c.held != 10 || c.peerMsgs != 140 || c.envs != 180 ||
		c.abandoned["late"] != 4 || c.abandoned["no_item"] != 6 || len(c.abandoned) != 2 || c.fallback != 14 ||
		c.rejects["kind"] != 4 || c.rejects["overload"] != 10 || len(c.rejects) != 2 {
		t.Errorf("%+v", c)
	}
}

// buildParty builds cmd/party into a temporary directory.
func buildParty(t *testing.T) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		if goBin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to build cmd/party with")
		}
	}
	bin := filepath.Join(t.TempDir(), "party")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/duet-mpc/duet/cmd/party")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/party: %v\n%s", err, out)
	}
	return bin
}

// running reports whether a process runs the executable bin.
func running(t *testing.T, bin string) bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, e := range ents {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			return true
		}
	}
	return false
}

// TestScalePartyProcs: a real step with the parties as the real party
// service's processes, with the two-hop tick as the shipped deployments
// run it: every output right, the parties' counters read from their
// /metrics and their CPU from /proc, and the processes gone after.
func TestScalePartyProcs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the party processes' CPU is read from /proc")
	}
	bin := buildParty(t)
	url := startServer(t)
	cs, _ := pendulum(t)
	// 1.5 s, not less: /proc counts a process's CPU in 10-ms clock ticks,
	// and over 0.6 s a party process at about 0.03 cores was read as 0 in
	// two of twelve runs.
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{3}, Duration: 1500 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Controller: cs, Compress: true, PartyBin: bin, TwoHop: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	r := rows[0]
	if !r.PartyProcs || !r.Persist || r.Ticks < r.Loops*30 || r.Wrong != 0 {
		t.Errorf("%+v: want the parties as processes, persisted, about 37 ticks per loop and no wrong result", r)
	}
	// Both parties send the other a message per tick: read from their
	// /metrics, so non-zero only if the counters were read.
	if r.PeerMsgsPerTick < 0.5 || r.PeerEnvsPerTick < 0.5 {
		t.Errorf("peer messages %.2f, envelopes %.2f per tick: the party processes' counters were not read", r.PeerMsgsPerTick, r.PeerEnvsPerTick)
	}
	if !(r.Roles.Party[0] > 0 && r.Roles.Party[1] > 0) || !(r.CPU > r.Roles.Pair()) {
		t.Errorf("parties' cores %v, step's %v: want both parties' CPU measured and in the step's", r.Roles.Party, r.CPU)
	}
	// Every tick decodes and seals messages in both processes: their heaps'
	// allocations, read from their /metrics, are not zero (and not the
	// bench process's, which the in-process parties leave unknown).
	if !(r.PartyAllocPerTick > 0) || r.PartyGCs < 0 {
		t.Errorf("party processes' allocations %.0f B per tick, %d collections: not read from their /metrics", r.PartyAllocPerTick, r.PartyGCs)
	}
	// The processes got DUET_TWO_HOP: without their mask shares no
	// measurement goes out masked.
	if !r.TwoHop || r.TwoHopTicks < r.Ticks/2 || r.TwoHopTicks > r.Ticks || r.FallbackTicks < 0 {
		t.Errorf("%+v: want most of the %d ticks sent masked", r, r.Ticks)
	}
	if running(t, bin) {
		t.Errorf("a party process still runs after the step")
	}
}

// TestPartyEnvPrefetch: --prefetch reaches the party processes as
// DUET_PREFETCH, and without it they keep the service's default.
func TestPartyEnvPrefetch(t *testing.T) {
	t.Setenv("DUET_PREFETCH", "3") // the bench's own DUET_ variables never reach them
	find := func(env []string) (string, int) {
		v, n := "", 0
		for _, e := range env {
			if s, ok := strings.CutPrefix(e, "DUET_PREFETCH="); ok {
				v, n = s, n+1
			}
		}
		return v, n
	}
	r := &rig{url: "nats://127.0.0.1:4222"}
	if v, n := find(r.partyEnv(0, []string{"a"}, true, "/keys", "127.0.0.1:1")); n != 0 {
		t.Errorf("default prefetch: DUET_PREFETCH=%s in the party's environment, want none", v)
	}
	r.prefetch = 16
	if v, n := find(r.partyEnv(1, []string{"a"}, true, "/keys", "127.0.0.1:1")); v != "16" || n != 1 {
		t.Errorf("prefetch 16: DUET_PREFETCH=%q (%d times), want 16 once", v, n)
	}
	if got := r.prefetchOrDefault(); got != 16 {
		t.Errorf("prefetchOrDefault = %d, want 16", got)
	}
	if got := (&rig{}).prefetchOrDefault(); got != party.DefaultPrefetch {
		t.Errorf("prefetchOrDefault unset = %d, want %d", got, party.DefaultPrefetch)
	}
}

// A party process that exits ends the step at once with its output, not
// after the set-up's timeout.
func TestScalePartyProcExits(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "party")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'party: config: bad news' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	url := startServer(t)
	cs, _ := pendulum(t)
	began := time.Now()
	_, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{2}, Duration: 200 * time.Millisecond, Warmup: 100 * time.Millisecond,
		Controller: cs, Compress: true, NoPersist: true, PartyBin: bin})
	if err == nil || !strings.Contains(err.Error(), "bad news") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want the process's exit status and output", err)
	}
	if took := time.Since(began); took > time.Minute {
		t.Errorf("took %v to notice", took)
	}
}

// TestTickPartyProcs: the tick case with the parties as the real party
// service's processes, in two hops as the shipped deployments run it: every
// tick applied and right, each paced on the processes' completed ticks read
// from their /metrics (a tick they were not seen to complete counts as
// abandoned), their fallbacks read from there too, and the processes gone
// after.
func TestTickPartyProcs(t *testing.T) {
	bin := buildParty(t)
	url := startServer(t)
	cs, ps := pendulum(t)
	c := TickCases(cs, ps, nil)[3]
	if c.Name != "pendulum-2hop" || !c.TwoHop {
		t.Fatalf("case %+v, want pendulum-2hop", c)
	}
	const ticks = 20
	row, err := RunTick(context.Background(), TickOptions{URL: url, Ticks: ticks, Warmup: 10, Block: 10, Compress: true, PartyBin: bin}, c)
	if err != nil {
		t.Fatal(err)
	}
	if !row.PartyProcs || row.Lat.N+row.Misses != ticks || row.Misses > 1 || row.MaxDiff > row.Bound || row.Floor.N != ticks {
		t.Errorf("%+v: want the parties as processes and %d ticks applied within the bound", row, ticks)
	}
	if row.Abandoned != 0 {
		t.Errorf("%d ticks abandoned: the processes' completed ticks were not read", row.Abandoned)
	}
	// The processes got DUET_TWO_HOP: without their mask shares no
	// measurement goes out masked.
	if row.TwoHopTicks-row.FallbackTicks < ticks/2 {
		t.Errorf("%d ticks sent masked, %d of them in three hops, of %d", row.TwoHopTicks, row.FallbackTicks, ticks)
	}
	if running(t, bin) {
		t.Errorf("a party process still runs after the case")
	}
}

// Two party processes that both ignore SIGTERM are both killed once the 5 s
// have passed; with one time.After channel shared by the two waits, the
// second was waited for forever.
func TestStopProcsKillsEveryStubbornProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "party")
	// exec: the shell itself ignores SIGTERM and sleeps, so no child is
	// left behind by the kill.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ntrap '' TERM\necho started\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &rig{}
	for i := range 2 {
		p := &partyProc{id: i, out: &tailBuffer{}, done: make(chan struct{})}
		p.cmd = exec.Command(bin)
		p.cmd.Stdout = p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.done)
		}()
		r.procs = append(r.procs, p)
	}
	// Both have set their trap before the SIGTERM.
	for _, p := range r.procs {
		for give := time.Now().Add(10 * time.Second); !strings.Contains(p.out.String(), "started"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(give) {
				for _, p := range r.procs {
					_ = p.cmd.Process.Kill()
				}
				t.Fatalf("party%d did not start in 10 s: %s", p.id, p.out.String())
			}
		}
	}
	stopped := make(chan struct{})
	go func() {
		r.stopProcs()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		for _, p := range r.procs {
			_ = p.cmd.Process.Kill()
		}
		t.Fatal("stopProcs still waits 30 s on, for a process it did not kill")
	}
	for _, p := range r.procs {
		select {
		case <-p.done:
		default:
			t.Errorf("party%d still runs", p.id)
		}
	}
}

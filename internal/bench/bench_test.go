package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/stall"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatalf("%s is empty", path)
	}
	return recs
}

// TestRunWritesFiles runs Fig. 5 and the tick section with a tiny plan and
// checks the files: exact headers, one tick.csv row per required case.
func TestRunWritesFiles(t *testing.T) {
	url := startServer(t)
	out := t.TempDir()
	plan := Plan{Fig5Ds: []int{10}, Fig5Reps: 5, Fig5Warmup: 1, Ticks: 10, TickWarmup: 5, TickBlock: 5, TickNs: []int{4, 16, 32, 64}, MachineRTTs: 20}
	quiesced := countQuiesce(t)
	rep, err := Run(context.Background(), Options{URL: url, Out: out, Sections: []string{SectionFig5, SectionTick},
		Examples: "../../examples/qube-servo2", Plan: &plan})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name   string
		header []string
		rows   int
	}{
		{"protocol1.csv", []string{"variant", "d", "reps", "min_us", "mean_us", "max_us", "ci99_lo_us", "ci99_hi_us", "bytes_per_party"}, 2},
		{"protocol2.csv", []string{"d", "reps", "min_us", "mean_us", "max_us", "ci99_lo_us", "ci99_hi_us", "bytes_per_party"}, 1},
		{"tick.csv", []string{"case", "p50_us", "p99_us", "floor_p50_us", "floor_p99_us"}, 9},
		{"fig5_floor.csv", Fig5FloorHeader, 3},
		{"tick_detail.csv", TickDetailHeader, 9},
		{"machine.csv", MachineHeader, 1},
	} {
		recs := readCSV(t, filepath.Join(out, f.name))
		if !slices.Equal(recs[0], f.header) {
			t.Errorf("%s header %q, want %q", f.name, recs[0], f.header)
		}
		if len(recs)-1 != f.rows {
			t.Errorf("%s has %d rows, want %d", f.name, len(recs)-1, f.rows)
		}
	}
	var cases []string
	for _, r := range readCSV(t, filepath.Join(out, "tick.csv"))[1:] {
		cases = append(cases, r[0])
	}
	for _, want := range []string{"pendulum", "pendulum-2hop", "n4", "n16", "n32", "n32-2hop", "n64"} {
		if !slices.Contains(cases, want) {
			t.Errorf("tick.csv has no %s row (rows %v)", want, cases)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "fig5.png")); err != nil {
		t.Error(err)
	}
	for _, r := range rep.Tick {
		if r.Lat.N+r.Misses != 10 || r.Floor.N != 10 || r.ColdFloor.N != 10 || r.MaxDiff > r.Bound {
			t.Errorf("%s: %d ticks + %d misses, %d floor ticks (%d from idle), max |u - uplain| %g (bound %g)", r.Case, r.Lat.N, r.Misses, r.Floor.N, r.ColdFloor.N, r.MaxDiff, r.Bound)
		}
		// The floor reads a plant before each tick, as the sensor does: the
		// sizes come from the case's own plant read.
		if r.Sizes.PlantRequest == 0 || r.Sizes.PlantReply <= r.Sizes.PlantRequest {
			t.Errorf("%s: plant read %d / %d bytes", r.Case, r.Sizes.PlantRequest, r.Sizes.PlantReply)
		}
		checkSteal(t, r.Case, r.Steal)
		// The two-hop rows measure the two-hop tick: most of their ticks
		// go masked (a stall of the machine may send a few in three hops);
		// the others never do.
		if two := strings.HasSuffix(r.Case, "-2hop"); two && (r.TwoHopTicks-r.FallbackTicks < r.Lat.N/2 || r.TwoHopTicks > 10) || !two && r.TwoHopTicks+r.FallbackTicks != 0 {
			t.Errorf("%s: %d ticks sent masked, %d of them fell back to three hops, of %d measured", r.Case, r.TwoHopTicks, r.FallbackTicks, r.Lat.N+r.Misses)
		}
	}
	// The machine's speed is measured once, before the sections.
	if m := rep.Machine; m == nil || m.RTTs != 20 || m.MatVecRuns != machineMatVecs || m.MatVec <= 0 || !(0 < m.RTTMin && m.RTTMin <= m.RTTP50 && m.RTTP50 <= m.RTTP99) {
		t.Errorf("machine: %+v", rep.Machine)
	}
	// The Fig. 5 points and the tick cases run in a warm process (quiesce).
	if *quiesced != 0 {
		t.Errorf("quiesced %d times for %d Fig. 5 points and %d tick cases, want none", *quiesced, len(rep.Fig5), len(rep.Tick))
	}
	if len(rep.Targets()) != 5 {
		t.Errorf("%d targets, want 5", len(rep.Targets()))
	}
}

// TestN32TargetTwoHop: the n = 32 target is met by either path, and says
// what both measured beside their floors.
func TestN32TargetTwoHop(t *testing.T) {
	row := func(name string, p50, floor time.Duration) TickRow {
		return TickRow{Case: name, Lat: Stats{N: 10, P50: p50}, Floor: Stats{N: 10, P50: floor}}
	}
	n32 := func(rep *Report) Target {
		for _, tg := range rep.Targets() {
			if strings.HasPrefix(tg.Name, "n=32") {
				return tg
			}
		}
		t.Fatal("no n=32 target")
		return Target{}
	}
	rep := &Report{Tick: []TickRow{row("n32", 400*time.Microsecond, 390*time.Microsecond), row("n32-2hop", 280*time.Microsecond, 260*time.Microsecond)}}
	if tg := n32(rep); !tg.Measured || !tg.Met || tg.Got != "400 µs (floor 390 µs); two hops 280 µs (two-hop floor 260 µs)" {
		t.Errorf("two hops under 300 µs: %+v", tg)
	}
	// Met under floors that are both above the target: the tick beat its
	// floor, which the summary must not call the reason for a miss.
	rep.Tick[1] = row("n32-2hop", 298*time.Microsecond, 336*time.Microsecond)
	if tg := n32(rep); !tg.Measured || !tg.Met || tg.Got != "400 µs (floor 390 µs); two hops 298 µs (two-hop floor 336 µs)" {
		t.Errorf("two hops under 300 µs, both floors over: %+v", tg)
	}
	rep.Tick[1] = row("n32-2hop", 310*time.Microsecond, 305*time.Microsecond)
	if tg := n32(rep); !tg.Measured || tg.Met || !strings.HasSuffix(tg.Got, ": the bare messaging alone is above the target here") {
		t.Errorf("both paths over 300 µs, both floors too: %+v", tg)
	}
	rep.Tick = rep.Tick[:1]
	if tg := n32(rep); !tg.Measured || tg.Met || tg.Got != "400 µs (floor 390 µs): the bare messaging alone is above the target here" {
		t.Errorf("three hops only: %+v", tg)
	}
}

// The tick targets say when the parties ran as processes of their own
// (--party-bin), and only then: their floor is of that shape.
func TestTickTargetsSayProcesses(t *testing.T) {
	for _, procs := range []bool{false, true} {
		rep := &Report{Tick: []TickRow{
			{Case: "pendulum", Lat: Stats{N: 10, P50: 700 * time.Microsecond, P99: time.Millisecond}, Floor: Stats{N: 10, P50: 500 * time.Microsecond, P99: time.Millisecond}, PartyProcs: procs},
			{Case: "n32", Lat: Stats{N: 10, P50: 800 * time.Microsecond}, Floor: Stats{N: 10, P50: 600 * time.Microsecond}, PartyProcs: procs},
		}}
		for _, tg := range rep.Targets()[:3] {
			if got := strings.Contains(tg.Got, "in processes of their own"); got != procs {
				t.Errorf("parties as processes %v: %s: %q", procs, tg.Name, tg.Got)
			}
		}
	}
}

// TestOtherCSVHeaders checks the headers of the files the slow sections write.
func TestOtherCSVHeaders(t *testing.T) {
	out := t.TempDir()
	rep := &Report{Dealer: []DealerRow{{Case: "pendulum", Replicas: 1}}, Scale: []ScaleRow{{Loops: 50, P99: time.Millisecond, OK: true, Persist: true}, {Loops: 50, OK: true, Variant: mpc.FixedMask, Try: 2}}, ScaleLimit: 10 * time.Millisecond,
		ScaleFloor: []ScaleFloorRow{{Loops: 500, Ticks: 100, Misses: 1, P99: 7 * time.Millisecond, Steal: math.NaN(), Stalls: 2, StallMax: 12300 * time.Microsecond, RSS: 212.4}},
		Idle:       []IdleRow{{When: "before", Took: 10 * time.Second, Result: stall.Result{Wakeups: 9000, Count: 3, Worst: 22400 * time.Microsecond}, CPU: 0.031}},
		Machine:    &MachineRow{MatVec: 33100 * time.Nanosecond, MatVecRuns: 200, RTTs: 1000, RTTMin: 21 * time.Microsecond, RTTP50: 48 * time.Microsecond, RTTP99: 112500 * time.Nanosecond}}
	if err := rep.write(out); err != nil {
		t.Fatal(err)
	}
	if got := readCSV(t, filepath.Join(out, "scale.csv")); !slices.Equal(got[0], []string{"loops", "p50_us", "p99_us", "misses", "ok"}) || len(got) != 2 {
		t.Errorf("scale.csv: %q", got)
	}
	if got := readCSV(t, filepath.Join(out, "dealer.csv")); !slices.Equal(got[0], DealerHeader) || len(got) != 2 {
		t.Errorf("dealer.csv: %q", got)
	}
	if got := readCSV(t, filepath.Join(out, "scale_floor.csv")); !slices.Equal(got[0], ScaleFloorHeader) || len(got) != 2 || got[1][0] != "500" || got[1][2] != "1" || got[1][6] != "" ||
		!slices.Equal(got[1][9:], []string{"2", "12.3", "212"}) {
		t.Errorf("scale_floor.csv: %q", got)
	}
	// scale_detail.csv records each step's variant and its try at its
	// loop count (1 where the row does not say).
	if got := readCSV(t, filepath.Join(out, "scale_detail.csv")); !slices.Equal(got[0], ScaleDetailHeader) || len(got) != 3 {
		t.Errorf("scale_detail.csv: header %q, %d rows", got[0], len(got)-1)
	} else if v, try := slices.Index(got[0], "variant"), slices.Index(got[0], "try"); v < 0 || try < 0 ||
		got[1][v] != "per-tick" || got[2][v] != "fixed" || got[1][try] != "1" || got[2][try] != "2" {
		t.Errorf("scale_detail.csv: variant and try columns in %q, rows %q", got[0], got[1:])
	}
	if got := readCSV(t, filepath.Join(out, "machine_idle.csv")); !slices.Equal(got[0], IdleHeader) || len(got) != 2 ||
		!slices.Equal(got[1], []string{"before", "10.0", "9000", "3", "22.4", "0.031"}) {
		t.Errorf("machine_idle.csv: %q", got)
	}
	if got := readCSV(t, filepath.Join(out, "machine.csv")); !slices.Equal(got[0], MachineHeader) || len(got) != 2 ||
		!slices.Equal(got[1], []string{"33.10", "200", "1000", "21.0", "48.0", "112.5"}) {
		t.Errorf("machine.csv: %q", got)
	}
	var scale Target
	for _, tg := range rep.Targets() {
		if strings.HasPrefix(tg.Name, ">= 500 loops") {
			scale = tg
		}
	}
	if !scale.Measured || scale.Met || !strings.Contains(scale.Got, "floor alone at 500 loops: p99 7.0 ms, 1 misses (the bare messaging alone misses the target here)") {
		t.Errorf("scale target: %+v", scale)
	}
}

// TestScaleTargetSaysWhy: the loops target names the largest count tried
// in each mode and, where it failed, what its step measured.
func TestScaleTargetSaysWhy(t *testing.T) {
	rep := &Report{ScaleLimit: 10 * time.Millisecond, Scale: []ScaleRow{
		{Loops: 50, Persist: true, OK: true},
		{Loops: 100, Persist: true, P99: 12 * time.Millisecond, Misses: 3, CPU: 1.9, SchedP99: 1500 * time.Microsecond, Stalls: 7, StallMax: 31200 * time.Microsecond, GCs: 1,
			FloorTicks: 15000, FloorP99: 8400 * time.Microsecond, FloorMisses: 2, FloorStalls: 5, FloorStallMax: 26500 * time.Microsecond},
		{Loops: 50, OK: true},
		{Loops: 100, P99: 11 * time.Millisecond, CPU: 1.5, SchedP99: 900 * time.Microsecond,
			Roles: RoleCPU{Party: [2]float64{0.3, 0.4}, Broker: 0.5, Samples: 120}}},
		Idle: []IdleRow{{When: "before", Took: 10 * time.Second, Result: stall.Result{Count: 4, Worst: 22400 * time.Microsecond}},
			{When: "after", Took: 10 * time.Second, Result: stall.Result{Count: 11, Worst: 12 * time.Millisecond}}}}
	var scale Target
	for _, tg := range rep.Targets() {
		if strings.HasPrefix(tg.Name, ">= 500 loops") {
			scale = tg
		}
	}
	want := "50 loops (largest tried 100: p99 12.0 ms, 3 misses, 1.90 cores, run-queue p99 1500 µs, 7 stalls over 5ms (the worst 31.2 ms), one collection in the window; its floor: p99 8.4 ms, 2 misses, 5 stalls over 5ms (the worst 26.5 ms)); " +
		"without persistence 50 (largest tried 100: p99 11.0 ms, 0 misses, 1.50 cores (the parties 0.70, the server 0.50), run-queue p99 900 µs, 0 stalls over 5ms (the worst 0.0 ms), no collection in the window); " +
		"this machine idle: 4 and 11 stalls over 5ms in 2 checks of 10 s, the worst 22.4 ms"
	if !scale.Measured || scale.Met || scale.Undecided || scale.Got != want {
		t.Errorf("scale target: %+v\nwant Got %q, missed (100 failed)", scale, want)
	}
	// With the fixed mask (duet bench --mask fixed) the target says so.
	rep.ScaleVariant = mpc.FixedMask
	for _, tg := range rep.Targets() {
		if strings.HasPrefix(tg.Name, ">= 500 loops") && !strings.Contains(tg.Got, "; the loops with the fixed mask;") {
			t.Errorf("fixed mask: scale target %q does not name it", tg.Got)
		}
	}
	// On a cold heap (duet bench --cold-heap) too; by default it says
	// nothing of the heap.
	for _, cold := range []bool{false, true} {
		rep.ScaleColdHeap = cold
		for _, tg := range rep.Targets() {
			if strings.HasPrefix(tg.Name, ">= 500 loops") && strings.Contains(tg.Got, "cold heap") != cold {
				t.Errorf("ScaleColdHeap %v: scale target %q", cold, tg.Got)
			}
		}
	}
}

// TestScaleTargetRepeats: with several steps per loop count (duet bench
// --repeat) a count holds only if every step at it held, and the target
// says how many did at the largest count tried.
func TestScaleTargetRepeats(t *testing.T) {
	rep := &Report{ScaleLimit: 10 * time.Millisecond, Scale: []ScaleRow{
		{Loops: 50, Persist: true, OK: true, Try: 1}, {Loops: 50, Persist: true, OK: true, Try: 2},
		{Loops: 100, Persist: true, OK: true, Try: 1},
		{Loops: 100, Persist: true, P99: 12 * time.Millisecond, Misses: 3, CPU: 1.9, Try: 2},
		{Loops: 100, Persist: true, OK: true, Try: 3},
		{Loops: 50, OK: true, Try: 1}, {Loops: 50, OK: true, Try: 2}}}
	var scale Target
	for _, tg := range rep.Targets() {
		if strings.HasPrefix(tg.Name, ">= 500 loops") {
			scale = tg
		}
	}
	want := "50 loops (largest tried 100, held in 2 of 3 steps: p99 12.0 ms, 3 misses, 1.90 cores, run-queue p99 0 µs, 0 stalls over 5ms (the worst 0.0 ms), no collection in the window); " +
		"without persistence 50 (largest tried 50, held in 2 of 2 steps; the last count searched, duet bench --loops sets them)"
	if !scale.Measured || scale.Met || scale.Undecided || scale.Got != want {
		t.Errorf("scale target: %+v\nwant Got %q, missed (100 failed)", scale, want)
	}
}

// TestServerOutside: with the server in another process (duet bench
// --nats) its share of a step and of the step's floor is not measured, and
// a failed step's reason says so instead of a server that cost nothing.
func TestServerOutside(t *testing.T) {
	r := ScaleRow{Loops: 300, Persist: true, P99: 20 * time.Millisecond, CPU: 1.2,
		Roles:      RoleCPU{Party: [2]float64{0.3, 0.3}, Broker: 0, Harness: 0.2, Samples: 700},
		FloorRoles: RoleCPU{Party: [2]float64{0.1, 0.1}, Broker: 0, Samples: 600}}
	r.serverOutside()
	if !math.IsNaN(r.Roles.Broker) || !math.IsNaN(r.FloorRoles.Broker) || r.Roles.Pair() != 0.6 || r.Roles.Harness != 0.2 {
		t.Fatalf("roles after serverOutside: %+v, floor %+v", r.Roles, r.FloorRoles)
	}
	if why := whyFailed(r); !strings.Contains(why, "(the parties 0.60, the server n/a (another process))") {
		t.Errorf("whyFailed = %q", why)
	}
}

// TestWhyFailedCollections: a failed step's reason says how many
// collections its window had, and with the parties in processes of their
// own (--party-bin) how many those had too; a step that held gives none.
func TestWhyFailedCollections(t *testing.T) {
	r := ScaleRow{Loops: 400, Persist: true, P99: 20 * time.Millisecond, Misses: 9, CPU: 1.5, GCs: 2}
	if why := whyFailed(r); !strings.Contains(why, "(the worst 0.0 ms), 2 collections in the window") || strings.Contains(why, "party processes") {
		t.Errorf("whyFailed = %q", why)
	}
	r.PartyProcs, r.GCs, r.PartyGCs = true, 0, 1
	if why := whyFailed(r); !strings.Contains(why, ", no collection in the window (the party processes: one collection)") {
		t.Errorf("whyFailed with party processes = %q", why)
	}
	r.OK = true
	if why := whyFailed(r); why != "" {
		t.Errorf("whyFailed of a step that held = %q", why)
	}
}

// TestIdleSummary: one check or several, and the singular.
func TestIdleSummary(t *testing.T) {
	for _, c := range []struct {
		rows []IdleRow
		want string
	}{
		{[]IdleRow{{Took: 2 * time.Second, Result: stall.Result{Count: 1, Worst: 6 * time.Millisecond}}}, "1 stall over 5ms in 2 s, the worst 6.0 ms"},
		{[]IdleRow{{Took: 10 * time.Second}}, "0 stalls over 5ms in 10 s, the worst 0.0 ms"},
		{[]IdleRow{{Took: 10 * time.Second, Result: stall.Result{Count: 1, Worst: 30 * time.Millisecond}}, {Took: 10 * time.Second, Result: stall.Result{Count: 1, Worst: 7 * time.Millisecond}}},
			"1 and 1 stalls over 5ms in 2 checks of 10 s, the worst 30.0 ms"},
	} {
		if got := idleSummary(c.rows); got != c.want {
			t.Errorf("idleSummary = %q, want %q", got, c.want)
		}
	}
}

// TestIdleCheck: the check runs the monitor for its time and records a row;
// a cancelled context records none and says so.
func TestIdleCheck(t *testing.T) {
	rep := &Report{}
	if err := idleCheck(context.Background(), 0, "before", rep, t.Logf); err != nil || len(rep.Idle) != 0 {
		t.Fatalf("idleCheck(0) = %v, rows %v; want nothing", err, rep.Idle)
	}
	if err := idleCheck(context.Background(), 60*time.Millisecond, "before", rep, t.Logf); err != nil {
		t.Fatal(err)
	}
	if len(rep.Idle) != 1 {
		t.Fatalf("rows %v, want one", rep.Idle)
	}
	r := rep.Idle[0]
	// A 1 ms sleeper wakes at most once a millisecond.
	if r.When != "before" || r.Took < 60*time.Millisecond || r.Wakeups < 1 || r.Wakeups > 61 || r.Count > r.Wakeups {
		t.Errorf("row %+v", r)
	}
	// The process's own CPU meanwhile: a sleeper's wake-ups, far below a core.
	if r.CPU < 0 || r.CPU > 0.9 || math.IsNaN(r.CPU) {
		t.Errorf("the process's CPU during the check: %v cores", r.CPU)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := idleCheck(ctx, time.Minute, "after", rep, t.Logf); !errors.Is(err, context.Canceled) || len(rep.Idle) != 1 {
		t.Errorf("cancelled: err %v, rows %d; want context.Canceled and no new row", err, len(rep.Idle))
	}
}

// TestIdleCheckQuiesces: what the sections before the check left behind is
// collected and returned to the OS before the sleeper starts, so the Go
// runtime does not do it in the background during the check (which stalled
// the sleeper itself).
func TestIdleCheckQuiesces(t *testing.T) {
	const garbage = 256 << 20
	func() {
		keep := make([][]byte, 0, garbage>>20)
		for i := range cap(keep) {
			b := make([]byte, 1<<20)
			b[0] = byte(i) // touch it: the pages are the process's
			keep = append(keep, b)
		}
	}()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapIdle - ms.HeapReleased + ms.HeapInuse
	if err := idleCheck(context.Background(), 5*time.Millisecond, "after", &Report{}, t.Logf); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&ms)
	// Held from the OS and not in use: what the scavenger would release during the check.
	if held := ms.HeapIdle - ms.HeapReleased; held > garbage/4 {
		t.Errorf("%d MB of free heap still held from the OS after the check started (%d MB held and in use before it)", held>>20, before>>20)
	}
	if ms.HeapInuse > garbage/2 {
		t.Errorf("%d MB of heap in use after the check: the garbage was not collected", ms.HeapInuse>>20)
	}
}

// TestTargetsFloorBound checks that a missed latency target says so when the
// floor itself is above it, and only then.
func TestTargetsFloorBound(t *testing.T) {
	for _, c := range []struct {
		lat, floor time.Duration
		met, bound bool
	}{{400 * time.Microsecond, 500 * time.Microsecond, false, true}, {400 * time.Microsecond, 250 * time.Microsecond, false, false},
		{250 * time.Microsecond, 280 * time.Microsecond, true, false}} {
		rep := &Report{Tick: []TickRow{{Case: "n32", Lat: Stats{P50: c.lat}, Floor: Stats{P50: c.floor}}}}
		var n32 Target
		for _, tg := range rep.Targets() {
			if strings.HasPrefix(tg.Name, "n=32") {
				n32 = tg
			}
		}
		if !n32.Measured || n32.Met != c.met || strings.Contains(n32.Got, "above the target") != c.bound {
			t.Errorf("p50 %v, floor %v: %+v", c.lat, c.floor, n32)
		}
	}
}

// TestWriteScalePlot: scale.png is a PNG of the plot's size for a search
// whose persisted half stopped after one step (each step is a point) and
// whose other half went on; a directory that cannot be written is an error.
func TestWriteScalePlot(t *testing.T) {
	rep := &Report{ScaleLimit: 10 * time.Millisecond,
		Scale: []ScaleRow{{Loops: 50, Persist: true, P50: time.Millisecond, P99: 3 * time.Millisecond, FloorP99: time.Millisecond},
			{Loops: 50, P99: time.Millisecond}, {Loops: 100, P99: 2 * time.Millisecond}},
		ScaleFloor: []ScaleFloorRow{{Loops: 100, P99: time.Millisecond}, {Loops: 500, P99: 8 * time.Millisecond}}}
	dir := t.TempDir()
	if err := rep.WriteScalePlot(dir, us(rep.ScaleLimit)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "scale.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("scale.png: %v", err)
	}
	if cfg.Width < 500 || cfg.Height < 250 {
		t.Errorf("scale.png is %dx%d", cfg.Width, cfg.Height)
	}
	if err := rep.WriteScalePlot(filepath.Join(dir, "missing", "dir"), 10000); err == nil {
		t.Error("a plot into a missing directory did not fail")
	}
}

// A tick case that missed or abandoned a tick meets no tick target,
// whatever its ratios (its latencies are those of the ticks applied in
// time), and the target says how many were lost.
func TestTickTargetsNeedEveryTick(t *testing.T) {
	good := func(c string) TickRow {
		return TickRow{Case: c, Lat: Stats{N: 10, P50: 200 * time.Microsecond, P99: 400 * time.Microsecond}, Floor: Stats{N: 10, P50: 190 * time.Microsecond, P99: 390 * time.Microsecond}}
	}
	rep := &Report{Tick: []TickRow{good("pendulum"), good("n32")}}
	for _, tg := range rep.Targets()[:3] {
		if !tg.Met {
			t.Fatalf("clean cases: %s not met: %q", tg.Name, tg.Got)
		}
	}
	rep.Tick[0].Misses, rep.Tick[1].Abandoned = 3, 2
	for _, tg := range rep.Targets()[:3] {
		if tg.Met || !strings.Contains(tg.Got, "ticks missed") {
			t.Errorf("lost ticks: %s met %v: %q", tg.Name, tg.Met, tg.Got)
		}
	}
	// n = 32 is met by a clean two-hop case beside a three-hop case that
	// lost ticks, and not by a two-hop case that lost ticks.
	rep.Tick = append(rep.Tick, good("n32-2hop"))
	if tg := rep.Targets()[2]; !tg.Met {
		t.Errorf("n32 with a clean two-hop case: %q", tg.Got)
	}
	rep.Tick[2].Misses = 1
	if tg := rep.Targets()[2]; tg.Met {
		t.Errorf("n32 with both cases losing ticks met: %q", tg.Got)
	}
}

// A scale search whose largest count held stopped at its time budget or
// after its last count: the target says which rather than calling that
// count the limit.
func TestScaleTargetSaysBudget(t *testing.T) {
	rep := &Report{ScaleLimit: 10 * time.Millisecond, Scale: []ScaleRow{
		{Loops: 50, Persist: true, OK: true}, {Loops: 100, Persist: true, OK: true},
		{Loops: 50, OK: true}, {Loops: 100, P99: 11 * time.Millisecond}},
		ScaleBudgetStop: [2]int{1: 200}}
	target := func() string {
		for _, tg := range rep.Targets() {
			if strings.HasPrefix(tg.Name, ">= 500 loops") {
				// Every count tried held: not a miss, not a limit.
				if !tg.Undecided || tg.Met {
					t.Errorf("scale target undecided %v, met %v: want undecided, every count tried having held", tg.Undecided, tg.Met)
				}
				return tg.Got
			}
		}
		return ""
	}
	got := target()
	persisted, without, _ := strings.Cut(got, "without persistence")
	if !strings.Contains(persisted, "largest tried 100; the search's time budget ran out before 200") || strings.Contains(without, "budget") || strings.Contains(got, "last count") {
		t.Errorf("scale target %q: want the budget named for the persisted search only", got)
	}
	// The same rows from a search whose counts ended at 100 (duet bench
	// --loops 50,100 has no budget).
	rep.ScaleBudgetStop = [2]int{}
	got = target()
	if !strings.Contains(got, "largest tried 100; the last count searched, duet bench --loops sets them") || strings.Contains(got, "budget") {
		t.Errorf("scale target %q: want the last count named, not a budget", got)
	}
	// The same rows from a search stopped by Ctrl-C after 100 held.
	rep.ScaleCut = [2]bool{1: true}
	got = target()
	persisted, _, _ = strings.Cut(got, "without persistence")
	if !strings.Contains(persisted, "largest tried 100; the search was cut short there") || strings.Contains(persisted, "last count") {
		t.Errorf("scale target %q: want the persisted search said to be cut short", got)
	}
}

// RunScale reports the count before which its budget stopped it (here
// spent before the first count, so that no step runs).
func TestRunScaleBudgetNamesNextCount(t *testing.T) {
	var next []int
	// A cancelled context: were the budget not checked, the first step
	// would end at once with an error instead of waiting for a server.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rows, err := RunScale(ctx, ScaleOptions{URL: "nats://127.0.0.1:1", Loops: []int{50, 100}, Budget: time.Nanosecond,
		OnBudget: func(n int) { next = append(next, n) }})
	if len(next) != 1 || next[0] != 50 || len(rows) != 0 || err != nil {
		t.Fatalf("budget already spent: OnBudget got %v, %d rows, err %v; want [50], no step run", next, len(rows), err)
	}
}

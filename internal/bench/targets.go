package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// Target is one of the performance targets and whether this run met it.
type Target struct {
	Name     string
	Got      string
	Met      bool
	Measured bool
	// Undecided: measured, but not far enough to say (a scale search
	// that held at every count it tried, all below the target).
	Undecided bool
}

// Targets evaluates the targets on what was measured.
func (rep *Report) Targets() []Target {
	var ts []Target
	tick := func(name string) (TickRow, bool) {
		for _, r := range rep.Tick {
			if r.Case == name {
				return r, true
			}
		}
		return TickRow{}, false
	}
	// procs says where the parties ran when they ran as processes
	// (TickOptions.PartyBin): a floor of that shape, not the same figures.
	procs := func(r TickRow) string {
		if r.PartyProcs {
			return "; the parties and the floor's relays in processes of their own"
		}
		return ""
	}
	// A tick case's latencies are those of the ticks applied in time: a case
	// that missed or abandoned a tick meets no target, whatever its ratios.
	clean := func(r TickRow) bool { return r.Misses == 0 && r.Abandoned == 0 }
	lost := func(r TickRow) string {
		if clean(r) {
			return ""
		}
		return fmt.Sprintf("; %d ticks missed, %d abandoned", r.Misses, r.Abandoned)
	}
	r, ok := tick("pendulum")
	ts = append(ts,
		Target{Name: "pendulum tick p50 <= 1.5x floor", Measured: ok, Met: ok && clean(r) && ratio(r.Lat.P50, r.Floor.P50) <= 1.5,
			Got: fmt.Sprintf("%.0f µs vs %.0f µs: %.2fx%s%s", us(r.Lat.P50), us(r.Floor.P50), ratio(r.Lat.P50, r.Floor.P50), procs(r), lost(r))},
		Target{Name: "pendulum tick p99 <= 2x floor", Measured: ok, Met: ok && clean(r) && ratio(r.Lat.P99, r.Floor.P99) <= 2,
			Got: fmt.Sprintf("%.0f µs vs %.0f µs: %.2fx%s%s", us(r.Lat.P99), us(r.Floor.P99), ratio(r.Lat.P99, r.Floor.P99), procs(r), lost(r))})
	// n = 32: three hops (the default) and, if measured, two (DUET_TWO_HOP);
	// the target is met if either path meets it.
	r, ok = tick("n32")
	got := fmt.Sprintf("%.0f µs (floor %.0f µs)%s", us(r.Lat.P50), us(r.Floor.P50), lost(r))
	met := ok && clean(r) && r.Lat.P50 < 300*time.Microsecond
	floorAbove := r.Floor.P50 >= 300*time.Microsecond
	if r2, ok2 := tick("n32-2hop"); ok2 {
		got += fmt.Sprintf("; two hops %.0f µs (two-hop floor %.0f µs)%s", us(r2.Lat.P50), us(r2.Floor.P50), lost(r2))
		met = met || (clean(r2) && r2.Lat.P50 < 300*time.Microsecond)
		floorAbove = floorAbove && r2.Floor.P50 >= 300*time.Microsecond
		ok = true
	}
	if floorAbove && !met {
		got += ": the bare messaging alone is above the target here"
	}
	got += procs(r)
	ts = append(ts, Target{Name: "n=32 fixed-mask tick p50 < 300 µs", Measured: ok, Met: met, Got: got})
	var f Fig5Row
	ok = false
	for _, x := range rep.Fig5 {
		if x.Series == (Series{1, mpc.FixedMask}) && x.D == 100 {
			f, ok = x, true
		}
	}
	ts = append(ts, Target{Name: "Protocol 1 fixed mask d=100 p50 <= 2x floor", Measured: ok, Met: ok && ratio(f.Lat.P50, f.Floor.P50) <= 2,
		Got: fmt.Sprintf("%.0f µs vs %.0f µs: %.2fx", us(f.Lat.P50), us(f.Floor.P50), ratio(f.Lat.P50, f.Floor.P50))})
	// A loop count holds if every step at it held (duet bench --repeat).
	type count struct {
		steps, held int
		last        ScaleRow // its last failed step, else its last step
	}
	var counts [2]map[int]*count // by searchIndex: without, with persistence
	measured := false
	for _, s := range rep.Scale {
		i := searchIndex(s.Persist)
		measured = measured || s.Persist
		if counts[i] == nil {
			counts[i] = map[int]*count{}
		}
		c := counts[i][s.Loops]
		if c == nil {
			c = &count{}
			counts[i][s.Loops] = c
		}
		c.steps++
		if s.OK {
			c.held++
		}
		if !s.OK || c.last.OK || c.last.Loops == 0 {
			c.last = s
		}
	}
	var best, tried [2]int
	var why [2]string
	for i := range counts {
		for n, c := range counts[i] {
			if c.held == c.steps {
				best[i] = max(best[i], n)
			}
			tried[i] = max(tried[i], n)
		}
		if c := counts[i][tried[i]]; c != nil {
			if c.steps > 1 {
				why[i] = fmt.Sprintf(", held in %d of %d steps", c.held, c.steps)
			}
			why[i] += whyFailed(c.last)
		}
		// A search stops at the first count that fails, at its time budget
		// (the full plan's ScaleBudget), on an error (Ctrl-C) or after its
		// last count: where the largest count held, the count the pair
		// would have reached is unknown, and the summary says why the
		// search went no further.
		if tried[i] > 0 && best[i] == tried[i] && tried[i] < 500 {
			switch next := rep.ScaleBudgetStop[i]; {
			case rep.ScaleCut[i]:
				why[i] += "; the search was cut short there (stopped, or a step failed to run)"
			case next > 0:
				why[i] += fmt.Sprintf("; the search's time budget ran out before %d, duet bench --loops goes on", next)
			default:
				why[i] += "; the last count searched, duet bench --loops sets them"
			}
		}
	}
	got = fmt.Sprintf("%d loops (largest tried %d%s); without persistence %d (largest tried %d%s)", best[1], tried[1], why[1],
		best[0], tried[0], why[0])
	if rep.ScaleVariant != mpc.PerTick {
		got += fmt.Sprintf("; the loops with the %s mask", rep.ScaleVariant)
	}
	if rep.PartyBin != "" {
		got += "; the parties in processes of their own"
	}
	if rep.ScaleTwoHop {
		got += "; the loops with the two-hop tick"
	}
	if rep.ScaleInProcess {
		got += "; connected to the embedded server in process, not over TCP"
	}
	if rep.ScaleColdHeap {
		got += "; each step on a cold heap (not faulted in beforehand)"
	}
	if rep.ScaleLiveDealers > 0 {
		got += fmt.Sprintf("; dealers checking the queues (DUET_POLL_MAX=%v)", rep.ScaleLiveDealers)
	}
	for _, f := range rep.ScaleFloor {
		if f.Loops == 500 {
			got += fmt.Sprintf("; the floor alone at 500 loops: p99 %.1f ms, %d misses", us(f.P99)/1e3, f.Misses)
			if f.Misses > 0 || f.P99 >= rep.ScaleLimit {
				got += " (the bare messaging alone misses the target here)"
			}
		}
	}
	if len(rep.Idle) > 0 {
		got += "; this machine idle: " + idleSummary(rep.Idle)
	}
	ts = append(ts, Target{Name: ">= 500 loops per party pair (25 Hz, p99 < 10 ms, no misses)", Measured: measured, Met: best[1] >= 500, Got: got,
		Undecided: best[1] < 500 && best[1] == tried[1]})
	return ts
}

// whyFailed describes a failed scale step for the targets' summary: its
// p99 and misses, the process's CPU and run-queue wait p99, which say
// whether the host ran out of cores (waits.go), its stalls, and the same for
// the step's floor; "" for a step that held.
func whyFailed(r ScaleRow) string {
	if r.OK || r.Loops == 0 {
		return ""
	}
	why := fmt.Sprintf(": p99 %.1f ms, %d misses, %.2f cores", us(r.P99)/1e3, r.Misses, r.CPU)
	if r.Roles.Samples > 0 { // measured (roles.go)
		why += fmt.Sprintf(" (the parties %.2f, the server %s)", r.Roles.Pair(), serverCores(r.Roles.Broker))
	}
	why += fmt.Sprintf(", run-queue p99 %.0f µs, %d stalls over %v (the worst %.1f ms)", us(r.SchedP99), r.Stalls, StallThreshold, float64(r.StallMax)/1e6)
	// A collection in the window is what most failed steps with persistence
	// have in common (README, Loops per party pair): say whether there was
	// one, the bench process's and, with --party-bin, the parties' own.
	why += ", " + collections(r.GCs) + " in the window"
	if r.PartyProcs {
		why += " (the party processes: " + collections(r.PartyGCs) + ")"
	}
	if r.FloorTicks > 0 {
		// The step's floor ran just before it, on the same server beside the
		// set-up parties: whether the bare messaging stalled as well says
		// whether the step failed on the pipeline or on the machine.
		why += fmt.Sprintf("; its floor: p99 %.1f ms, %d misses, %d stalls over %v (the worst %.1f ms)",
			us(r.FloorP99)/1e3, r.FloorMisses, r.FloorStalls, StallThreshold, float64(r.FloorStallMax)/1e6)
	}
	return why
}

// collections says how many collections completed: "no collection", "one
// collection", "2 collections".
func collections(n int) string {
	switch n {
	case 0:
		return "no collection"
	case 1:
		return "one collection"
	}
	return strconv.Itoa(n) + " collections"
}

// serverCores is the server's CPU for a reason string: "n/a (another
// process)" where it was not measured.
func serverCores(x float64) string {
	if math.IsNaN(x) {
		return "n/a (another process)"
	}
	return Cores(x)
}

// idleSummary says what the idle checks saw: "4 and 11 stalls over 5ms in
// 2 checks of 10 s, the worst 22.4 ms".
func idleSummary(rows []IdleRow) string {
	var counts []string
	var worst time.Duration
	for _, r := range rows {
		counts = append(counts, strconv.Itoa(r.Count))
		worst = max(worst, r.Worst)
	}
	in := fmt.Sprintf("%.0f s", rows[0].Took.Seconds())
	noun := "stalls"
	switch {
	case len(rows) > 1:
		in = fmt.Sprintf("%d checks of %s", len(rows), in)
	case rows[0].Count == 1:
		noun = "stall"
	}
	return fmt.Sprintf("%s %s over %v in %s, the worst %.1f ms", strings.Join(counts, " and "), noun, StallThreshold, in, float64(worst)/1e6)
}

package demo

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestRunWritesTraceAsTicksSettle runs `duet demo`'s Run for more than two
// settle windows and checks that what it wrote as the ticks settled is the
// whole run: one trace row per applied tick in order, a summary that agrees
// with the trace, the plots, and the live progress line.
func TestRunWritesTraceAsTicksSettle(t *testing.T) {
	cs, ps := pendulum(t)
	const ticks = 2*settleLag + 300
	dir := filepath.Join(t.TempDir(), "out")
	var prog bytes.Buffer
	res, err := Run(context.Background(), RunOptions{
		Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true, Deadline: 250 * time.Millisecond, Dealers: 2},
		Duration: ticks * 40 * time.Millisecond, Out: dir, Progress: &prog,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary
	if s.Ticks != ticks || s.Applied < ticks-5 {
		t.Fatalf("summary: %d ticks, %d applied; want %d ticks, nearly all applied", s.Ticks, s.Applied, ticks)
	}
	if res.Audit.Mismatched != 0 || res.Audit.Reused != 0 || res.Audit.Ticks < ticks-5 {
		t.Fatalf("audit %+v over %d ticks", res.Audit, ticks)
	}
	if !res.Balanced || res.Late != 0 {
		t.Fatalf("balanced %v (max |α| %.2f°), %d late events", res.Balanced, res.MaxAlpha, res.Late)
	}
	// u_plain followed P0's kept updates over the whole run, and held the
	// in-time ticks to the fixed-point bound.
	if res.FollowErr != nil || res.LostUpdates != nil || !(res.Bound > 0) || s.MaxDiff > res.Bound || res.FollowedMaxDiff != s.MaxDiff {
		t.Fatalf("max |u - uplain| %.3g (%.3g on the ticks followed), bound %.3g, FollowErr %v, LostUpdates %v", s.MaxDiff, res.FollowedMaxDiff, res.Bound, res.FollowErr, res.LostUpdates)
	}
	f, err := os.Open(filepath.Join(dir, "trace.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rows) - 1; got != s.Applied {
		t.Fatalf("trace.csv has %d rows, the summary %d applied ticks", got, s.Applied)
	}
	// step, y0, y1, u0, uplain0 for the pendulum.
	if strings.Join(rows[0], ",") != "step,y0,y1,u0,uplain0" {
		t.Fatalf("trace header %q", rows[0])
	}
	prev, maxDiff := -1, 0.0
	for _, r := range rows[1:] {
		step, err := strconv.Atoi(r[0])
		if err != nil || step <= prev {
			t.Fatalf("trace step %q after %d", r[0], prev)
		}
		prev = step
		u, err1 := strconv.ParseFloat(r[3], 64)
		up, err2 := strconv.ParseFloat(r[4], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("trace row %q", r)
		}
		maxDiff = math.Max(maxDiff, math.Abs(u-up))
	}
	// Missed ticks are in the trace but not in MaxDiff.
	if s.Misses == 0 && math.Abs(maxDiff-s.MaxDiff) > 1e-12 {
		t.Fatalf("max |u - uplain| %.6g in trace.csv, %.6g in the summary", maxDiff, s.MaxDiff)
	}
	for _, name := range []string{"alpha.png", "input.png", "latency.png"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	line := prog.String()
	if i := strings.LastIndex(line, "\r"); i >= 0 {
		line = line[i+1:]
	}
	if !strings.Contains(line, strconv.Itoa(ticks)+"/"+strconv.Itoa(ticks)) || !strings.Contains(line, "(last 1024)") {
		t.Fatalf("last progress line %q", line)
	}
}

// TestRunRefusesUnwritableOut: an output directory that cannot be created
// is an error naming it.
func TestRunRefusesUnwritableOut(t *testing.T) {
	cs, ps := pendulum(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), RunOptions{Cluster: Options{Controller: cs, Plant: ps, Fast: true}, Duration: time.Second, Out: filepath.Join(file, "out")})
	if err == nil || !strings.Contains(err.Error(), "not a directory") || !strings.Contains(err.Error(), file) {
		t.Fatalf("err = %v, want one naming the output directory", err)
	}
}

// TestSinkBoundsRecords: with a sink, the cluster holds at most a settle
// window of records, hands every tick over once and in order, keeps the
// audit's totals across the handover, and drops (and counts) events that
// arrive for a tick already handed over without disturbing the reuse check.
func TestSinkBoundsRecords(t *testing.T) {
	cs, ps := pendulum(t)
	var mu sync.Mutex
	var got []uint64
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 2, LowWater: 100,
		Sink: func(r TickRecord) {
			mu.Lock()
			got = append(got, r.Tick)
			mu.Unlock()
		}}, 50)
	const ticks = 2*settleLag + 200
	if err := c.RunTicks(context.Background(), ticks); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(c.Records()); n > settleLag+1 {
		t.Fatalf("%d records held, want at most %d", n, settleLag+1)
	}
	mu.Lock()
	handed := len(got)
	mu.Unlock()
	if handed < ticks-settleLag-5 {
		t.Fatalf("%d ticks handed over during the run, want about %d", handed, ticks-settleLag)
	}
	// A jump in the tick numbers settles the ticks held, not every number
	// in between.
	far := uint64(1) << 40
	c.onApply(actuator.Applied{Tick: far})
	if n := len(c.Records()); n != 1 {
		t.Fatalf("%d records held after the jump, want the one tick", n)
	}
	c.Settle()
	if n := len(c.Records()); n != 0 {
		t.Fatalf("%d records left after Settle", n)
	}
	mu.Lock()
	for i, tick := range got[:len(got)-1] {
		if tick != uint64(i+1) {
			mu.Unlock()
			t.Fatalf("sink got tick %d at position %d", tick, i)
		}
	}
	n, last := len(got), got[len(got)-1]
	mu.Unlock()
	if n != ticks+1 || last != far {
		t.Fatalf("sink got %d ticks, the last %d; want %d and then %d", n, last, ticks, far)
	}
	checkAudit(t, c, ticks-5)
	a := c.Audit()
	if a.Ticks > ticks || a.OneSided > 5 {
		t.Fatalf("audit %+v over %d ticks", a, ticks)
	}
	if c.Late() != 0 {
		t.Fatalf("%d late events in a clean run", c.Late())
	}

	// After Settle every event is late: dropped and counted, the sink not
	// called again; an item used again is still caught.
	c.onApply(actuator.Applied{Tick: 1})
	c.onApply(actuator.Applied{Tick: far + 1})
	c.mu.Lock()
	var serial codec.Serial
	for s := range c.used[0] {
		serial = s
		break
	}
	c.mu.Unlock()
	c.onAudit(0, far+1, auditItem{item: 1 << 40, serial: serial}) // another id, the same serial: a reuse
	mu.Lock()
	n = len(got)
	mu.Unlock()
	if c.Late() != 3 || len(c.Records()) != 0 || n != ticks+1 {
		t.Fatalf("late %d, %d records held, %d handed over after three late events", c.Late(), len(c.Records()), n)
	}
	if b := c.Audit(); b.Reused != 1 || b.Ticks != a.Ticks || b.Mismatched != 0 {
		t.Fatalf("audit after a late reuse %+v, before %+v", b, a)
	}
}

// cancelAfter is a progress writer that ends the run after n live lines.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	if w.n--; w.n == 0 {
		w.cancel()
	}
	return len(p), nil
}

// TestRunInterruptedKeepsWhatRan: a demo stopped mid-run (Ctrl-C) reports
// ErrInterrupted, not a failure of the loop, and its summary, trace.csv and
// plots cover the ticks that ran.
func TestRunInterruptedKeepsWhatRan(t *testing.T) {
	cs, ps := pendulum(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const planned = 90000 // an hour: far more than runs before the cancel
	res, err := Run(ctx, RunOptions{
		Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Fast: true, Deadline: 250 * time.Millisecond, Dealers: 2},
		Duration: planned * 40 * time.Millisecond, Out: dir, Progress: &cancelAfter{n: 4, cancel: cancel},
	})
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "of 90000") {
		t.Fatalf("err = %v, want ErrInterrupted naming the ticks", err)
	}
	s := res.Summary
	if s.Applied < 100 || s.Ticks >= planned || s.Applied < s.Ticks-2 {
		t.Fatalf("summary of the interrupted run: %+v", s)
	}
	if res.Audit.Mismatched != 0 || res.Audit.Reused != 0 || res.Audit.Ticks < s.Applied-2 {
		t.Fatalf("audit %+v for %d applied ticks", res.Audit, s.Applied)
	}
	if s.Ticks > 100 && !res.Balanced {
		t.Fatalf("not balanced over the %d ticks that ran (max |α| %.2f°)", s.Ticks, res.MaxAlpha)
	}
	b, err := os.ReadFile(filepath.Join(dir, "trace.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(string(b), "\n") - 1; rows != s.Applied {
		t.Fatalf("trace.csv has %d rows for %d applied ticks", rows, s.Applied)
	}
	if _, err := os.Stat(filepath.Join(dir, "alpha.png")); err != nil {
		t.Fatal(err)
	}
}

// TestRunCountsPaths: `duet demo`'s result says how its ticks went with the
// two-hop tick on (every measurement counted once, masked or as shares, and
// most masked in real time on an idle machine), and reports nothing with it
// off.
func TestRunCountsPaths(t *testing.T) {
	cs, ps := pendulum(t)
	const ticks = 150
	for _, two := range []bool{true, false} {
		res, err := Run(context.Background(), RunOptions{
			Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Period: 10 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, TwoHop: two},
			Duration: ticks * 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		p := res.Paths
		if !two {
			if p != (Paths{}) {
				t.Errorf("two-hop off: paths %+v, want none", p)
			}
			continue
		}
		if p.Masked+p.Shares != ticks || p.Masked < ticks/2 || p.Fallback[0] > p.Masked || p.Fallback[1] > p.Masked {
			t.Errorf("two-hop on, %d ticks: paths %+v", ticks, p)
		}
		if res.Summary.Applied < ticks-5 || res.Audit.Mismatched != 0 || res.Audit.Reused != 0 {
			t.Errorf("two-hop on: %d of %d applied, audit %+v", res.Summary.Applied, ticks, res.Audit)
		}
	}
}

// TestRunFastTwoHop: with ticks back to back (Fast) the sensor waits for
// the parties' mask shares, so the ticks take the two-hop path as they do
// in real time (before it waited, 24 of 1,500 ticks did), and the loop
// still balances with every item used once.
func TestRunFastTwoHop(t *testing.T) {
	cs, ps := pendulum(t)
	const ticks = 400
	res, err := Run(context.Background(), RunOptions{
		Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true, TwoHop: true, Deadline: 250 * time.Millisecond, Dealers: 1},
		Duration: ticks * 40 * time.Millisecond, Out: filepath.Join(t.TempDir(), "out"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.Ticks != ticks || !res.Balanced || res.Audit.Mismatched != 0 || res.Audit.Reused != 0 {
		t.Fatalf("summary %+v, balanced %v, audit %+v", res.Summary, res.Balanced, res.Audit)
	}
	// The first tick has no mask (nothing was pre-opened before it); a
	// stall of the machine past the wait costs a few more.
	if p := res.Paths; p.Masked < ticks-20 || p.Masked+p.Shares != ticks {
		t.Errorf("paths %+v over %d ticks: want nearly all masked", p, ticks)
	}
}

// TestRunInterruptedDuringSetUp: a Ctrl-C before the first tick is an
// interruption (ErrInterrupted), not the set-up's failure, and an earlier
// run's trace.csv is left as it was, beside that run's plots; before, the
// trace was emptied before the set-up began.
func TestRunInterruptedDuringSetUp(t *testing.T) {
	cs, ps := pendulum(t)
	dir := t.TempDir()
	earlier := []byte("tick,y0\n1,0\n")
	if err := os.WriteFile(filepath.Join(dir, "trace.csv"), earlier, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, RunOptions{
		Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Fast: true, Deadline: 250 * time.Millisecond, Dealers: 1},
		Duration: 100 * 40 * time.Millisecond, Out: dir,
	})
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "before the first tick") {
		t.Fatalf("err = %v, want ErrInterrupted during the set-up", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "trace.csv")); err != nil || !bytes.Equal(b, earlier) {
		t.Fatalf("the earlier trace.csv: %q, %v; want it as it was", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".trace-*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestRunInterruptedDoesNotWaitOutTheDeadline: after a Ctrl-C, Run returns
// without waiting two deadlines for a last tick to land (with --deadline up
// to a minute, two minutes), since the services have stopped and none can.
func TestRunInterruptedDoesNotWaitOutTheDeadline(t *testing.T) {
	cs, ps := pendulum(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const deadline = 30 * time.Second
	var cancelled time.Time
	res, err := Run(ctx, RunOptions{
		Cluster:  Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Fast: true, Deadline: deadline, Dealers: 1},
		Duration: 90000 * 40 * time.Millisecond,
		Progress: &cancelAfter{n: 2, cancel: func() { cancelled = time.Now(); cancel() }},
	})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	// Far from the 60 s the wait took: a generous bound for a busy machine.
	if took := time.Since(cancelled); took > deadline/2 {
		t.Fatalf("Run returned %v after the interruption (deadline %v)", took, deadline)
	}
	if res.Summary.Applied == 0 {
		t.Fatalf("nothing applied before the interruption: %+v", res.Summary)
	}
}

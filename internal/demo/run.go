package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/internal/trace"
)

// RunOptions are `duet demo`'s.
type RunOptions struct {
	Cluster  Options
	Duration time.Duration // of simulated (fast) or wall-clock time
	Out      string        // output directory ("" : none)
	Progress io.Writer     // live progress line (nil: none)
}

// Result of a demo run.
type Result struct {
	Summary  Summary
	Audit    Audit
	Balanced bool    // |α| < 1.5° from 3 s on, measured at every tick (pendulum)
	MaxAlpha float64 // max |α| from 3 s on
	// Unmeasured is the ticks from 3 s on without a measurement (a plant
	// read that failed, or a measurement the sensor could not encode).
	Unmeasured uint64
	Late       int // events that arrived after their tick was written out
	// Paths: how the ticks went with Options.TwoHop (zero without it).
	Paths Paths
	// FollowErr, if not nil, says from which tick uplain (Summary.MaxDiff,
	// trace.csv) is not the float64 controller stepped on P0's kept updates,
	// and why (Cluster.Following).
	FollowErr error
	// FollowedMaxDiff is Summary.MaxDiff over the ticks whose uplain did
	// follow them (Cluster.Following): the whole run's if FollowErr
	// is nil.
	FollowedMaxDiff float64
	// LostUpdates, if not nil, says that state updates were lost without
	// a miss (Cluster.Following): a failure.
	LostUpdates error
	// Bound is what fixed point allows |u - uplain| to reach (sim.OutputBound).
	Bound float64
}

// Paths counts the two-hop tick's use over a run (duet_tick_paths_total):
// the measurements the sensor sent masked (two hops) and as shares (three
// hops), and per party the masked ones it still ran with the exchange after
// the measurement (the other party's pre-opening was missing).
type Paths struct {
	Masked, Shares int
	Fallback       [2]int
}

// Paths reads the cluster's tick-path counters.
func (c *Cluster) Paths() Paths {
	var p Paths
	if m := c.Metrics["sensor"]; m != nil {
		s := metrics.SumBy(m.TickPaths, "path")
		p.Masked, p.Shares = int(s["two_hop"]), int(s["three_hop"])
	}
	for i := range p.Fallback {
		if m := c.Metrics[fmt.Sprintf("party%d", i)]; m != nil {
			p.Fallback[i] = int(metrics.SumBy(m.TickPaths, "path")["fallback"])
		}
	}
	return p
}

// BalanceFrom is when the pendulum must be balanced by: Result.Balanced
// checks |α| from then on, so a run must be longer than that to pass.
const BalanceFrom = 3 * time.Second

// BalanceTick is the first tick the balance check takes, the first at or
// after BalanceFrom with the given period: Result.Balanced needs a tick
// after it.
func BalanceTick(period time.Duration) uint64 {
	return uint64((BalanceFrom + period - 1) / period)
}

// ErrInterrupted is Run's error when its context ends during the ticks: the
// result and the outputs then cover the ticks that ran.
var ErrInterrupted = errors.New("demo: interrupted")

// Run executes the demo: start, wait for the queue, run, write outputs.
//
// Each tick is summarized and written to trace.csv as it settles (a second
// or more behind the newest tick, see settleLag), so the run's memory does not
// grow with its length beyond the plotted points and latencies (under 100
// bytes a tick) and the items' reuse check.
func Run(ctx context.Context, ro RunOptions) (Result, error) {
	var res Result
	o := ro.Cluster
	if o.LowWater <= 0 {
		o.LowWater = 750
	}
	if o.Deadline <= 0 {
		o.Deadline = 30 * time.Millisecond
	}
	if o.Period <= 0 {
		o.Period = 40 * time.Millisecond
	}
	from := BalanceTick(o.Period)
	out, err := newRunOutput(ro.Out, o.Period, from)
	if err != nil {
		return res, err
	}
	defer out.close()
	o.Sink = out.add
	c, err := Start(ctx, o)
	if err != nil {
		return res, setupErr(ctx, err)
	}
	defer c.Close()
	res.Bound = sim.OutputBound(o.Controller, c.Sensor.Resolved())
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.WaitReady(rctx, o.LowWater) // dealers idle before the first tick
	cancel()
	if err != nil {
		return res, setupErr(ctx, err)
	}
	ticks := uint64(ro.Duration / o.Period)
	if ticks == 0 {
		ticks = 1
	}
	done := make(chan error, 1)
	go func() { done <- c.RunTicks(ctx, ticks) }()
	prog := time.NewTicker(250 * time.Millisecond)
	defer prog.Stop()
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-prog.C:
			if ro.Progress != nil {
				c.progress(ro.Progress, ticks)
			}
		}
	}
	if err != nil {
		return res, err
	}
	// The sensor stops quietly when ctx ends (Ctrl-C); what ran is kept.
	interrupted := ctx.Err() != nil
	if !interrupted { // let the last tick land (interrupted, none can: the services stopped)
		wait := time.NewTimer(2 * o.Deadline)
		select {
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
		}
	}
	if ro.Progress != nil {
		c.progress(ro.Progress, ticks)
		fmt.Fprintln(ro.Progress)
	}
	c.Settle()
	res.Summary = out.sum.summary()
	if interrupted {
		if res.Summary.Ticks == 0 {
			return res, fmt.Errorf("%w before the first tick (nothing written)", ErrInterrupted)
		}
		// The last ticks, if none was applied, may have been in flight when
		// the services stopped: those within a deadline of the end are not
		// counted as missed, nor in the summary. (Earlier ones, unapplied,
		// missed: a loop that had stalled before the Ctrl-C shows it.)
		inFlight := int((o.Deadline+o.Period-1)/o.Period) + 1
		res.Summary.Ticks -= min(out.sum.tail, inFlight)
	}
	res.Audit = c.Audit()
	res.Late = c.Late()
	res.Paths = c.Paths()
	res.FollowedMaxDiff, res.FollowErr, res.LostUpdates = c.Following()
	res.MaxAlpha = out.maxAlpha
	// Every tick from 3 s on must have been measured (an unencodable
	// measurement is a failure too).
	ran := ticks
	if interrupted {
		ran = out.lastY
	}
	if ran >= from {
		res.Unmeasured = ran - from + 1 - min(out.seen, ran-from+1)
	}
	res.Balanced = res.MaxAlpha < 1.5 && ran > from && res.Unmeasured == 0
	if err := out.finish(); err != nil {
		return res, err
	}
	if interrupted {
		return res, fmt.Errorf("%w after tick %d of %d (the summary and the outputs cover the ticks that ran)", ErrInterrupted, out.lastY, ticks)
	}
	return res, nil
}

// setupErr is Run's error for err, which ended the set-up: ErrInterrupted
// if ctx ended, since a Ctrl-C before the first tick is an interruption too,
// not the set-up's failure.
func setupErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w during the set-up, before the first tick (nothing written): %v", ErrInterrupted, err)
	}
	return err
}

// runOutput takes the settled records in tick order: the summary, the
// balance check, and (with a directory) trace.csv and the plots.
type runOutput struct {
	dir      string
	from     uint64 // first tick of the balance check
	sum      summer
	plots    plotSeries
	maxAlpha float64
	seen     uint64   // ticks from `from` on with α measured
	lastY    uint64   // the latest tick measured
	f        *os.File // trace.csv's rows, in a file of their own until finish
	tw       *trace.Writer
	err      error // the first write error
}

// newRunOutput creates dir and the file trace.csv is written to up front,
// so that a directory that cannot be written fails the run before it
// starts. The file takes trace.csv's place when the run finishes: a run
// that fails or is interrupted before its first tick leaves an earlier
// run's trace.csv, beside that run's plots, as it was.
func newRunOutput(dir string, period time.Duration, from uint64) (*runOutput, error) {
	o := &runOutput{dir: dir, from: from, plots: plotSeries{period: period.Seconds(), alphaIndex: 1}}
	if dir == "" {
		return o, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".trace-*.csv")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil { // as os.Create's, not CreateTemp's 0600
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	o.f = f
	return o, nil
}

func (o *runOutput) add(r TickRecord) {
	o.sum.add(&r)
	if r.Y != nil {
		o.lastY = max(o.lastY, r.Tick)
	}
	if r.Tick >= o.from && len(r.Y) > 1 {
		o.maxAlpha = math.Max(o.maxAlpha, math.Abs(r.Y[1]))
		o.seen++
	}
	if o.dir == "" {
		return
	}
	o.plots.add(&r)
	if o.err != nil || !r.Applied || r.Y == nil {
		return
	}
	if o.tw == nil {
		if o.tw, o.err = trace.NewWriter(o.f, len(r.Y), len(r.U)); o.err != nil {
			return
		}
	}
	o.err = o.tw.Row(int(r.Tick)-1, r.Y, r.U, r.UPlain)
}

// finish flushes trace.csv and writes the plots.
func (o *runOutput) finish() error {
	if o.dir == "" {
		return nil
	}
	if o.err == nil && o.tw != nil {
		o.err = o.tw.Flush()
	}
	if o.err == nil {
		o.err = o.f.Close()
	}
	if o.err == nil {
		if o.err = os.Rename(o.f.Name(), filepath.Join(o.dir, "trace.csv")); o.err == nil {
			o.f = nil
		}
	}
	if o.err != nil {
		return fmt.Errorf("demo: writing %s: %w", filepath.Join(o.dir, "trace.csv"), o.err)
	}
	return o.plots.write(o.dir)
}

// close removes trace.csv's file if finish did not put it in place.
func (o *runOutput) close() {
	if o.f != nil {
		o.f.Close()
		os.Remove(o.f.Name())
	}
}

// progress draws the live line from counters kept as ticks are applied: its
// latency percentiles are over the latest liveWindow in-time ticks.
func (c *Cluster) progress(w io.Writer, total uint64) {
	c.mu.Lock()
	l := c.live
	lat := append([]time.Duration(nil), l.lat...)
	c.mu.Unlock()
	if l.applied == 0 {
		return
	}
	last := l.last
	alpha, u := math.NaN(), math.NaN()
	if len(last.Y) > 1 {
		alpha = last.Y[1]
	}
	if len(last.U) > 0 {
		u = last.U[0]
	}
	p50, p99 := Percentile(lat, 0.50), Percentile(lat, 0.99)
	fmt.Fprintf(w, "\rtick %5d/%d  α %+7.3f°  u %+7.3f V  latency p50 %6.0fµs p99 %6.0fµs (last %d)  misses %d  queue %d   ",
		last.Tick, total, alpha, u, float64(p50.Microseconds()), float64(p99.Microseconds()), len(lat), l.misses, c.QueueDepth())
}

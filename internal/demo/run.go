package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

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
	Records  []TickRecord
	Balanced bool    // |α| < 1.5° from 3 s on (pendulum)
	MaxAlpha float64 // max |α| from 3 s on
}

// Run executes the demo: start, wait for the queue, run, write outputs.
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
	c, err := Start(ctx, o)
	if err != nil {
		return res, err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.WaitReady(rctx, o.LowWater) // dealers idle before the first tick
	cancel()
	if err != nil {
		return res, err
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
	// Let the last tick land.
	time.Sleep(2 * o.Deadline)
	if ro.Progress != nil {
		c.progress(ro.Progress, ticks)
		fmt.Fprintln(ro.Progress)
	}
	res.Records = c.Records()
	res.Summary = Summarize(res.Records)
	res.Audit = c.Audit()
	from := uint64(math.Ceil(3 * float64(time.Second) / float64(o.Period)))
	seen := uint64(0)
	for _, r := range res.Records {
		if r.Tick >= from && len(r.Y) > 1 {
			res.MaxAlpha = math.Max(res.MaxAlpha, math.Abs(r.Y[1]))
			seen++
		}
	}
	// Every tick from 3 s on must have been measured (an unencodable
	// measurement is a failure too).
	res.Balanced = res.MaxAlpha < 1.5 && ticks > from && seen == ticks-from+1
	if ro.Out != "" {
		if err := writeOutputs(ro.Out, res.Records, o.Period); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (c *Cluster) progress(w io.Writer, total uint64) {
	recs := c.Records()
	if len(recs) == 0 {
		return
	}
	last := recs[len(recs)-1]
	for i := len(recs) - 1; i >= 0 && !last.Applied; i-- {
		last = recs[i]
	}
	s := Summarize(recs)
	alpha, u := math.NaN(), math.NaN()
	if len(last.Y) > 1 {
		alpha = last.Y[1]
	}
	if len(last.U) > 0 {
		u = last.U[0]
	}
	fmt.Fprintf(w, "\rtick %5d/%d  α %+7.3f°  u %+7.3f V  latency p50 %6.0fµs p99 %6.0fµs  misses %d  queue %d   ",
		last.Tick, total, alpha, u, float64(s.P50.Microseconds()), float64(s.P99.Microseconds()), s.Misses, c.QueueDepth())
}

func writeOutputs(dir string, recs []TickRecord, period time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "trace.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	var tw *trace.Writer
	for _, r := range recs {
		if !r.Applied || r.Y == nil {
			continue
		}
		if tw == nil {
			if tw, err = trace.NewWriter(f, len(r.Y), len(r.U)); err != nil {
				return err
			}
		}
		if err := tw.Row(int(r.Tick)-1, r.Y, r.U, r.UPlain); err != nil {
			return err
		}
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return WritePlots(dir, recs, period.Seconds(), 1)
}

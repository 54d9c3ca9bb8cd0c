package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/internal/demo"
	"github.com/duet-mpc/duet/pkg/plant"
)

func init() {
	register("demo", "run the whole secure loop over an embedded NATS server (the README's first command)", runDemo)
}

// maxDemoDealers bounds duet demo --dealers: every replica runs in the one
// process, and a handful already keeps one loop's queue full.
const maxDemoDealers = 16

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dur := fs.Duration("duration", 20*time.Second, "length of the run (simulated time with --fast)")
	fast := fs.Bool("fast", false, "run ticks back to back in simulated time instead of every period (with the two-hop tick, each measurement waits for the parties' mask shares: a few ms)")
	out := fs.String("out", "out/demo", "directory for trace.csv and the PNG plots")
	ctrl := fs.String("controller", examples.QubeController, "controller spec (JSON); the default is read from the copy built into duet when this directory has none")
	plantPath := fs.String("plant", examples.QubePlant, "plant spec (JSON); the default is read from the copy built into duet when this directory has none")
	mask := fs.String("mask", "per-tick", "Protocol 1 variant: per-tick or fixed")
	compress := fs.Bool("compress", true, "seed-compress dealer material")
	dealers := fs.Int("dealers", 2, "dealer replicas")
	deadline := fs.Duration("deadline", 30*time.Millisecond, "actuator deadline after the sensor's publish")
	twoHop := fs.Bool("two-hop", true, "the two-hop tick (DUET_TWO_HOP, as the shipped deployments run): the exchange between ticks, the sensor's measurement masked; false: three hops every tick")
	verbose := fs.Bool("v", false, "log service events to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cs, ps, rz, err := loadLoop(*ctrl, *plantPath, *mask, stderr)
	if err != nil {
		return err
	}
	v := rz.Params.Variant
	period := 40 * time.Millisecond
	if ms := ps.PeriodMs(); ms > 0 {
		period = time.Duration(ms) * time.Millisecond
	}
	switch {
	case *deadline <= 0 || *deadline > time.Minute:
		return fmt.Errorf("%w: --deadline %v: want > 0 and <= 1m", ErrUsage, *deadline)
	case *dealers < 1 || *dealers > maxDemoDealers:
		return fmt.Errorf("%w: --dealers %d: want 1..%d", ErrUsage, *dealers, maxDemoDealers)
	case *dur < period:
		return fmt.Errorf("%w: --duration %v: want at least one period (%v)", ErrUsage, *dur, period)
	case ps.Kind == plant.KindQube && *dur < balanceRun(period):
		return fmt.Errorf("%w: --duration %v: the pendulum is checked for balance from %v on, so the run must be at least %v", ErrUsage, *dur, demo.BalanceFrom, balanceRun(period))
	}
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	res, err := demo.Run(ctx, demo.RunOptions{
		Cluster: demo.Options{Controller: cs, Plant: ps, Variant: v, Compress: *compress, Fast: *fast, Period: period,
			Deadline: *deadline, Dealers: *dealers, Log: log, TwoHop: *twoHop},
		Duration: *dur, Out: *out, Progress: stderr,
	})
	if err != nil && (!errors.Is(err, demo.ErrInterrupted) || res.Summary.Ticks == 0) {
		return err // failed, or interrupted before the first tick: nothing to report
	}
	s := res.Summary
	fmt.Fprintf(stdout, "ticks %d, applied %d, misses %d\n", s.Ticks, s.Applied, s.Missed())
	fmt.Fprintf(stdout, "tick latency p50 %v, p99 %v (sensor publish to actuator reconstruction)\n", s.P50, s.P99)
	fmt.Fprintf(stdout, "max |u - uplain| %.3g V, bound %.3g V (uplain: the float64 controller, stepped on the state updates the parties kept)\n", s.MaxDiff, res.Bound)
	if res.FollowErr != nil {
		fmt.Fprintf(stdout, "  but %s; before it, max |u - uplain| %.3g V\n", strings.TrimPrefix(res.FollowErr.Error(), "demo: "), res.FollowedMaxDiff)
	}
	fmt.Fprintf(stdout, "items: %d ticks paired, %d mismatched, %d reused\n", res.Audit.Ticks, res.Audit.Mismatched, res.Audit.Reused)
	if p := res.Paths; *twoHop {
		fmt.Fprintf(stdout, "two-hop tick: %d measurements sent masked, %d as shares (three hops); of the masked, run with the exchange after them: P0 %d, P1 %d\n",
			p.Masked, p.Shares, p.Fallback[0], p.Fallback[1])
	}
	if res.Late > 0 {
		fmt.Fprintf(stdout, "%d events came after their tick was written out and are not in the summary or trace.csv\n", res.Late)
	}
	if *out != "" {
		latency := ", latency.png"
		if s.Applied == s.Misses {
			latency = " (no latency.png: no tick was in time)"
		}
		fmt.Fprintf(stdout, "wrote %s/trace.csv, alpha.png, input.png%s\n", *out, latency)
	}
	if err != nil { // interrupted: the summary above covers the ticks that ran
		return err
	}
	if err := demoVerdict(res, ps.Kind == plant.KindQube); err != nil {
		return err
	}
	if ps.Kind == plant.KindQube {
		fmt.Fprintf(stdout, "balanced: max |α| from 3 s on %.2f°\n", res.MaxAlpha)
	}
	return nil
}

// balanceRun is the shortest run whose balance check has a tick to check
// beyond its first (demo.BalanceTick), as demo.Run counts the ticks that
// fit in the run. (With a period that does not divide demo.BalanceFrom,
// BalanceFrom and a period is a tick short.)
func balanceRun(period time.Duration) time.Duration {
	return time.Duration(demo.BalanceTick(period)+1) * period
}

// demoVerdict says whether a demo run that ran to its end failed, with
// every reason: items mismatched or reused, state updates lost without a
// miss, |u - uplain| over the bound on the ticks where uplain followed the
// parties' kept updates, and the pendulum not balanced (qube) or, with
// another plant, which has no balance to check, no input applied or more
// than a tenth of the ticks missed.
func demoVerdict(res demo.Result, qube bool) error {
	s := res.Summary
	var why []string
	if res.Audit.Mismatched > 0 || res.Audit.Reused > 0 {
		why = append(why, "offline items mismatched or reused")
	}
	if res.LostUpdates != nil {
		why = append(why, strings.TrimPrefix(res.LostUpdates.Error(), "demo: ")+": state updates lost without a miss")
	}
	if res.FollowedMaxDiff > res.Bound {
		why = append(why, fmt.Sprintf("max |u - uplain| %.3g V exceeds the fixed-point bound %.3g V", res.FollowedMaxDiff, res.Bound))
	}
	switch {
	case qube && !res.Balanced && res.MaxAlpha < 1.5 && res.Unmeasured > 0:
		why = append(why, fmt.Sprintf("the pendulum's balance is not shown: %d ticks from 3 s on were not measured (max |α| of the others: %.2f°)", res.Unmeasured, res.MaxAlpha))
	case qube && !res.Balanced:
		why = append(why, fmt.Sprintf("the pendulum did not balance (max |α| from 3 s on: %.2f°)", res.MaxAlpha))
	case !qube && s.Applied-s.Misses == 0:
		why = append(why, fmt.Sprintf("the loop failed: no input applied in time in %d ticks", s.Ticks))
	case !qube && 10*s.Missed() > s.Ticks:
		why = append(why, fmt.Sprintf("the loop failed: %d of %d ticks missed their deadline", s.Missed(), s.Ticks))
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New("demo: " + strings.Join(why, "; "))
}

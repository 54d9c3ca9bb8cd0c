package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/duet-mpc/duet/internal/stall"
)

func init() {
	register("stalls", "measure how often this host stalls a waiting thread (a 1 ms sleeper's late wake-ups)", runStalls)
}

// runStalls runs a 1 ms sleeper for --for and reports its wake-ups more
// than --over late: on a shared VM, a stall longer than a loop's deadline
// costs ticks whatever duet does (the end-to-end test prints this beside
// its steady phase).
func runStalls(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stalls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dur := fs.Duration("for", 10*time.Second, "how long to measure")
	over := fs.Duration("over", 20*time.Millisecond, "count wake-ups more than this late")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: duet stalls [--for 10s] [--over 20ms]\n\nSleeps 1 ms at a time for --for and prints how many wake-ups came more than --over late, and the latest.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dur <= 0 || *dur > 24*time.Hour {
		return fmt.Errorf("%w: --for %v: want more than 0 and at most 24h", ErrUsage, *dur)
	}
	if *over <= 0 {
		return fmt.Errorf("%w: --over %v: want more than 0", ErrUsage, *over)
	}
	m := stall.Start(*over)
	t := time.NewTimer(*dur)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	r := m.End()
	noun := "stalls"
	if r.Count == 1 {
		noun = "stall"
	}
	fmt.Fprintf(stdout, "%d %s over %v in %d wake-ups", r.Count, noun, *over, r.Wakeups)
	if r.Wakeups > 0 {
		fmt.Fprintf(stdout, ", the worst %.1f ms late at %s", float64(r.Worst.Microseconds())/1000, r.WorstAt.UTC().Format("15:04:05.000"))
	}
	fmt.Fprintln(stdout)
	return ctx.Err()
}

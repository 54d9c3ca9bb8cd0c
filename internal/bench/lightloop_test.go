package bench

import (
	"context"
	"testing"
	"time"
)

// The pacer drops no tick when its loop comes late: after a stall of five
// periods the ticks due meanwhile come at once, each still dated a period
// after the one before it, and then the pace goes on from the first tick's
// time (a time.Ticker would have dropped four of them).
func TestPacerDropsNoTickAfterAStall(t *testing.T) {
	const period = 50 * time.Millisecond
	pc := newPacer(period)
	defer pc.stop()
	ctx := context.Background()
	first, ok := pc.next(ctx)
	if !ok {
		t.Fatal("first tick not given")
	}
	time.Sleep(5*period + period/2) // the loop stalls
	began := time.Now()
	for i := 1; i <= 5; i++ {
		due, ok := pc.next(ctx)
		if !ok || !due.Equal(first.Add(time.Duration(i)*period)) {
			t.Fatalf("tick %d due %v after the first (ok %v), want %v", i, due.Sub(first), ok, time.Duration(i)*period)
		}
	}
	// (Sleeping a period before each would take five.)
	if took := time.Since(began); took > 4*period {
		t.Errorf("the five ticks due during the stall took %v to come, want them at once", took)
	}
	due, _ := pc.next(ctx) // due in half a period: waited for
	if now := time.Now(); now.Before(due) || !due.Equal(first.Add(6*period)) {
		t.Errorf("tick 6 given at %v, due %v after the first; want at its time, 6 periods after", now.Sub(first), due.Sub(first))
	}
	// A cancelled context ends the wait.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := pc.next(cctx); ok {
		t.Error("a tick given after the context ended")
	}
}

package stall

import (
	"sync/atomic"
	"testing"
	"time"
)

// A wake-up delayed past the threshold is counted, with its delay and
// time; the others are not.
func TestMonitorCountsLateWakeups(t *testing.T) {
	var calls atomic.Int64
	m := start(20*time.Millisecond, func(d time.Duration) {
		if n := calls.Add(1); n == 3 || n == 5 {
			d += 30 * time.Millisecond // the machine froze
		}
		time.Sleep(d)
	})
	for calls.Load() < 10 {
		time.Sleep(5 * time.Millisecond)
	}
	r := m.End()
	ended := time.Now()
	if r.Wakeups < 10 {
		t.Fatalf("%d wake-ups, want at least 10", r.Wakeups)
	}
	// Only the two frozen sleeps are over 20 ms late (this machine may add
	// a stall of its own: at most a few).
	if r.Count < 2 || r.Count > 4 {
		t.Errorf("%d stalls counted, want the 2 injected", r.Count)
	}
	// The worst is an injected one, or a stall of this machine's own that
	// was longer (one can hit the sleep End waits for): either way within
	// the run.
	if r.Worst < 29*time.Millisecond || r.WorstAt.IsZero() || r.WorstAt.After(ended) {
		t.Errorf("worst %v at %v, want at least 29 ms before %v", r.Worst, r.WorstAt, ended)
	}
}

func TestMonitorQuiet(t *testing.T) {
	m := Start(time.Hour)
	time.Sleep(20 * time.Millisecond)
	r := m.End()
	if r.Wakeups == 0 || r.Count != 0 {
		t.Errorf("%+v: want wake-ups and no stall over an hour", r)
	}
	// A second End (a deferred one after an explicit one) returns the same
	// rather than panicking on the closed channel.
	if again := m.End(); again != r {
		t.Errorf("End again: %+v, want %+v", again, r)
	}
}

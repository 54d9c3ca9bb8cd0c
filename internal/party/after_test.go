package party

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The deferred work of the ticks that finish within one window runs in one
// batch, no sooner than the delay after the window's first tick, once per
// worker however often it was queued, and never for a worker that has
// exited; a tick after the batch starts the next window.
func TestAfterQueueBatches(t *testing.T) {
	const delay = 30 * time.Millisecond
	q := newAfterQueue(delay)
	type call struct {
		w  *worker
		at time.Time
	}
	var mu sync.Mutex
	var calls []call
	done := make(chan struct{}, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy := map[*worker]int{} // times do reports a worker busy
	go q.run(ctx, func(w *worker) bool {
		mu.Lock()
		calls = append(calls, call{w, time.Now()})
		ok := busy[w] == 0
		if !ok {
			busy[w]--
		}
		mu.Unlock()
		done <- struct{}{}
		return ok
	}, nil)
	a, b, c, gone := &worker{loop: "a"}, &worker{loop: "b"}, &worker{loop: "c"}, &worker{loop: "gone"}
	gone.exited.Store(true)
	began := time.Now()
	q.add(a)
	q.add(b)
	q.add(a) // already queued
	q.add(gone)
	wait := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("deferred work did not run: %d calls", len(calls))
			}
		}
	}
	wait(2)
	mu.Lock()
	if len(calls) != 2 || calls[0].w != a || calls[1].w != b {
		t.Fatalf("first batch ran %d calls, want a then b", len(calls))
	}
	if d := calls[0].at.Sub(began); d < delay {
		t.Errorf("first batch ran %v after its first tick, want at least %v", d, delay)
	}
	mu.Unlock()
	if a.afterQueued || b.afterQueued {
		t.Error("workers still marked as queued after their batch")
	}
	// The next window: a worker that ran can be queued again.
	second := time.Now()
	q.add(c)
	q.add(a)
	wait(2)
	select {
	case <-done:
		t.Fatal("a worker ran twice in one batch, or an exited worker ran")
	case <-time.After(2 * delay):
	}
	mu.Lock()
	if len(calls) != 4 || calls[2].w != c || calls[3].w != a {
		t.Fatalf("second batch: %d calls in all, want c then a", len(calls))
	}
	if d := calls[2].at.Sub(second); d < delay {
		t.Errorf("second batch ran %v after its first tick, want at least %v", d, delay)
	}
	// A busy worker (its lock held) is not waited for: it is tried again
	// in the next batch, a delay later.
	busy[b] = 1
	mu.Unlock()
	q.add(b)
	wait(2)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 6 || calls[4].w != b || calls[5].w != b {
		t.Fatalf("busy worker: %d calls in all, want b twice", len(calls))
	}
	if d := calls[5].at.Sub(calls[4].at); d < delay {
		t.Errorf("a busy worker was tried again after %v, want at least %v", d, delay)
	}
}

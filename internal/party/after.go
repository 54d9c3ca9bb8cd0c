package party

import (
	"context"
	"sync"
	"time"
)

// The work a tick leaves for after its outputs have gone (afterTick: stage
// the next offline item, pre-open it with the two-hop tick, start the state
// write) runs for all loops together:
// the first tick to finish arms one timer for the service, and when it fires
// (Options.PersistDelay later) one goroutine does the queued work of every
// loop whose tick finished meanwhile. A write thus starts at most
// PersistDelay after its tick, exactly that long for a lone loop; with many
// loops the writes of a window go out together, which the NATS connection
// sends in one system call and the server answers in one, instead of a
// timer, a goroutine wake-up and a round of system calls per loop and tick.

// afterQueue holds the workers whose deferred work is due.
type afterQueue struct {
	delay time.Duration
	mu    sync.Mutex
	due   []*worker
	spare []*worker     // the previous batch's slice, reused
	wake  chan struct{} // a batch has begun: its first worker was queued
}

func newAfterQueue(delay time.Duration) *afterQueue {
	return &afterQueue{delay: delay, wake: make(chan struct{}, 1)}
}

// add queues w's deferred work (once until it has run).
func (q *afterQueue) add(w *worker) {
	q.mu.Lock()
	if w.afterQueued {
		q.mu.Unlock()
		return
	}
	w.afterQueued = true
	q.due = append(q.due, w)
	first := len(q.due) == 1
	q.mu.Unlock()
	if first {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// pending reports whether another loop's deferred work is due: a batch has
// begun, and ends (Service.flushAfter) at most the delay from now.
func (q *afterQueue) pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.due) > 0
}

// take removes and returns the queued workers.
func (q *afterQueue) take() []*worker {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.due
	q.due, q.spare = q.spare[:0], batch
	for _, w := range batch {
		w.afterQueued = false
	}
	return batch
}

// run calls do for each batch's workers PersistDelay after the batch
// began, until ctx ends; workers that have exited are skipped, and a worker
// for which do reports false (busy) is queued again for the next batch.
// done, if not nil, is called after each batch (it sends what the batch
// gathered: Service.flushAfter).
func (q *afterQueue) run(ctx context.Context, do func(*worker) bool, done func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		timer.Reset(q.delay)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		for _, w := range q.take() {
			if !w.exited.Load() && !do(w) {
				q.add(w)
			}
		}
		if done != nil {
			done()
		}
	}
}

// deferred runs w's deferred work (afterQueue.run) and reports whether it
// could: a worker whose lock is held is not waited for, since its own
// goroutine may be blocked in a tick's start (waiting up to ItemWait for an
// item, or for a state write) and one busy loop must not hold up the other
// loops' writes. A write that finds the loop fenced stops the worker, as
// the dispatcher stops one.
func (w *worker) deferred(ctx context.Context) bool {
	if !w.mu.TryLock() {
		return false
	}
	if !w.fenced && !w.stopped { // nothing after the loop's last write (lastWrite)
		w.inAfter = true // its messages join the batch's (Service.sendAfter)
		w.afterTick(ctx)
		w.inAfter = false
	}
	fenced := w.fenced
	w.mu.Unlock()
	if fenced {
		w.stopWith(ErrFenced)
	}
	return true
}

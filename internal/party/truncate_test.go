package party

import (
	"context"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// deferTruncation gives the rig's parties an after queue that the test runs
// by hand (settle): the rest of each tick after its output share waits for
// it, as in the services (Options.PersistDelay > 0).
func (r *twoHopRig) deferTruncation() {
	for _, w := range r.w {
		w.s.after = newAfterQueue(time.Hour) // never run: settle runs its work
		w.s.opt.PersistDelay = time.Millisecond
	}
}

// spaced makes the next measurement come, as far as the parties can tell,
// long after the last: a loop at its period, not in fast mode.
func (r *twoHopRig) spaced() {
	for _, w := range r.w {
		w.measAt = time.Now().Add(-time.Second)
	}
}

// fast makes the next measurement come right after the last, as in fast
// mode (the rig's network waits 50 ms for silence after each step).
func (r *twoHopRig) fast() {
	for _, w := range r.w {
		w.measAt = time.Now()
	}
}

// settle runs the after queues' work and the network until both parties
// have ended their ticks and done the work after them: P1 finishes when
// P0's Protocol 2 message, sent from P0's deferred work, reaches it, and
// its own work after the tick is queued then.
func (r *twoHopRig) settle() {
	for range 3 {
		for i, w := range r.w {
			if !w.deferred(context.Background()) {
				r.t.Fatalf("party %d: deferred work found the worker busy", i)
			}
			if err := w.s.flushAfter(); err != nil {
				r.t.Fatal(err)
			}
		}
		r.network()
	}
}

// TestTruncationWaitsForAfterQueue: with an after queue, a party sends its
// output share and leaves the state rows, Protocol 2's first step and P0's
// Protocol 2 message to the queue: when both output shares are out, neither
// party has sent anything else or advanced its state; once the queue has
// run, both have, with the reference u and state, and the next tick runs in
// two hops.
func TestTruncationWaitsForAfterQueue(t *testing.T) {
	r := newTwoHopRig(t, 16)
	r.deferTruncation()
	y := r.y()
	r.settle()
	for tick := uint64(1); tick <= 4; tick++ {
		if r.maskTick[0] != tick-1 || r.maskTick[1] != tick-1 {
			t.Fatalf("tick %d: mask shares after ticks %v", tick, r.maskTick)
		}
		item := fromWire(r.masks[0].Item)
		r.spaced()
		r.measure(tick, y, true, r.masks[0].Item)
		if o := r.outs[tick]; o[0].Data == nil || o[1].Data == nil {
			t.Fatalf("tick %d: output shares %v before the after queue ran", tick, o)
		}
		if r.truncs != int(tick-1) {
			t.Fatalf("tick %d: P0 sent its Protocol 2 message before its after queue ran (%d seen)", tick, r.truncs)
		}
		for i, w := range r.w {
			if w.st != truncating || w.version != tick-1 || !w.afterQueued {
				t.Fatalf("tick %d: party%d at stage %v, version %d, queued %v; want truncating at %d, queued",
					tick, i, w.st, w.version, w.afterQueued, tick-1)
			}
		}
		r.settle()
		r.check(tick, y, item)
		for i, w := range r.w {
			if w.st != idle || w.version != tick {
				t.Fatalf("tick %d: party%d at stage %v, version %d after the after queue ran", tick, i, w.st, w.version)
			}
		}
		if r.truncs != int(tick) {
			t.Fatalf("tick %d: %d of P0's Protocol 2 messages seen, want %d", tick, r.truncs, tick)
		}
	}
	for i := range r.w {
		if two, n := r.paths(i, "two_hop"), metrics.Sum(r.m[i].Misses); two != 4 || n != 0 {
			t.Errorf("party%d: %v two-hop ticks, %v misses; want 4 and 0", i, two, n)
		}
	}
}

// TestMessageEndsTruncation: a message that comes while the open tick waits
// for the after queue ends that tick first: on the next measurement P0
// sends its Protocol 2 message, finishes tick 1 and starts tick 2 at once;
// P1 holds tick 2 until P0's message ends its tick 1, then starts it. Tick
// 2's measurement came right after tick 1's (a loop in fast mode): its rest
// is done at once, the parties end it with its output. Both ticks give the
// reference u and state, nothing is abandoned; and since tick 2's
// measurement found tick 1 not ended, the next truncateBackoff ticks end at
// once even at the loop's period (tick 3).
func TestMessageEndsTruncation(t *testing.T) {
	r := newTwoHopRig(t, 16)
	r.deferTruncation()
	y := r.y()
	r.spaced()
	r.measure(1, y, false, 0)
	item1 := r.w[0].item
	if r.truncs != 0 || r.w[0].st != truncating || r.w[1].st != truncating {
		t.Fatalf("after tick 1's outputs: %d Protocol 2 messages, stages %v %v; want none, both truncating", r.truncs, r.w[0].st, r.w[1].st)
	}
	r.fast()
	r.measure(2, y, false, 0)
	if o := r.outs[2]; o[0].Data == nil || o[1].Data == nil {
		t.Fatalf("tick 2's output shares %v", o)
	}
	if r.truncs != 2 {
		t.Fatalf("after tick 2: %d of P0's Protocol 2 messages, want 2 (gaps %v %v, stages %v %v, versions %d %d)", r.truncs, r.w[0].measGap, r.w[1].measGap, r.w[0].st, r.w[1].st, r.w[0].version, r.w[1].version)
	}
	for i, w := range r.w {
		if w.cur != 2 || w.st != idle || w.version != 2 || w.held {
			t.Fatalf("party%d: tick %d, stage %v, version %d, held %v; want tick 2 ended at version 2", i, w.cur, w.st, w.version, w.held)
		}
	}
	if h0, h1 := metrics.Sum(r.m[0].Held), metrics.Sum(r.m[1].Held); h0 != 0 || h1 != 1 {
		t.Errorf("held P0 %v, P1 %v; want 0 and 1 (P1 waited for P0's Protocol 2 message)", h0, h1)
	}
	for i := range r.w {
		if n := metrics.Sum(r.m[i].Misses); n != 0 {
			t.Errorf("party%d: %v misses", i, n)
		}
	}
	// The reference: tick 1's state, then tick 2's, each checked as it
	// would be at its end (check advances the reference parties).
	st := [2]mpc.Matrix{r.w[0].p.State(), r.w[1].p.State()}
	r.w[0].p.SetState(r.w[0].prev)
	r.w[1].p.SetState(r.w[1].prev)
	r.check(1, y, item1)
	r.w[0].p.SetState(st[0])
	r.w[1].p.SetState(st[1])
	r.check(2, y, r.w[0].item)
	// Tick 2's measurement found tick 1 not ended: the next ticks end at
	// once, even at the loop's period.
	r.spaced()
	r.measure(3, y, false, 0)
	r.check(3, y, r.w[0].item)
	for i, w := range r.w {
		if w.st != idle || w.version != 3 || w.deferOff != truncateBackoff-2 {
			t.Fatalf("party%d after tick 3: stage %v, version %d, %d ticks left at once; want ended, 3, %d",
				i, w.st, w.version, w.deferOff, truncateBackoff-2)
		}
	}
}

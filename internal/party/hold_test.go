package party

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestHoldRules: when a measurement comes while tick 5 is still open, the
// party holds it, unless the open tick was itself held for, the peer's
// message of a later tick is already there, or the party is behind (a
// backlog of holdBacklog messages, unless it waits only for P0's Protocol 2
// message); a second measurement, or the peer's
// message of a later tick, gives the open tick up, and a held measurement
// given up discards an item. (The ticks started here find no item: the
// worker has no queue, so each ends as no_item.)
func TestHoldRules(t *testing.T) {
	newWorker := func() (*worker, *metrics.Set) {
		m := metrics.New("party")
		s := &Service{opt: Options{Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ItemWait: time.Millisecond},
			inbox: make(chan *nats.Msg, 2*holdBacklog)}
		w := &worker{s: s, loop: "l", cur: 5, st: begun, yBuf: mpc.NewMatrix(2, 1), pendMul: map[uint64]peerMul{}, pendTrunc: map[uint64]peerTrunc{}}
		w.ready.Store(true)
		return w, m
	}
	abandoned := func(m *metrics.Set, reason string) float64 {
		return testutil.ToFloat64(m.Abandoned.WithLabelValues("l", reason))
	}
	ctx := context.Background()

	t.Run("held, then given up by a second measurement", func(t *testing.T) {
		w, m := newWorker()
		w.yBuf.Data[0] = mpc.Elem{7}
		w.onMeasure(ctx, 6, false)
		if !w.held || w.heldT != 6 || w.st != begun || w.cur != 5 || metrics.Sum(m.Held) != 1 || abandoned(m, missLate) != 0 {
			t.Fatalf("not held: held %v tick %d, stage %v, cur %d, held count %v", w.held, w.heldT, w.st, w.cur, metrics.Sum(m.Held))
		}
		if w.heldY.Data[0] != (mpc.Elem{7}) {
			t.Fatal("the held measurement's share was not kept")
		}
		w.onMeasure(ctx, 7, false)
		if w.held || abandoned(m, missLate) != 2 || w.burn != 1 {
			t.Fatalf("after a second measurement: held %v, %v late, burn %d; want the open and the held tick given up, one item to discard",
				w.held, abandoned(m, missLate), w.burn)
		}
		if w.cur != 7 || abandoned(m, missNoItem) != 1 {
			t.Fatalf("tick 7 did not start (cur %d, %v no_item)", w.cur, abandoned(m, missNoItem))
		}
	})
	t.Run("the peer's next tick ends the open one, and the held one starts", func(t *testing.T) {
		w, m := newWorker()
		w.onMeasure(ctx, 6, false)
		w.onMul(6, peerMul{msg: mpc.MulMsg{T: mpc.NewMatrix(2, 1)}})
		if abandoned(m, missLate) != 1 || w.st != idle {
			t.Fatalf("the open tick was not given up: %v late, stage %v", abandoned(m, missLate), w.st)
		}
		if _, ok := w.pendMul[6]; !ok {
			t.Fatal("the peer's message of tick 6 was not kept for it")
		}
		w.release(ctx)
		if w.held || w.cur != 6 || w.burn != 0 || !w.curHeld {
			t.Fatalf("the held tick did not start: held %v, cur %d, burn %d, curHeld %v", w.held, w.cur, w.burn, w.curHeld)
		}
	})
	for _, c := range []struct {
		name string
		set  func(w *worker)
	}{
		{"not twice in a row", func(w *worker) { w.curHeld = true }},
		{"not when the peer has begun a later tick", func(w *worker) { w.pendMul[6] = peerMul{} }},
		{"not while the party is behind", func(w *worker) {
			for range holdBacklog {
				w.s.inbox <- &nats.Msg{}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, m := newWorker()
			c.set(w)
			w.onMeasure(ctx, 6, false)
			if w.held || metrics.Sum(m.Held) != 0 || abandoned(m, missLate) != 1 || w.cur != 6 {
				t.Fatalf("held %v (count %v), %v late, cur %d: want tick 5 given up and tick 6 started", w.held, metrics.Sum(m.Held), abandoned(m, missLate), w.cur)
			}
		})
	}
	// P1 waiting only for P0's Protocol 2 message holds even while behind:
	// P0 has ended the tick, and giving it up would cost the next one too.
	t.Run("held while behind when only P0's Protocol 2 message is missing", func(t *testing.T) {
		w, m := newWorker()
		w.id, w.st = 1, multiplied
		for range holdBacklog {
			w.s.inbox <- &nats.Msg{}
		}
		w.onMeasure(ctx, 6, false)
		if !w.held || w.heldT != 6 || w.st != multiplied || w.cur != 5 || abandoned(m, missLate) != 0 {
			t.Fatalf("held %v tick %d, stage %v, cur %d, %v late: want tick 6 held and tick 5 open", w.held, w.heldT, w.st, w.cur, abandoned(m, missLate))
		}
		// Not twice in a row, even so.
		w2, m2 := newWorker()
		w2.id, w2.st, w2.curHeld = 1, multiplied, true
		w2.onMeasure(ctx, 6, false)
		if w2.held || abandoned(m2, missLate) != 1 {
			t.Fatalf("held %v, %v late: want tick 5 given up (its tick was itself held for)", w2.held, abandoned(m2, missLate))
		}
	})
}

package party

import (
	"context"
	"fmt"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The tick state machine (Protocol 3 over NATS):
//
//	measure(t)  -> take item, Begin, send Mul(t) to the peer      idle -> begun
//	peer Mul(t) -> cross-check item and state version, Multiply,
//	               send the output share to the actuator;
//	               P0 sends Trunc(t) and finishes                  begun -> idle
//	               P1 waits                                        begun -> multiplied
//	Trunc(t)    -> P1 finishes                                     multiplied -> idle
//
// A tick still open when the next measurement arrives is abandoned: the state
// is left as it was (not advanced, not reset) and the item is burnt. If the
// parties disagree on the item, both abandon the tick and skip to items past
// both. If P0 advanced its state but P1 did not (P0's Trunc was lost), their
// versions differ by one: P0 rolls back to the state share it kept.

// Why a party abandons a tick: the reason label of duet_ticks_abandoned_total.
const (
	missLate    = "late"          // the next measurement came before the tick finished
	missPersist = "not_persisted" // the previous state write was not acknowledged
	missNoItem  = "no_item"       // no offline item in time
	missItem    = "item_mismatch" // the parties took different items
	missVersion = "version_mismatch"
	missError   = "error" // a computation failed on accepted input
)

func (w *worker) miss(reason, why string) {
	w.s.opt.Metrics.Misses.WithLabelValues(w.loop).Inc()
	w.s.opt.Metrics.Abandoned.WithLabelValues(w.loop, reason).Inc()
	w.s.opt.Log.Debug("tick abandoned", "party", w.id, "loop", w.loop, "tick", w.cur, "reason", reason, "why", why)
	w.st = idle
}

// onMeasure starts tick t; w.yBuf holds the validated measurement share.
func (w *worker) onMeasure(ctx context.Context, t uint64) {
	if !w.ready.Load() {
		w.reject(fmt.Errorf("%w: measurement before set-up completed", codec.ErrKind))
		return
	}
	switch w.st {
	case begun:
		w.miss(missLate, "next measurement arrived before the peer's Protocol 1 message")
	case multiplied:
		w.miss(missLate, "next measurement arrived before P0's Protocol 2 message")
	}
	if !w.flushState(ctx) {
		w.cur = t
		w.miss(missPersist, "state not persisted")
		return
	}
	seq, mat, err := w.nextItem(ctx)
	if err != nil {
		w.s.opt.Metrics.LowWater.WithLabelValues(w.loop).Inc()
		w.cur = t
		w.miss(missNoItem, err.Error())
		return
	}
	msg, err := w.begin(w.yBuf, mat)
	if err != nil {
		w.reject(err)
		return
	}
	w.cur, w.item, w.st = t, seq, begun
	out := codec.MulPayload{Item: wireItem(seq), Version: w.version}
	buf := w.wireBuf[:0]
	out.T, buf = codec.AppendMatrix(w.prm.Field, buf, msg.T)
	if w.prm.Variant == mpc.PerTick {
		out.S, buf = codec.AppendMatrix(w.prm.Field, buf, msg.S)
	}
	w.send(codec.KindMul, t, out)
	w.wireBuf = buf
	for k := range w.pendMul {
		if k < t {
			delete(w.pendMul, k)
		}
	}
	for k := range w.pendTrunc {
		if k < t {
			delete(w.pendTrunc, k)
		}
	}
	if pm, ok := w.pendMul[t]; ok {
		delete(w.pendMul, t)
		w.onMul(t, pm)
	}
}

func (w *worker) onMul(t uint64, mp peerMul) {
	if t != w.cur || w.st != begun {
		if t > w.cur && len(w.pendMul) < maxPending {
			// decodeMul's matrices are the worker's, overwritten by the
			// next message: an early message keeps its own copy.
			mp.msg.T = mp.msg.T.Clone()
			if mp.msg.S.Data != nil {
				mp.msg.S = mp.msg.S.Clone()
			}
			w.pendMul[t] = mp
		}
		return
	}
	if mp.item != w.item {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, "item").Inc()
		w.minSeq = max(w.item, mp.item) + 1
		w.s.opt.Log.Warn("item mismatch: resynchronizing", "party", w.id, "loop", w.loop, "tick", t, "own", w.item, "peer", mp.item)
		w.miss(missItem, "item mismatch")
		return
	}
	if mp.version != w.version {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, "version").Inc()
		// The party one update ahead rolls back to the share it kept (P0 is
		// ahead when its Protocol 2 message was lost; either may be after a
		// crash between finishing and persisting).
		if mp.version+1 == w.version && w.hasPrev {
			if err := w.p.SetState(w.prev); err == nil {
				w.version--
				w.hasPrev = false
			}
		}
		w.s.opt.Log.Warn("state version mismatch", "party", w.id, "loop", w.loop, "tick", t, "own", w.version, "peer", mp.version)
		w.miss(missVersion, "state version mismatch")
		return
	}
	f := w.prm.Field
	// The state before this update, kept for a rollback (finish): in the
	// buffer the update before last kept, if it is free.
	prev := w.prevSpare
	w.prevSpare = mpc.Matrix{}
	if x := w.p.StateView(); len(prev.Data) == len(x.Data) {
		copy(prev.Data, x.Data)
	} else {
		prev = w.p.State()
	}
	u, tr, err := w.p.Multiply(mp.msg)
	if err != nil {
		w.reject(err)
		w.miss(missError, "multiply failed")
		return
	}
	if w.p.UsedPrepared() {
		w.count(&w.ctrPrepared, w.s.opt.Metrics.ItemsPrepared)
	}
	var wire codec.MatrixWire
	if w.id == 0 {
		// Trunc before the output share: see the subscription in run.
		wire, w.wireBuf = codec.AppendMatrix(f, w.wireBuf[:0], tr.Y)
		w.send(codec.KindTrunc, t, codec.TruncPayload{Item: wireItem(w.item), Y: wire})
	}
	wire, w.wireBuf = codec.AppendMatrix(f, w.wireBuf[:0], u)
	w.send(codec.KindOutput, t, codec.OutputPayload{Item: wireItem(w.item), U: wire})
	if w.s.opt.Audit != nil {
		w.s.opt.Audit(w.loop, t, w.item)
	}
	if w.id == 0 {
		w.finish(nil, prev)
		return
	}
	w.prevPending = prev
	w.st = multiplied
	if tp, ok := w.pendTrunc[t]; ok {
		delete(w.pendTrunc, t)
		w.onTrunc(t, tp)
	}
}

func (w *worker) onTrunc(t uint64, tp peerTrunc) {
	if t != w.cur || w.st != multiplied {
		if t >= w.cur && len(w.pendTrunc) < maxPending {
			w.pendTrunc[t] = tp
		}
		return
	}
	if tp.item != w.item {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, "item").Inc()
		w.s.opt.Log.Warn("truncation item mismatch", "party", w.id, "loop", w.loop, "tick", t, "own", w.item, "peer", tp.item)
		w.miss(missItem, "truncation item mismatch")
		return
	}
	w.finish(&mpc.TruncMsg{Y: tp.y}, w.prevPending)
}

func (w *worker) finish(tr *mpc.TruncMsg, prev mpc.Matrix) {
	if err := w.p.Finish(tr); err != nil {
		w.reject(err)
		w.miss(missError, "finish failed")
		return
	}
	if w.hasPrev {
		w.prevSpare = w.prev // no one else holds it (SetState copies)
	}
	w.prev, w.hasPrev = prev, true
	w.version++
	w.versionPub.Store(w.version)
	w.st = idle
	w.count(&w.ctrTicks, w.s.opt.Metrics.Ticks)
	if w.persist != nil {
		w.persist.dirty = true
	}
	if w.s.after != nil { // Options.PersistDelay later, with other loops' (after.go)
		w.s.after.add(w)
		return
	}
	w.afterTick(context.Background())
}

// afterTick is the work a tick leaves for after its outputs have gone
// (Options.PersistDelay later): start the state write, and take the next
// offline item and prepare it. It does nothing once a new tick has begun
// (the state is mid-update; the tick's start flushed the write
// synchronously and took its item itself).
func (w *worker) afterTick(ctx context.Context) {
	if w.st != idle {
		return
	}
	if p := w.persist; p != nil && p.dirty && !p.inflight {
		if err := w.save(ctx); err != nil {
			w.fenced = true
			w.s.opt.Log.Error("stopping loop", "party", w.id, "loop", w.loop, "err", err)
			return
		}
	}
	w.stageItem()
}

package party

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
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
// A tick still open when the next measurement arrives is not given up at
// once: the measurement is held (hold) until the open tick ends, and its
// tick starts then. Giving the open tick up would cost a second tick when
// the peer finishes it: after a freeze of P0, P1 sees Measure(t+1) before
// P0's late Mul(t), while P0 still finishes t with P1's Mul(t), and their
// state versions then differ at t+1. The open tick is abandoned when the
// peer's message of a later tick arrives (the peer gave the tick up) or
// another measurement does (the held one is given up too), and at once,
// with no hold, when the peer's message of a later tick is already there or
// the open tick itself started from a held measurement (at most one hold
// in a row), or when this party is itself behind (holdBacklog): under
// overload, finishing late ticks would keep the loops behind, where
// abandoning them lets the backlog drain (an earlier, unbounded hold made
// the scale bench's persisted loops miss more, not less). Except for P1
// waiting only for P0's Protocol 2 message (multiplied): P0 has ended the
// tick when it sent it, so giving the tick up would cost the next one too
// (a version mismatch, P0 rolling back), and ending it is one Finish. The
// ticks after a hold still miss the actuator's deadline if the hold was
// long; the hold saves the resynchronization.
// An abandoned tick leaves the state as it was (not advanced, not reset)
// and burns its item. If the parties disagree on the item, both abandon the
// tick and skip to items past both. If P0 advanced its state but P1 did not
// (P0's Trunc was lost), their versions differ by one: P0 rolls back to the
// state share it kept.

// Why a party abandons a tick: the reason label of duet_ticks_abandoned_total.
const (
	missLate    = "late"          // the tick had not ended when the next measurement came (see hold)
	missPersist = "not_persisted" // the previous state write was not acknowledged
	missNoItem  = "no_item"       // no offline item in time
	missItem    = "item_mismatch" // the parties took different items
	missVersion = "version_mismatch"
	missError   = "error" // a computation failed on accepted input
	// missNotReady: a measurement came before the loop's set-up was
	// complete (the fixed-mask set-up waits for the other party's S share).
	// It was a kind reject, which fired DuetForbiddenMessages at every
	// restart of a fixed-mask party.
	missNotReady = "not_ready"
)

// AbandonReasons are the values of duet_ticks_abandoned_total's reason label
// (for dashboards and alert rules; deploy/prometheus checks its rules against
// them).
var AbandonReasons = []string{missLate, missPersist, missNoItem, missItem, missVersion, missNotReady, missError}

func (w *worker) miss(reason, why string) {
	w.s.opt.Metrics.Misses.WithLabelValues(w.loop).Inc()
	w.s.opt.Metrics.Abandoned.WithLabelValues(w.loop, reason).Inc()
	w.s.opt.Log.Debug("tick abandoned", "party", w.id, "loop", w.loop, "tick", w.cur, "reason", reason, "why", why)
	w.st = idle
	if p := w.persist; p != nil && p.dirty && !p.inflight && !w.fenced && w.s.after != nil && reason != missPersist {
		// What the tick left unwritten (its item's mark, a rollback) is
		// written with the other loops' writes (afterTick), not at the
		// next tick's start, synchronously. That spares the next tick
		// the write when the tick is given up between measurements (an
		// item or version mismatch, an error); one given up as late is
		// ended by the next measurement, whose tick writes first
		// (flushState), and the queued run then finds it open and does
		// nothing. After a write that failed (missPersist) the next tick
		// tries again.
		w.missWrite = true
		w.s.after.add(w)
	}
}

// onMeasure starts tick t; w.yBuf holds the validated measurement share.
// fromHold: the measurement was held (release).
func (w *worker) onMeasure(ctx context.Context, t uint64, fromHold bool) {
	if !w.ready.Load() {
		w.miss(missNotReady, "measurement before the set-up was complete") // no tick begun: st is idle
		return
	}
	if w.st != idle {
		if !w.held && !w.curHeld && !w.peerPast() && (w.st == multiplied || len(w.s.inbox) < holdBacklog) {
			w.hold(t)
			return
		}
		w.abandonOpen("the next measurement arrived before the tick ended")
	}
	if w.held { // a later measurement than the one held
		w.dropHeld("a later measurement arrived while it was held")
	}
	w.curHeld = fromHold
	if !w.flushState(ctx) {
		w.cur = t
		w.miss(missPersist, "state not persisted")
		return
	}
	if w.pre.ok && t != w.cur+1 {
		// This party's mask share of the pre-opened item went to the
		// sensor after its tick w.cur, so the sensor may have masked the
		// next tick with it, one this party never received. Used here, the
		// item would pad this measurement with the same V_y, and the other
		// party, which holds that tick's T_y, would learn the difference of
		// the two measurements. Skipped: the other party took it for that
		// tick, or skips it too (a gap in the ticks, which both see).
		w.minSeq = max(w.minSeq, w.pre.seq+1)
		w.dropPre()
	}
	seq, serial, mat, err := w.nextItem(ctx)
	if err != nil {
		if w.inline && errors.Is(err, errNoItem) {
			// On the dispatcher, which does not wait for an item:
			// canInline saw one, which was then refused or discarded.
			w.handOver(t, fromHold)
			return
		}
		w.s.opt.Metrics.LowWater.WithLabelValues(w.loop).Inc()
		w.cur = t
		w.miss(missNoItem, err.Error())
		return
	}
	msg, err := w.begin(w.yBuf, mat)
	if err != nil {
		// The item is taken and the tick cannot start: counted as a miss,
		// as the peer's side of it will be.
		w.reject(err)
		w.cur = t
		w.miss(missError, "begin failed")
		return
	}
	w.started(t, seq, serial, msg)
}

// started sends this party's Protocol 1 message of tick t, begun with item
// seq of that serial, and runs the other party's if it came first.
func (w *worker) started(t, seq uint64, serial codec.Serial, msg mpc.MulMsg) {
	w.cur, w.item, w.itemSerial, w.st, w.sent = t, seq, serial, begun, w.ySent
	w.reply = pendingReply{}
	w.sendMul(t, seq, serial, w.version, msg)
	w.clearPending(t)
	if pm, ok := w.pendMul[t]; ok {
		delete(w.pendMul, t)
		w.onMul(t, pm)
	}
}

// dropEarly counts the other party's message of tick t, come before this
// party started that tick, that finds maxPending such messages of its kind
// kept already for ticks this party has not reached (its measurements lost
// or late; those of ticks passed are dropped first: earlyFull): dropped,
// as an "overload" reject, as a message the full inbox drops is. Before, it
// was dropped silently.
func (w *worker) dropEarly(kind string, t uint64) {
	w.s.opt.Metrics.Rejects.WithLabelValues("overload").Inc()
	if w.s.opt.Log.Enabled(context.Background(), slog.LevelDebug) {
		w.s.opt.Log.Debug("early message of the other party dropped: too many kept", "party", w.id, "loop", w.loop, "kind", kind, "tick", t, "cur", w.cur, "kept", maxPending)
	}
}

// earlyFull reports whether the other party's early messages of one kind
// (pend: pendMul or pendTrunc) fill the buffer, after dropping those no tick
// can take any more: of ticks up to the open one for Protocol 1 (a tick
// that began took its own), before it for Protocol 2 (last: its tick's own
// may still come). clearPending drops them when a tick begins; ticks that
// fail before they begin (the state not persisted, no item) leave them, and
// eight of those would have every later early message dropped and counted
// as an overload.
func earlyFull[M any](pend map[uint64]M, cur uint64, last bool) bool {
	if len(pend) < maxPending {
		return false
	}
	for k := range pend {
		if k < cur || (k == cur && !last) {
			delete(pend, k)
		}
	}
	return len(pend) >= maxPending
}

// sendMul sends a Protocol 1 message to the other party.
func (w *worker) sendMul(t, seq uint64, serial codec.Serial, version uint64, msg mpc.MulMsg) {
	out := &w.out.mul
	*out = codec.MulPayload{Item: wireItem(seq), Version: version, Inc: w.inc, Peer: w.peerInc, Serial: serial}
	buf := w.wireBuf[:0]
	out.T, buf = codec.AppendMatrix(w.prm.Field, buf, msg.T)
	if w.prm.Variant == mpc.PerTick {
		out.S, buf = codec.AppendMatrix(w.prm.Field, buf, msg.S)
	}
	w.send(codec.KindMul, t, out)
	w.wireBuf = buf
}

// clearPending drops the other party's early messages of ticks before t.
func (w *worker) clearPending(t uint64) {
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
}

func (w *worker) onMul(t uint64, mp peerMul) {
	if w.replyMul(t) {
		return
	}
	if t != w.cur || w.st != begun {
		if t > w.cur && w.held && w.st != idle {
			// The peer began a later tick: it has given the open one up.
			w.abandonOpen("the peer began a later tick")
		}
		if t > w.cur {
			if earlyFull(w.pendMul, w.cur, false) {
				w.dropEarly("Protocol 1", t)
				return
			}
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
	if !sameItem(mp.item, mp.serial, w.item, w.itemSerial) {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, metrics.KindItem).Inc()
		w.minSeq = max(w.item, mp.item) + 1
		w.burn = 0 // the skip pairs the items again
		if mp.item == w.item {
			// One id, two items: the broker paired different stream
			// messages under one sequence, or forged P0's nonce. Nothing
			// of this tick's output or state update has been computed.
			w.s.opt.Log.Warn("item mismatch: one id, different serials: resynchronizing", "party", w.id, "loop", w.loop, "tick", t, "item", w.item,
				"own_serial", serialString(w.itemSerial), "peer_serial", serialString(mp.serial))
		} else {
			w.s.opt.Log.Warn("item mismatch: resynchronizing", "party", w.id, "loop", w.loop, "tick", t, "own", w.item, "peer", mp.item)
		}
		w.miss(missItem, "item mismatch")
		return
	}
	if mp.version != w.version {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, metrics.KindVersion).Inc()
		// The party one update ahead rolls back to the share it kept (P0 is
		// ahead when its Protocol 2 message was lost; either may be after a
		// crash between finishing and persisting).
		if mp.version+1 == w.version && w.hasPrev {
			if err := w.p.SetState(w.prev); err == nil {
				w.version--
				w.hasPrev = false
				w.onVersion(false)
				if w.persist != nil {
					// The record holds the update given up: the
					// rolled-back state is written (the after queue's
					// write, miss, or the next tick's start if that comes
					// first: flushState), or a crash would restore it.
					w.persist.dirty = true
				}
			}
		}
		if gap := max(w.version, mp.version) - min(w.version, mp.version); gap > 1 {
			// No rollback mends it (one party lost its state record, or
			// restored one far behind): every tick would miss, warned at
			// each. Said once a minute, with the remedy.
			if time.Since(w.gapLogged) >= time.Minute {
				w.gapLogged = time.Now()
				w.s.opt.Log.Error("the parties' states are more than one update apart: no tick can complete; one party lost its state record (deleted, purged or not opened) or restored an old one. Set the loop up again: change the sensor's DUET_SETUP_GENERATION and restart the sensor (or stop the sensor, delete its resume record, nats kv del "+bus.SetupBucket+" "+bus.SetupKey(w.loop, codec.RoleSensor)+", and start it: a running sensor writes the record again), then restart the parties and the actuator",
					"party", w.id, "loop", w.loop, "tick", t, "own", w.version, "peer", mp.version)
			}
		} else {
			w.s.opt.Log.Warn("state version mismatch", "party", w.id, "loop", w.loop, "tick", t, "own", w.version, "peer", mp.version)
		}
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
	// The output share first: the tick's critical path holds the product's
	// m output rows only; the n state rows and P0's Protocol 2 message
	// follow it (see the subscription in run for the order P1 sees).
	u, err := w.p.Output(mp.msg)
	if err != nil {
		w.reject(err)
		w.miss(missError, "multiply failed")
		return
	}
	if w.p.UsedPrepared() {
		w.count(&w.ctrPrepared, w.s.opt.Metrics.ItemsPrepared)
	}
	var wire codec.MatrixWire
	wire, w.wireBuf = codec.AppendMatrix(f, w.wireBuf[:0], u)
	w.out.out = codec.OutputPayload{Item: wireItem(w.item), U: wire, SentUnixNano: w.sent}
	w.send(codec.KindOutput, t, &w.out.out)
	tr, err := w.p.TruncStart()
	if err != nil {
		w.reject(err)
		w.miss(missError, "truncation failed")
		return
	}
	if w.id == 0 {
		wire, w.wireBuf = codec.AppendMatrix(f, w.wireBuf[:0], tr.Y)
		w.out.trunc = codec.TruncPayload{Item: wireItem(w.item), Y: wire, Inc: w.inc, Peer: w.peerInc}
		w.sendTrunc(t)
	}
	if w.s.opt.Audit != nil {
		w.s.opt.Audit(w.loop, t, w.item, w.itemSerial)
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

// sendTrunc sends P0's Protocol 2 message (w.out.trunc) for tick t: while
// other loops' deferred work is due, held for the end of its batch or this
// party's next message to the other party (Service.deferPeer), else at
// once. P1 needs it only to end tick t, before the loop's next measurement
// reaches it; so it is held only if this loop's previous one came at
// least truncSpacing times Options.PersistDelay before (25 Hz loops, not
// the tick cases' or the demo's back-to-back ticks, where P1 would see the
// next measurement first and give the tick up). A loop alone, or a peer
// without batches (Options.PeerBatch 1), gets it at once.
func (w *worker) sendTrunc(t uint64) {
	now := time.Now()
	spaced := now.Sub(w.lastTrunc) >= truncSpacing*w.s.opt.PersistDelay
	w.lastTrunc = now
	if !spaced || w.s.after == nil || w.s.opt.PeerBatch <= 1 || !w.s.after.pending() {
		w.send(codec.KindTrunc, t, &w.out.trunc)
		return
	}
	_, subj, env, ok := w.seal(codec.KindTrunc, t, &w.out.trunc, w.envBuf[:0])
	if !ok {
		return
	}
	w.envBuf = env
	w.s.opt.Metrics.PeerHeld.Inc()
	if err := w.s.deferPeer(env); err != nil {
		w.s.opt.Log.Warn("publish", "subject", subj, "err", err)
	}
}

// truncSpacing: P0 holds its Protocol 2 message (sendTrunc) only for a
// loop whose ticks come at least this many times Options.PersistDelay
// apart, so that the hold (at most about PersistDelay) is a small part of
// the time until the next measurement.
const truncSpacing = 5

func (w *worker) onTrunc(t uint64, tp peerTrunc) {
	if t != w.cur || w.st != multiplied {
		if t >= w.cur {
			if earlyFull(w.pendTrunc, w.cur, true) {
				w.dropEarly("Protocol 2", t)
				return
			}
			w.pendTrunc[t] = tp
		}
		return
	}
	if tp.item != w.item {
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, metrics.KindItem).Inc()
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
	w.onVersion(true)
	w.st = idle
	w.count(&w.ctrTicks, w.s.opt.Metrics.Ticks)
	if w.persist != nil {
		w.persist.dirty = true
	}
	w.missWrite = false
	if w.s.after != nil { // Options.PersistDelay later, with other loops' (after.go)
		w.s.after.add(w)
		return
	}
	w.afterTick(context.Background())
}

// afterTick is the work a tick leaves for after its outputs have gone
// (Options.PersistDelay later): take the next offline item and prepare it,
// pre-open it with the two-hop tick, and start the state write; after a
// tick given up (missWrite), the write alone. The
// pre-opening's mask share waits for the write (parkMask). It does nothing
// once a new tick has begun (the state is mid-update; the tick's start
// flushed the write synchronously and took its item itself).
func (w *worker) afterTick(ctx context.Context) {
	if w.st != idle {
		return
	}
	if !w.missWrite { // a tick given up: its item's write alone (miss)
		w.stageItem()
		w.preOpenNext(ctx) // before the write: its mask share waits for it
	}
	w.missWrite = false
	if p := w.persist; p != nil && p.dirty && !p.inflight {
		if err := w.save(ctx); err != nil {
			w.fenced = true
			w.s.opt.Log.Error("stopping loop", "party", w.id, "loop", w.loop, "err", err)
		}
	}
	w.dropReadyMask() // not parked: no write went out
}

// holdBacklog: with this many messages waiting for the service's
// dispatcher, the party is behind on its own, and a late tick is given up
// rather than held for. A stalled peer or a freeze of the host leaves a few
// messages per loop waiting; an overloaded party serving hundreds of loops,
// hundreds.
const holdBacklog = 64

// hold keeps measurement t (in w.yBuf) for when the open tick ends.
func (w *worker) hold(t uint64) {
	w.keep(t, true)
	w.count(&w.ctrHeld, w.s.opt.Metrics.Held)
}

// keep moves measurement t (in w.yBuf) into the held slot; its tick starts
// as a held one's (curHeld) if fromHold.
func (w *worker) keep(t uint64, fromHold bool) {
	if w.heldY.Data == nil {
		w.heldY = mpc.NewMatrix(w.yBuf.Rows, w.yBuf.Cols)
	}
	w.yBuf, w.heldY = w.heldY, w.yBuf
	w.held, w.heldT, w.heldSent, w.heldFromHold = true, t, w.ySent, fromHold
}

// handOver gives measurement t (in w.yBuf), whose tick the dispatcher
// began but found no item for, to the worker's goroutine, which may wait
// for one (ItemWait), as release does a held measurement's start: the
// measurement is kept as a held one (not counted as held) and releaseMsg
// queued; every later message of the loop queues behind it. fromHold is
// the tick's own (onMeasure): one handed over is not taken for held. What
// the tick's start did before the item (the open tick given up, the state
// written, a pre-opened item dropped) is done again at no cost.
func (w *worker) handOver(t uint64, fromHold bool) {
	w.keep(t, fromHold)
	w.queueRelease()
}

// peerPast reports whether the peer has begun a tick after the open one (its
// Protocol 1 message is pending): it has given the open tick up.
func (w *worker) peerPast() bool {
	for k := range w.pendMul {
		if k > w.cur {
			return true
		}
	}
	return false
}

// onVersion publishes the state's version (LoopStatus, and
// Options.StateVersion): updated after a tick's update.
func (w *worker) onVersion(updated bool) {
	w.versionPub.Store(w.version)
	if w.s.opt.StateVersion != nil {
		w.s.opt.StateVersion(w.loop, w.cur, w.version, updated)
	}
}

// abandonOpen gives the open tick up.
func (w *worker) abandonOpen(why string) {
	switch w.st {
	case begun:
		w.miss(missLate, why+" (waiting for the peer's Protocol 1 message)")
	case multiplied:
		w.miss(missLate, why+" (waiting for P0's Protocol 2 message)")
	}
}

// releaseMsg, in a worker's inbox, tells its goroutine to start the held
// measurement's tick.
var releaseMsg = &nats.Msg{}

// release starts the held measurement's tick once the open tick has ended.
// On the dispatcher (inline), a start that may wait (for the state write,
// for an item: canInline) goes to the worker's goroutine instead, as does
// one that finds no item after all (handOver).
func (w *worker) release(ctx context.Context) {
	if !w.held || w.st != idle || w.releaseQueued {
		return
	}
	if w.inline && !w.canInline(w.subjMeasure) {
		w.queueRelease()
		return
	}
	w.held = false
	w.yBuf, w.heldY = w.heldY, w.yBuf
	w.ySent = w.heldSent
	w.onMeasure(ctx, w.heldT, w.heldFromHold)
}

// queueRelease queues releaseMsg for the worker's goroutine to start the
// held measurement's tick; with the queue full, the measurement is given up.
func (w *worker) queueRelease() {
	w.queued.Add(1)
	select {
	case w.inbox <- releaseMsg:
		w.releaseQueued = true
	default:
		w.queued.Add(-1)
		w.s.opt.Metrics.Rejects.WithLabelValues("overload").Inc()
		w.dropHeld("the worker's queue is full")
	}
}

// dropHeld gives the held measurement's tick up.
func (w *worker) dropHeld(why string) {
	w.held = false
	w.burn++
	w.cur = w.heldT
	w.miss(missLate, why)
}

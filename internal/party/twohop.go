package party

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The two-hop tick (docs/two-hop-design.md, Options.TwoHop). After a tick
// ends (afterTick), each party takes the next item, sends the other party
// its share of T_x = x̄ - V_x for it (KindPreT, a Protocol 1 message of the
// state rows only) and sends the sensor its share of V_y (KindMaskY). A
// sensor holding both parties' V_y shares for the same item sends both
// parties T_y = ȳ - V_y (KindMeasureMasked) instead of shares of ȳ. A party
// then has everything the other party's Protocol 1 message would carry
// (mpc.Party.PeerTInto) and goes straight to the output share:
//
//	between ticks:  P_i ──PreT──▶ P_(1−i),  P_i ──MaskY──▶ sensor
//	tick t:         sensor ──MeasureMasked(t)──▶ P0, P1 ──Output(t)──▶ actuator
//
// Fallback, with no extra message: a party with a masked measurement but
// without the other party's PreT for the same item and state version turns
// T_y into its share of ȳ (mpc.Party.UnmaskInto) and runs the three-hop tick
// (Begin, Mul). A party that has run the tick in two hops answers such a
// Mul with its own (replyMul), so that the other party can finish it too.
// The item taken between ticks is the next tick's item whichever path the
// tick takes (nextItem): the parties' items stay paired.

// A sensor that never sends masked measurements (its DUET_TWO_HOP off, or
// no permission to receive the parties' mask shares, as in a rolling
// upgrade) would cost each party a pre-opening and two messages a tick for
// nothing, and, where the party may not publish the mask shares, a denied
// publish and an error logged a tick. After twoHopBackoff such measurements
// in a row, a party pre-opens only after ticks that are multiples of
// twoHopProbe (both parties count the same ticks, so their probes meet),
// until a masked measurement comes again.
const (
	twoHopBackoff = 50
	twoHopProbe   = bus.TwoHopProbe
)

// backedOff reports whether the party pre-opens only on probe ticks.
func (w *worker) backedOff() bool { return w.sharesRun >= twoHopBackoff }

// noteShares counts a measurement of tick t that came as shares although
// this party had announced its mask share for it.
func (w *worker) noteShares(t uint64) {
	if !w.s.opt.TwoHop || !w.pre.ok {
		return
	}
	w.sharesRun++
	if w.sharesRun == twoHopBackoff {
		w.s.opt.Log.Warn("two-hop tick on, but the sensor keeps sending shares after this party's mask shares "+
			"(its DUET_TWO_HOP off, or no permission to subscribe to the loop's masky subject?): pre-opening only "+
			"on probe ticks until it sends a masked measurement", "party", w.id, "loop", w.loop, "tick", t,
			"ticks_in_a_row", twoHopBackoff, "probe_every", twoHopProbe)
	}
}

// noteMasked records a masked measurement: the sensor runs the two-hop tick.
func (w *worker) noteMasked(t uint64) {
	if w.backedOff() {
		w.s.opt.Log.Info("the sensor sends masked measurements again: pre-opening every tick", "party", w.id, "loop", w.loop, "tick", t)
	}
	w.sharesRun = 0
}

// preOpen is this party's pre-opening for the next tick.
type preOpen struct {
	ok      bool
	seq     uint64       // the item's id
	serial  codec.Serial // and its serial
	mat     mpc.TickMaterial
	version uint64 // the state version T_x was computed on
}

// peerPre is the other party's latest pre-opening (KindPreT), decoded into
// the worker's own matrices.
type peerPre struct {
	ok            bool
	item, version uint64
	serial        codec.Serial // zero from a party of an earlier release
	t, s          mpc.Matrix
}

// preOpenNext is the two-hop tick's work between ticks (from afterTick):
// take the next item, send the other party this party's share of its T_x
// and the sensor this party's share of its V_y. Without an item at hand it
// does nothing: the next tick takes one, in three hops.
func (w *worker) preOpenNext(ctx context.Context) {
	if !w.s.opt.TwoHop || w.pre.ok || w.st != idle || w.held || !w.ready.Load() || w.fenced {
		return
	}
	if w.backedOff() && w.cur%twoHopProbe != 0 {
		return
	}
	seq, serial, mat, err := w.takeItem(ctx, false)
	if err != nil {
		return
	}
	msg, err := w.p.PreBegin(mat)
	var vy mpc.Matrix
	if err == nil {
		vy, err = w.p.MaskRows(mat)
	}
	if err != nil {
		// The item is taken and unusable, as a material Begin refuses; no
		// tick takes it: discarded, as a pre-opened item dropped is.
		w.recycle(mat)
		w.reject(err)
		w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Inc()
		return
	}
	w.pre = preOpen{ok: true, seq: seq, serial: serial, mat: mat, version: w.version}
	f := w.prm.Field
	out := &w.out.mul
	*out = codec.MulPayload{Item: wireItem(seq), Version: w.version, Inc: w.inc, Peer: w.peerInc, Serial: serial}
	buf := w.wireBuf[:0]
	out.T, buf = codec.AppendMatrix(f, buf, msg.T)
	if w.prm.Variant == mpc.PerTick {
		out.S, buf = codec.AppendMatrix(f, buf, msg.S)
	}
	w.send(codec.KindPreT, w.cur, out)
	var v codec.MatrixWire
	v, buf = codec.AppendMatrix(f, buf[:0], vy)
	w.out.maskY = codec.MaskYPayload{Item: wireItem(seq), V: v, Epoch: w.epoch}
	w.sendMask()
	w.wireBuf = buf
}

// Nothing computed on a state update may be used by the other party before
// the update is stored: a party that crashed with its update unstored would
// restore the state before it, and if the other party had gone on with the
// update, the two would be two updates apart, one more than a rollback
// (onMul) mends, and the loop would need a new set-up. The pre-opening of
// the next item is computed on the update just made, and the other party
// can use it only in a tick started by a masked measurement, which the
// sensor can make only with this party's mask share of the same item. So
// with persistence the mask share waits for the update's state write:
// sealed as the party pre-opens (sendMask), parked as the write is
// registered (parkMask), published when the write is acknowledged
// (releaseMask), dropped if the write fails or the next tick starts first
// (unparkMask). The pre-opening itself leaves at once. Until the fiftieth
// session the mask share left with it, before the write was acknowledged.

// parkedMask is a mask share's envelope, sealed for the sensor, waiting for
// the state write registered as token. A releaseMask that finds it parked
// for its write takes it (CompareAndSwap) and only then reads the envelope;
// only that releaseMask, once it has published the envelope, and the worker
// for one never parked, recycle it (maskFree): one dropped from maskPark by
// the worker is left to the collector, since a late releaseMask of its
// write may still hold it.
type parkedMask struct {
	token atomic.Uint64
	subj  string
	env   []byte
}

// sendMask sends the mask share in w.out.maskY: at once without
// persistence or if the state is stored, else sealed into w.maskReady for
// the write that follows (afterTick) to park.
func (w *worker) sendMask() {
	if w.persist == nil || !w.persist.dirty {
		w.send(codec.KindMaskY, w.cur, &w.out.maskY)
		return
	}
	m := w.maskFree.Swap(nil)
	if m == nil {
		m = &parkedMask{}
	}
	_, subj, env, ok := w.seal(codec.KindMaskY, w.cur, &w.out.maskY, m.env[:0])
	m.subj, m.env = subj, env
	if !ok {
		w.maskFree.Store(m)
		return
	}
	w.dropReadyMask()
	w.maskReady = m
}

// parkMask parks the mask share sealed for the write being registered as
// token, before the write is published, and reports whether there was one.
func (w *worker) parkMask(token uint64) bool {
	m := w.maskReady
	if m == nil {
		return false
	}
	w.maskReady = nil
	m.token.Store(token)
	w.maskPark.Store(m)
	return true
}

// releaseMask is a state write's result (persister.onResult, called by the
// acknowledgement router, on its goroutine or, for a write that could not
// be sent, the sender's): the mask share parked for that write is published
// if the write was stored, else dropped. The share goes straight to the
// sensor: its pre-opening has left before the write (flushAfter sends a
// batch's writes after its pre-openings).
func (w *worker) releaseMask(r ackResult) {
	m := w.maskPark.Load()
	if m == nil || m.token.Load() != r.token || !w.maskPark.CompareAndSwap(m, nil) {
		return
	}
	if r.err == nil {
		if err := w.s.nc.Publish(m.subj, m.env); err != nil {
			w.s.opt.Log.Warn("publish", "subject", m.subj, "err", err)
		}
	}
	w.maskFree.Store(m)
}

// unparkMask drops the parked mask share, if any (to the collector: see
// parkedMask).
func (w *worker) unparkMask() { w.maskPark.Store(nil) }

// dropReadyMask drops a mask share sealed but not parked.
func (w *worker) dropReadyMask() {
	if w.maskReady != nil {
		w.maskFree.Store(w.maskReady)
		w.maskReady = nil
	}
}

// takePre hands the pre-opened item to the tick that starts (nextItem),
// unless a resynchronization or a burn has since ruled it out.
func (w *worker) takePre() (uint64, codec.Serial, mpc.TickMaterial, bool) {
	if !w.pre.ok {
		return 0, codec.Serial{}, mpc.TickMaterial{}, false
	}
	p := w.pre
	w.pre = preOpen{}
	if p.seq < w.minSeq || w.burn > 0 {
		if w.burn > 0 && p.seq >= w.minSeq {
			w.burn-- // the item of a held measurement given up (dropHeld)
		}
		w.recycle(p.mat)
		w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Inc()
		return 0, codec.Serial{}, mpc.TickMaterial{}, false
	}
	return p.seq, p.serial, p.mat, true
}

// dropPre gives the pre-opened item up (a resynchronization).
func (w *worker) dropPre() {
	if w.pre.ok {
		w.recycle(w.pre.mat)
		w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Inc()
		w.pre = preOpen{}
	}
}

// decodePreT decodes the other party's KindPreT into w.peerPre (state rows
// of T, and S in the per-tick variant); it is kept until a tick uses it or
// the next one replaces it.
func (w *worker) decodePreT(mp codec.MulPayload) error {
	r, c := w.prm.PhiShape()
	w.peerPre.ok = false
	w.peerPre.t = sized(w.peerPre.t, w.prm.N, 1)
	if err := mp.T.DecodeInto(w.prm.Field, w.peerPre.t); err != nil {
		return err
	}
	if w.prm.Variant == mpc.PerTick {
		w.peerPre.s = sized(w.peerPre.s, r, c)
		if err := mp.S.DecodeInto(w.prm.Field, w.peerPre.s); err != nil {
			return err
		}
	} else if !mp.S.Empty() {
		return fmt.Errorf("%w: pre-opening carries S in the fixed-mask variant", codec.ErrDimension)
	}
	w.peerPre.ok, w.peerPre.item, w.peerPre.version, w.peerPre.serial = true, fromWire(mp.Item), mp.Version, mp.Serial
	return nil
}

// onMeasureMasked starts tick t from the sensor's masked measurement T_y (in
// w.tyBuf) for item: in two hops if the other party's pre-opening of the
// same item and state version is here, else in three.
func (w *worker) onMeasureMasked(ctx context.Context, t, item uint64) {
	if !w.ready.Load() {
		w.miss(missNotReady, "measurement before the set-up was complete") // no tick begun: st is idle
		return
	}
	w.noteMasked(t)
	if w.st != idle {
		// Not held for: a masked measurement follows this party's own
		// pre-opening, made after its previous tick ended.
		w.abandonOpen("a masked measurement arrived before the tick ended")
	}
	if w.held {
		w.dropHeld("a masked measurement arrived while it was held")
	}
	w.curHeld = false
	if !w.pre.ok || w.pre.seq != item {
		// T_y is padded by the V_y of an item this party does not hold
		// (a restart, a resynchronization since it announced the item):
		// the tick cannot be run. Both skip past the sensor's item, as for
		// a disagreement between the parties.
		w.s.opt.Metrics.Mismatches.WithLabelValues(w.loop, metrics.KindItem).Inc()
		w.minSeq = max(w.minSeq, item+1)
		if w.pre.ok {
			w.minSeq = max(w.minSeq, w.pre.seq+1)
		}
		w.burn = 0
		w.dropPre()
		w.s.opt.Log.Warn("masked measurement for an item this party does not hold: resynchronizing", "party", w.id, "loop", w.loop, "tick", t, "item", item)
		w.cur = t
		w.miss(missItem, "masked measurement for another item")
		return
	}
	if !w.flushState(ctx) {
		w.cur = t
		w.miss(missPersist, "state not persisted")
		return
	}
	preVersion := w.pre.version
	// The pre-opened item, and no other: T_y is padded by its V_y. One ruled
	// out since (a burn, as for the held measurement given up above) is
	// discarded by takePre, and the tick cannot run. Before, nextItem then
	// took the next item from the queue, which could never be the sensor's
	// (it is past it): counted consumed, neither used nor discarded, after
	// a wait for it on the worker's goroutine, and one item more skipped
	// than the burn called for.
	seq, serial, mat, ok := w.takePre()
	if !ok {
		// Both skip past the sensor's item, as for another item above:
		// a burn left over would skip the item the other party takes next.
		w.minSeq = max(w.minSeq, item+1)
		w.burn = 0
		w.cur = t
		w.miss(missItem, "the pre-opened item was ruled out")
		return
	}
	if err := w.p.UnmaskInto(w.yBuf, w.tyBuf, mat); err != nil {
		w.recycle(mat)
		w.reject(err)
		w.cur = t
		w.miss(missError, "unmasking failed")
		return
	}
	msg, err := w.begin(w.yBuf, mat)
	if err != nil {
		w.reject(err)
		w.cur = t
		w.miss(missError, "begin failed")
		return
	}
	_, pending := w.pendMul[t] // the other party runs this tick in three hops
	// A pre-opening of another item under the same id (sameItem) falls
	// back to three hops, whose Protocol 1 exchange finds the difference.
	two := !pending && preVersion == w.version && w.peerPre.ok && sameItem(w.peerPre.item, w.peerPre.serial, seq, serial) && w.peerPre.version == w.version
	if !two {
		w.countPath(&w.ctrFallback, metrics.PathFallback)
		w.started(t, seq, serial, msg)
		return
	}
	w.countPath(&w.ctrTwoHop, metrics.PathTwoHop)
	w.cur, w.item, w.itemSerial, w.st, w.sent = t, seq, serial, begun, w.ySent
	w.reply = pendingReply{ok: true, tick: t, version: w.version, msg: msg}
	w.clearPending(t)
	n, q := w.prm.N, w.prm.P
	w.peerT = sized(w.peerT, n+q, 1)
	if err := w.p.PeerTInto(w.peerT, w.peerPre.t, w.tyBuf); err != nil {
		w.reject(err)
		w.miss(missError, "two-hop opening failed")
		return
	}
	in := peerMul{item: seq, serial: w.peerPre.serial, version: w.version, msg: mpc.MulMsg{T: w.peerT}}
	if w.prm.Variant == mpc.PerTick {
		in.msg.S = w.peerPre.s
	}
	w.peerPre.ok = false
	w.onMul(t, in)
}

// pendingReply is this party's Protocol 1 message of a tick it ran in two
// hops, for the other party if that one falls back to three (replyMul).
// msg aliases the party's Begin buffers, valid until the next Begin.
type pendingReply struct {
	ok      bool
	tick    uint64
	version uint64
	msg     mpc.MulMsg
}

// replyMul answers the other party's Mul(t) for a tick this party has run
// in two hops: the other party fell back to three and waits for this
// party's Protocol 1 message. It reports whether it answered.
func (w *worker) replyMul(t uint64) bool {
	if !w.reply.ok || w.reply.tick != t || t != w.cur || w.st == begun {
		return false
	}
	w.reply.ok = false
	w.sendMul(t, w.item, w.itemSerial, w.reply.version, w.reply.msg)
	return true
}

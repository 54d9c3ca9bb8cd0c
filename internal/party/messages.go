package party

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// send seals and publishes payload, a pointer to one of w.out's payloads
// (or to any other payload type).
func (w *worker) send(kind codec.Kind, tick uint64, payload any) {
	to, subj, env, ok := w.seal(kind, tick, payload, w.envBuf[:0])
	if !ok {
		return
	}
	var err error
	w.envBuf = env
	if w.inAfter && w.s.opt.PeerBatch > 1 {
		err = w.s.sendAfter(w.loop, to == w.peer, subj, env)
	} else if to != w.peer {
		err = w.s.publish(subj, env)
	} else {
		err = w.s.sendPeer(w.loop, subj, env)
	}
	if err != nil {
		w.s.opt.Log.Warn("publish", "subject", subj, "err", err)
	}
}

// seal marshals payload and seals it, appended to into, for the recipient
// of kind on this loop; false if it could not (logged).
func (w *worker) seal(kind codec.Kind, tick uint64, payload any, into []byte) (to codec.Role, subj string, env []byte, ok bool) {
	body, err := codec.MarshalAppend(w.bodyBuf[:0], payload)
	if err != nil {
		w.s.opt.Log.Error("marshal", "err", err)
		return to, subj, into, false
	}
	w.bodyBuf = body
	to, subj = w.peer, w.subjPeer
	switch kind {
	case codec.KindOutput:
		to, subj = codec.RoleActuator, w.subjOut
	case codec.KindMaskY:
		to, subj = codec.RoleSensor, w.subjMaskY
	}
	env, err = w.s.sealer.SealAppend(into, codec.Header{Kind: kind, Loop: w.loop, Tick: tick, From: w.s.sealer.Self(), To: to}, body)
	if err != nil {
		w.s.opt.Log.Error("seal", "err", err)
		return to, subj, into, false
	}
	return to, subj, env, true
}

func (w *worker) reject(err error) {
	w.s.opt.Metrics.Reject(err)
	w.s.opt.Log.Debug("message rejected", "party", w.id, "loop", w.loop, "err", err)
}

// handle runs the state machine on one inbound message (or releaseMsg),
// then starts a held measurement's tick if the open tick has ended.
func (w *worker) handle(ctx context.Context, m *nats.Msg) {
	if w.fenced || w.stopped { // the loop is stopping: nothing more is handled
		return
	}
	if m == releaseMsg {
		w.releaseQueued = false
	} else {
		w.handleMsg(ctx, m)
	}
	if w.held {
		w.release(ctx)
	}
}

// handleMsg opens and dispatches one inbound message.
func (w *worker) handleMsg(ctx context.Context, m *nats.Msg) {
	h, body, err := w.s.sealer.OpenScratch(&w.openBuf, m.Data)
	if err != nil {
		w.reject(err)
		return
	}
	if h.Loop != w.loop {
		w.reject(fmt.Errorf("%w: loop %q on loop %q's subject", codec.ErrHeader, h.Loop, w.loop))
		return
	}
	// A measurement comes on the loop's measure subject only: the
	// dispatcher keeps that subject's messages off its shared goroutine
	// (canInline), since a tick can wait there, and one that came on
	// another of the loop's subjects could hold every loop up.
	if (h.Kind == codec.KindMeasure || h.Kind == codec.KindMeasureMasked) && m.Subject != w.subjMeasure {
		w.reject(fmt.Errorf("%w: a measurement on subject %q, not the loop's measure subject %q", codec.ErrHeader, m.Subject, w.subjMeasure))
		return
	}
	switch {
	case h.Kind == codec.KindMeasure && h.From == codec.RoleSensor:
		mp := &w.in.measure
		if err := w.accept(h, body, mp, func() error {
			if err := w.fresh(h.Tick, mp.SentUnixNano); err != nil {
				return err
			}
			return mp.Y.DecodeInto(w.prm.Field, w.yBuf)
		}); err != nil {
			return
		}
		w.noteMeasured(h.Tick)
		w.noteShares(h.Tick)
		w.ySent = mp.SentUnixNano
		w.onMeasure(ctx, h.Tick, false)
	case h.Kind == codec.KindMeasureMasked && h.From == codec.RoleSensor:
		mp := &w.in.masked
		var item uint64
		if err := w.accept(h, body, mp, func() error {
			if err := w.fresh(h.Tick, mp.SentUnixNano); err != nil {
				return err
			}
			item = fromWire(mp.Item)
			w.tyBuf = sized(w.tyBuf, w.prm.P, 1)
			return mp.T.DecodeInto(w.prm.Field, w.tyBuf)
		}); err != nil {
			return
		}
		w.noteMeasured(h.Tick)
		w.ySent = mp.SentUnixNano
		w.onMeasureMasked(ctx, h.Tick, item)
	case h.Kind == codec.KindPreT && h.From == w.peer:
		mp := &w.in.mul
		if err := w.acceptPeer(h, body, mp, &mp.Inc, &mp.Peer, func() error { return w.decodePreT(*mp) }); err != nil {
			return
		}
	case h.Kind == codec.KindMul && h.From == w.peer && h.Tick == 0:
		// A new instance's first message (announce): the fixed-mask
		// set-up's S share, or in the per-tick variant an announcement.
		var mp codec.MulPayload
		if err := codec.Unmarshal(body, &mp); err != nil {
			w.reject(err)
			return
		}
		if w.prm.Variant == mpc.PerTick {
			w.onAnnounce(mp)
			return
		}
		// One of another set-up epoch (a replay) is not taken for an
		// instance (onFixedS refuses it).
		if mp.Version == w.epoch {
			if err := w.peerInstance(mp.Inc, mp.Peer); err != nil {
				return
			}
		}
		w.onFixedS(mp)
	case h.Kind == codec.KindMul && h.From == w.peer:
		mp := &w.in.mul
		var in peerMul
		if err := w.acceptPeer(h, body, mp, &mp.Inc, &mp.Peer, func() (err error) { in, err = w.decodeMul(*mp); return }); err != nil {
			return
		}
		w.onMul(h.Tick, in)
	case h.Kind == codec.KindTrunc && h.From == codec.RoleParty0 && w.id == 1:
		tp := &w.in.trunc
		var in peerTrunc
		if err := w.acceptPeer(h, body, tp, &tp.Inc, &tp.Peer, func() (err error) {
			in.item = fromWire(tp.Item)
			in.y, err = tp.Y.Decode(w.prm.Field, w.prm.N, 1)
			return
		}); err != nil {
			return
		}
		w.onTrunc(h.Tick, in)
	default:
		w.reject(fmt.Errorf("%w: %s from %s is not accepted by %s", codec.ErrKind, h.Kind, h.From, w.s.sealer.Self()))
	}
}

// notStale refuses a measurement of a tick this loop has already begun or
// given up, whichever kind it came as: the replay guard keeps a tick per
// kind, so a measurement sent as shares and held back by the broker while
// later ticks went masked would otherwise pass, and run a stale tick.
func (w *worker) notStale(t uint64) error {
	if w.cur != 0 && t <= w.cur {
		return fmt.Errorf("%w: a measurement of tick %d, this loop is at tick %d", codec.ErrReplay, t, w.cur)
	}
	return nil
}

// fresh refuses a measurement of tick t, stamped sent, that is stale
// (notStale) or of an earlier set-up of the loop (codec.NotBefore): admitted,
// the latter's share, of another sharing than the other party's, would
// corrupt the controller state for good.
func (w *worker) fresh(t uint64, sent int64) error {
	if err := w.notStale(t); err != nil {
		return err
	}
	return codec.NotBefore("a measurement", sent, w.epoch)
}

// accept applies replay protection, decodes the payload and validates it;
// only a message that passes everything advances the replay guard, so a
// well-sealed but malformed message cannot move the expected tick. v's
// matrices may alias body (w.openBuf; codec.UnmarshalView): validate
// decodes them, and v is not kept.
func (w *worker) accept(h codec.Header, body []byte, v any, validate func() error) error {
	if err := w.guard.AdmitView(h, body, v, validate); err != nil {
		w.reject(err)
		return err
	}
	return nil
}

// sameItem reports whether the other party's item (its id and serial) is
// this party's: the same id, the stream sequence the broker assigns, and
// the same serial, which the dealer sealed into both shares, unless the
// other party sent none (a party of an earlier release). The id alone let a
// broker hand the parties different items under one sequence, or P0 a
// forged nonce, and the tick's u and state update were wrong.
func sameItem(peer uint64, peerSerial codec.Serial, own uint64, ownSerial codec.Serial) bool {
	return peer == own && (peerSerial.IsZero() || peerSerial == ownSerial)
}

// serialString is a serial as the logs show it.
func serialString(s codec.Serial) string {
	if sr, ok := mpc.SerialOf(s); ok {
		return sr.String()
	}
	return fmt.Sprintf("%x", s[:])
}

// peerMul is a decoded, validated Protocol 1 message from the other party.
type peerMul struct {
	item, version uint64
	serial        codec.Serial // zero from a party of an earlier release
	msg           mpc.MulMsg
}

// peerTrunc is a decoded, validated Protocol 2 message from P0.
type peerTrunc struct {
	item uint64
	y    mpc.Matrix
}

// decodeMul decodes the peer's Protocol 1 message into the worker's own
// matrices (mulT, mulS), which the next message overwrites: onMul uses them
// at once or keeps a copy.
func (w *worker) decodeMul(mp codec.MulPayload) (peerMul, error) {
	in := peerMul{item: fromWire(mp.Item), version: mp.Version, serial: mp.Serial}
	r, c := w.prm.PhiShape()
	w.mulT = sized(w.mulT, c, 1)
	if err := mp.T.DecodeInto(w.prm.Field, w.mulT); err != nil {
		return in, err
	}
	in.msg.T = w.mulT
	if w.prm.Variant == mpc.PerTick {
		w.mulS = sized(w.mulS, r, c)
		if err := mp.S.DecodeInto(w.prm.Field, w.mulS); err != nil {
			return in, err
		}
		in.msg.S = w.mulS
	} else if !mp.S.Empty() {
		// As codec's MulPayload.Msg and the pre-opening refuse it: a tick's
		// message carries no S in the fixed-mask variant (the set-up's
		// comes at tick 0).
		return in, fmt.Errorf("%w: S is %dx%d, want 0x0 in the fixed-mask variant", codec.ErrDimension, mp.S.Rows, mp.S.Cols)
	}
	return in, nil
}

// sized returns m if it is rows x cols, else a new matrix of that shape
// (the first time, or after a set-up changed the shapes).
func sized(m mpc.Matrix, rows, cols int) mpc.Matrix {
	if m.Rows == rows && m.Cols == cols && len(m.Data) == rows*cols {
		return m
	}
	return mpc.NewMatrix(rows, cols)
}

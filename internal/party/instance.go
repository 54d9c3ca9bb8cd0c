package party

import (
	"fmt"
	"time"

	"github.com/duet-mpc/duet/pkg/codec"
)

// announce tells the other party, as this instance starts, which instance
// it is (a tick-0 KindMul with no matrices, in the per-tick variant; the
// fixed-mask set-up's S share does it in the other): the other party then
// works with it from then on, before this instance sends anything computed
// from an item, and the messages of an earlier instance still running are
// refused from that moment (peerInstance). Without it, in the two-hop
// tick, the other party could go on completing ticks with the earlier
// instance's pre-openings until this one's first message.
func (w *worker) announce() {
	w.out.mul = codec.MulPayload{Version: w.epoch, Inc: w.inc, Peer: w.peerInc}
	w.send(codec.KindMul, 0, &w.out.mul)
}

// acceptPeer is accept for a message of the other party, whose instance
// fields inc and peer (pointing into v) are checked (peerInstance) once v
// is decoded and before the message's freshness is: a new instance of the
// other party is heard even from a message whose tick an earlier
// instance's message has taken, or of an earlier tick (a restored instance
// pre-opens with the tick it restored, which the other party may be past).
func (w *worker) acceptPeer(h codec.Header, body []byte, v any, inc, peer *uint64, validate func() error) error {
	if err := codec.UnmarshalView(body, v); err != nil {
		w.reject(err)
		return err
	}
	if err := w.peerInstance(*inc, *peer); err != nil {
		return err
	}
	if err := w.peerTickInRange(h); err != nil {
		w.reject(err)
		return err
	}
	if err := w.guard.AdmitDecoded(h, validate); err != nil {
		w.reject(err)
		return err
	}
	return nil
}

// noteMeasured records an admitted measurement of tick t.
func (w *worker) noteMeasured(t uint64) {
	if t > w.measured {
		w.measured, w.measuredAt = t, time.Now()
	}
}

// peerTickInRange refuses a message of the other party whose tick is beyond
// the reach (codec.Reach) of the latest measurement this party has
// admitted, as only a faulty party sends: admitted, it would take the replay guard's tick for its
// kind, and the other party's messages of every later tick the sensor sent
// would be refused as replays. Before the first measurement since the
// worker started (a party restored after an outage holds an old tick)
// nothing is refused.
func (w *worker) peerTickInRange(h codec.Header) error {
	if w.measured == 0 {
		return nil
	}
	reach := codec.Reach(w.measured, w.measuredAt)
	if h.Tick <= reach {
		return nil
	}
	return fmt.Errorf("%w: %s from %s of tick %d, beyond tick %d, the latest measurement (tick %d) and the time since allow",
		codec.ErrMalformed, h.Kind, h.From, h.Tick, reach, w.measured)
}

// peerInstance checks the instance fields of a message of the other party
// (codec.MulPayload.Inc and Peer), which is authenticated but not yet
// checked for freshness. Two instances of one party may overlap (a
// rolling restart, a second replica by mistake): the later one restores
// the state record and claims it, and the earlier one learns it is fenced
// only when its next write fails; until then both would answer the other
// party, take different items and leave the loop's shares diverged. So
// the other party decides: it works with the latest instance it has heard
// from, refuses the messages of earlier ones (ErrInstance), and names the
// instance it works with in each of its messages, which stops an earlier
// instance at the first one it receives.
func (w *worker) peerInstance(inc, peer uint64) error {
	if peer > w.inc {
		w.fenced = true
		w.s.opt.Log.Error("stopping loop: the other party works with a later instance of this party (two instances overlapped, or the state bucket was recreated: restart both parties)",
			"party", w.id, "loop", w.loop, "instance", w.inc, "peer_works_with", peer)
		return ErrFenced
	}
	switch {
	case inc < w.peerInc:
		err := fmt.Errorf("%w: %s instance %d, this loop works with its instance %d", codec.ErrInstance, w.peer, inc, w.peerInc)
		w.reject(err)
		return err
	case inc > w.peerInc:
		if w.peerInc != 0 {
			w.s.opt.Log.Warn("the other party is a new instance: working with it", "party", w.id, "loop", w.loop, "from", w.peerInc, "to", inc)
		}
		// What an earlier instance sent ahead is not this one's.
		clear(w.pendMul)
		clear(w.pendTrunc)
		w.peerPre.ok = false
		w.peerInc = inc
		w.peerIncPub.Store(inc)
	}
	return nil
}

// onAnnounce takes the other party's announcement of a new instance
// (announce) in the per-tick variant.
func (w *worker) onAnnounce(mp codec.MulPayload) {
	if len(mp.S.Data) != 0 || len(mp.T.Data) != 0 || mp.S.Rows|mp.S.Cols|mp.T.Rows|mp.T.Cols != 0 {
		w.reject(fmt.Errorf("%w: a tick-0 announcement carries matrices", codec.ErrDimension))
		return
	}
	if mp.Version != w.epoch {
		w.reject(fmt.Errorf("%w: instance announcement of set-up epoch %d, want %d", codec.ErrReplay, mp.Version, w.epoch))
		return
	}
	_ = w.peerInstance(mp.Inc, mp.Peer)
}

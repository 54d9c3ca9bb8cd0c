package sensor

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The sensor's part of the two-hop tick (docs/two-hop-design.md,
// Options.TwoHop): each party, after a tick, sends its share of the next
// item's V_y (KindMaskY). When both shares of the same item, both made after
// the last tick the sensor sent, are here at the next tick, the sensor sends
// both parties T_y = ȳ - V_y (KindMeasureMasked) instead of shares of ȳ;
// otherwise the shares, as without it. Each mask is used for one tick at
// most and dropped at the next tick either way. The sensor learns V_y, which
// pads only its own measurement; it never receives the state rows of V.

// maskShare is one party's KindMaskY.
type maskShare struct {
	ok    bool
	after uint64 // the tick after which the party made it (its header tick)
	item  uint64 // the item's id as the wire carries it
	v     mpc.Matrix
}

// masks holds the parties' latest mask shares (written by the
// subscription's callback, taken by the tick loop).
type masks struct {
	mu    sync.Mutex
	share [2]maskShare
	guard *codec.ReplayGuard
}

// subscribeMasks starts receiving the parties' mask shares.
func (s *Sensor) subscribeMasks() error {
	if s.maskSub != nil {
		return nil
	}
	s.masks.guard = codec.NewReplayGuard()
	sub, err := s.nc.Subscribe(bus.MaskYSubject(s.opt.Loop), s.onMaskY)
	if err != nil {
		return fmt.Errorf("sensor: subscribing to the parties' masks: %w", err)
	}
	s.maskSub = sub
	return nil
}

// onMaskY admits one party's mask share: sealed to the sensor by a party,
// for this loop, fresh, p x 1.
func (s *Sensor) onMaskY(m *nats.Msg) {
	prm := s.rz.Params
	h, body, err := s.sealer.Open(m.Data)
	if err == nil && (h.Kind != codec.KindMaskY || h.Loop != s.opt.Loop) {
		err = fmt.Errorf("%w: %s for loop %q on loop %q's mask subject", codec.ErrHeader, h.Kind, h.Loop, s.opt.Loop)
	}
	var id int
	if err == nil {
		var ok bool
		if id, ok = h.From.PartyID(); !ok {
			err = fmt.Errorf("%w: mask from %s", codec.ErrRole, h.From)
		}
	}
	if err != nil {
		s.opt.Metrics.Reject(err)
		s.opt.Log.Debug("mask rejected", "loop", s.opt.Loop, "err", err)
		return
	}
	var mp codec.MaskYPayload
	v := mpc.NewMatrix(prm.P, 1)
	s.masks.mu.Lock()
	defer s.masks.mu.Unlock()
	if err := s.masks.guard.Admit(h, body, &mp, func() error { return mp.V.DecodeInto(prm.Field, v) }); err != nil {
		s.opt.Metrics.Reject(err)
		s.opt.Log.Debug("mask rejected", "loop", s.opt.Loop, "party", id, "err", err)
		return
	}
	s.masks.share[id] = maskShare{ok: true, after: h.Tick, item: mp.Item, v: v}
}

// takeMask returns V_y and the item for the tick after tick last, if both
// parties sent their shares of the same item after it, and drops the
// shares held either way.
func (s *Sensor) takeMask(last uint64) (item uint64, vy mpc.Matrix, ok bool) {
	s.masks.mu.Lock()
	defer s.masks.mu.Unlock()
	a, b := s.masks.share[0], s.masks.share[1]
	s.masks.share = [2]maskShare{}
	if !a.ok || !b.ok || a.after != last || b.after != last {
		return 0, mpc.Matrix{}, false
	}
	if a.item != b.item {
		s.opt.Metrics.Mismatches.WithLabelValues(s.opt.Loop, "item").Inc()
		return 0, mpc.Matrix{}, false
	}
	f := s.rz.Params.Field
	f.MatAdd(a.v, a.v, b.v)
	return a.item, a.v, true
}

package sensor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
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
	// arrived is signalled (without blocking) when a share is admitted.
	arrived chan struct{}
}

// readyLocked reports whether both parties' shares made after tick last
// are here (under mu).
func (m *masks) readyLocked(last uint64) bool {
	a, b := m.share[0], m.share[1]
	return a.ok && b.ok && a.after == last && b.after == last
}

// ready is readyLocked taking mu.
func (m *masks) ready(last uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.readyLocked(last)
}

// A Fast sensor (ticks back to back, the demo's simulated time) reads the
// plant as soon as the actuator has applied the last input, before the
// parties' mask shares for the next tick have left them (they follow the
// tick's deferred work, DUET_PERSIST_DELAY later): without waiting it sent
// 24 of 1,500 ticks masked in a 60-s demo. So it waits up to fastMaskWait
// for both shares. After fastMaskGiveUp waits in a row that ended without
// them (parties without the two-hop tick, or backing off) it waits only
// after ticks that are multiples of fastMaskProbe, the ticks after which
// parties that back off still pre-open (bus.TwoHopProbe), until a wait
// succeeds again. Before, it waited at every 25th tick counted from when it
// gave up, which met the parties' probes only by chance, so a loop could
// stay on three hops for good. In real time the period leaves the shares
// ample time, and the sensor never waits.
const (
	fastMaskWait   = 20 * time.Millisecond
	fastMaskGiveUp = 3
	fastMaskProbe  = bus.TwoHopProbe
)

// subscribeMasks starts receiving the parties' mask shares.
func (s *Sensor) subscribeMasks() error {
	if s.maskSub != nil {
		return nil
	}
	s.masks.guard = codec.NewReplayGuard()
	s.masks.arrived = make(chan struct{}, 1)
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
	if err := s.masks.guard.Admit(h, body, &mp, func() error {
		// Of an earlier set-up, its mask has padded a measurement already.
		if err := codec.SameEpoch("a mask share", mp.Epoch, s.epoch, "a party of an earlier release; the ticks run in three hops until it is upgraded"); err != nil {
			return err
		}
		return mp.V.DecodeInto(prm.Field, v)
	}); err != nil {
		s.opt.Metrics.Reject(err)
		s.opt.Log.Debug("mask rejected", "loop", s.opt.Loop, "party", id, "err", err)
		return
	}
	s.masks.putLocked(id, maskShare{ok: true, after: h.Tick, item: mp.Item, v: v})
}

// putLocked keeps party id's admitted share and tells a waiting awaitMask
// (under mu).
func (m *masks) putLocked(id int, sh maskShare) {
	m.share[id] = sh
	select {
	case m.arrived <- struct{}{}:
	default:
	}
}

// awaitMask waits, with Options.Fast only and at most fastMaskWait, until
// both parties' mask shares made after tick last are here (see
// fastMaskWait); takeMask then takes them, or sends shares without them.
func (s *Sensor) awaitMask(ctx context.Context, last uint64) {
	if !s.opt.Fast || last == 0 {
		return
	}
	if s.masks.ready(last) {
		s.maskWaitsFailed = 0
		return
	}
	if s.maskWaitsFailed >= fastMaskGiveUp && last%fastMaskProbe != 0 {
		return // given up: probe only where backed-off parties do
	}
	if s.maskTimer == nil {
		s.maskTimer = time.NewTimer(fastMaskWait)
	} else {
		s.maskTimer.Reset(fastMaskWait)
	}
	defer s.maskTimer.Stop()
	for {
		select {
		case <-s.masks.arrived:
			if s.masks.ready(last) {
				s.maskWaitsFailed = 0
				return
			}
		case <-s.maskTimer.C:
			s.maskWaitsFailed++
			return
		case <-ctx.Done():
			return
		}
	}
}

// takeMask returns V_y and the item for the tick after tick last, if both
// parties sent their shares of the same item after it, and drops the
// shares held either way.
func (s *Sensor) takeMask(last uint64) (item uint64, vy mpc.Matrix, ok bool) {
	s.masks.mu.Lock()
	defer s.masks.mu.Unlock()
	a, b := s.masks.share[0], s.masks.share[1]
	ready := s.masks.readyLocked(last)
	s.masks.share = [2]maskShare{}
	if !ready {
		return 0, mpc.Matrix{}, false
	}
	if a.item != b.item {
		s.opt.Metrics.Mismatches.WithLabelValues(s.opt.Loop, metrics.KindItem).Inc()
		return 0, mpc.Matrix{}, false
	}
	f := s.rz.Params.Field
	f.MatAdd(a.v, a.v, b.v)
	return a.item, a.v, true
}

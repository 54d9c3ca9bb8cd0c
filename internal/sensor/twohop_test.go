package sensor

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// fastSensor is a Sensor with only what awaitMask and takeMask use.
func fastSensor(t *testing.T, fast bool) *Sensor {
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	s := &Sensor{opt: Options{Fast: fast}}
	s.rz.Params.Field = f
	s.masks.arrived = make(chan struct{}, 1)
	return s
}

// give stores party id's mask share made after tick after, as onMaskY
// does once it has admitted one (putLocked).
func (s *Sensor) give(id int, after, item uint64) {
	s.masks.mu.Lock()
	s.masks.putLocked(id, maskShare{ok: true, after: after, item: item, v: mpc.NewMatrix(1, 1)})
	s.masks.mu.Unlock()
}

// TestAwaitMask: a Fast sensor waits for both parties' mask shares for the
// next tick; after fastMaskGiveUp waits in a row that ended without them it
// waits only after ticks that are multiples of fastMaskProbe, where parties
// that back off still pre-open, until a wait succeeds again; a sensor in
// real time never waits.
func TestAwaitMask(t *testing.T) {
	ctx := context.Background()
	s := fastSensor(t, true)
	// Both shares already here: no wait, and takeMask takes them.
	s.give(0, 7, 42)
	s.give(1, 7, 42)
	s.awaitMask(ctx, 7)
	if s.maskWaitsFailed != 0 {
		t.Fatalf("waits failed %d with both shares here", s.maskWaitsFailed)
	}
	if item, _, ok := s.takeMask(7); !ok || item != 42 {
		t.Fatalf("takeMask = %d, %v; want item 42", item, ok)
	}
	// Taken once only: a mask pads one measurement.
	if item, _, ok := s.takeMask(7); ok {
		t.Fatalf("takeMask again = item %d: a mask taken twice", item)
	}
	// One share here, the other arriving during the wait.
	s.give(0, 8, 43)
	go s.give(1, 8, 43)
	s.awaitMask(ctx, 8)
	if s.maskWaitsFailed != 0 {
		t.Fatalf("waits failed %d with the second share arriving during the wait", s.maskWaitsFailed)
	}
	if _, _, ok := s.takeMask(8); !ok {
		t.Fatal("takeMask after the wait: no mask")
	}
	// A share for an earlier tick is not the next tick's: the wait times
	// out, and after fastMaskGiveUp of those the sensor stops waiting.
	for i := 1; i <= fastMaskGiveUp; i++ {
		if i == 1 {
			s.give(0, 8, 44) // stale: made after tick 8, the sensor last sent 9
		}
		s.awaitMask(ctx, 9)
		if s.maskWaitsFailed != i {
			t.Fatalf("after %d waits without the shares: %d counted", i, s.maskWaitsFailed)
		}
	}
	if _, _, ok := s.takeMask(9); ok {
		t.Fatal("takeMask took a stale share")
	}
	// Given up: after ticks 10 to 49, other than 25, it does not wait (no
	// failed wait counted); after tick 25, a multiple of fastMaskProbe, it
	// probes, and that wait fails too.
	for last := uint64(10); last < 2*fastMaskProbe; last++ {
		s.awaitMask(ctx, last)
		want := fastMaskGiveUp
		if last >= fastMaskProbe {
			want++
		}
		if s.maskWaitsFailed != want {
			t.Fatalf("given up, after tick %d: %d waits failed, want %d", last, s.maskWaitsFailed, want)
		}
	}
	// The probe after tick 50 finds the parties sending again (one share
	// here, the other arriving during the wait): it waits at every tick again.
	s.give(0, 2*fastMaskProbe, 45)
	go s.give(1, 2*fastMaskProbe, 45)
	s.awaitMask(ctx, 2*fastMaskProbe)
	if s.maskWaitsFailed != 0 {
		t.Fatalf("after the probe found both shares: %d waits failed", s.maskWaitsFailed)
	}
	if item, _, ok := s.takeMask(2 * fastMaskProbe); !ok || item != 45 {
		t.Fatalf("takeMask = %d, %v; want item 45", item, ok)
	}
	// In real time (not Fast) the sensor never waits.
	r := fastSensor(t, false)
	r.awaitMask(ctx, 3)
	if r.maskWaitsFailed != 0 {
		t.Fatalf("real time: %d waits counted", r.maskWaitsFailed)
	}
	// A cancelled context ends a wait without counting it.
	c := fastSensor(t, true)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c.awaitMask(cctx, 3)
	if c.maskWaitsFailed != 0 {
		t.Fatalf("cancelled: %d waits counted", c.maskWaitsFailed)
	}
}

// A party's mask share delivered again (a broker replaying it) is refused
// as a replay and counted, and replaces nothing: only a share made after a
// later tick is taken. So is one of an earlier set-up (another epoch), whose
// ticks a new set-up numbers again from 1.
func TestMaskShareReplayRefused(t *testing.T) {
	s := fastSensor(t, false)
	sealers := testkeys.Sealers(t)
	s.sealer, s.opt.Loop, s.opt.Metrics = sealers[codec.RoleSensor], "l", metrics.New("sensor")
	s.opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	s.rz.Params.P = 1
	s.masks.guard = codec.NewReplayGuard()
	s.epoch = 1_700_000_000_000_000_000
	f := s.rz.Params.Field
	epoch := s.epoch
	share := func(tick, item uint64) *nats.Msg {
		body, err := codec.Marshal(codec.MaskYPayload{Item: item, V: codec.PutMatrix(f, mpc.NewMatrix(1, 1)), Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		env, err := sealers[codec.RoleParty0].Seal(codec.Header{Kind: codec.KindMaskY, Loop: "l", Tick: tick, From: codec.RoleParty0, To: codec.RoleSensor}, body)
		if err != nil {
			t.Fatal(err)
		}
		return &nats.Msg{Data: env}
	}
	first := share(5, 40)
	s.onMaskY(first)
	s.onMaskY(share(6, 41))
	s.onMaskY(first) // replayed
	epoch = s.epoch - 1
	s.onMaskY(share(7, 42)) // an earlier set-up's, at a later tick
	if n := testutil.ToFloat64(s.opt.Metrics.Rejects.WithLabelValues("replay")); n != 2 {
		t.Errorf("%v replay rejects, want 2", n)
	}
	if got := s.masks.share[0]; got.after != 6 || got.item != 41 {
		t.Errorf("party0's share: after tick %d, item %d; want the later one (6, 41)", got.after, got.item)
	}
}

package demo

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The fixed-mask set-up's tick-0 message carries the other party's share of
// S, and it may come again (a request, an answer). A share of another
// set-up epoch, or a different one once the set-up is complete, must be
// refused: accepted, it would change the opened S under the running loop,
// and every input after it would be wrong.
func TestFixedSReplayRefused(t *testing.T) {
	c := startCluster(t, mpc.FixedMask, 1)
	ctx := context.Background()
	if err := c.RunTicks(ctx, 50); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Sealed with P0's own key: what a replay of an earlier message of P0's
	// would be, except for the S it carries.
	sealer, err := codec.NewSealer(codec.RoleParty0, c.Identity(codec.RoleParty0), c.PublicKeys())
	if err != nil {
		t.Fatal(err)
	}
	prm := c.Sensor.Resolved().Params
	r, cols := prm.PhiShape()
	s, err := prm.Field.RandomMatrix(mpc.NewPRG([32]byte{7}, [16]byte{}), r, cols)
	if err != nil {
		t.Fatal(err)
	}
	epoch := c.Sensor.Epoch()
	before := counter(c, "party1", "replay")
	inc, peer := instances(t, c, 0)
	for _, version := range []uint64{epoch, epoch - 1, 0} {
		body, err := codec.Marshal(codec.MulPayload{Item: 1, Version: version, S: codec.PutMatrix(prm.Field, s), Inc: inc, Peer: peer})
		if err != nil {
			t.Fatal(err)
		}
		env, err := sealer.Seal(codec.Header{Kind: codec.KindMul, Loop: "pendulum", Tick: 0, From: codec.RoleParty0, To: codec.RoleParty1}, body)
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(bus.ExchangeSubject("pendulum", 1), env); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	if err := c.RunTicks(ctx, 200); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := counter(c, "party1", "replay") - before; got < 3 {
		t.Errorf("party1 replay rejects = %v after three foreign S shares, want >= 3", got)
	}
	sm := Summarize(followed(t, c))
	cs, _ := pendulum(t)
	if bound := sim.OutputBound(cs, c.Sensor.Resolved()); sm.Applied < 240 || sm.MaxDiff > bound {
		t.Fatalf("loop disturbed: %d applied, max |u - u_plain| %g (bound %g) of 250 ticks", sm.Applied, sm.MaxDiff, bound)
	}
}

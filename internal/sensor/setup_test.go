package sensor

import (
	"bytes"
	"io"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Each role's set-up record holds what that role needs and nothing of the
// other party's: party1's no P0 seed (with it party1 could rebuild every
// compressed triple), party0's no share of the fixed mask U (with P1's
// share party0 would learn U), the actuator's no share at all; each party's
// Φ and x0 are shares, not the values, that add up to them. Such a leak
// keeps u right, so no other test would see it.
func TestSetupRecordsHoldOnlyTheirRolesShare(t *testing.T) {
	cs := pendulumController(t)
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		t.Run(v.String(), func(t *testing.T) {
			nc := natstest.Conn(t)
			sealers := testkeys.Sealers(t)
			s, err := New(nc, sealers[codec.RoleSensor], Options{Loop: "l", Controller: cs, Variant: v, Compress: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Setup(t.Context()); err != nil {
				t.Fatal(err)
			}
			read := func(r codec.Role) codec.SetupPayload { return readSetup(t, nc, sealers, r) }
			p0, p1, act := read(codec.RoleParty0), read(codec.RoleParty1), read(codec.RoleActuator)
			if len(p0.P0Seed) != 32 || len(p1.P0Seed) != 0 {
				t.Errorf("P0 seed: %d bytes in party0's record, %d in party1's; want 32 and none", len(p0.P0Seed), len(p1.P0Seed))
			}
			if len(p0.FixedU.Data) != 0 || (len(p1.FixedU.Data) != 0) != (v == mpc.FixedMask) {
				t.Errorf("fixed mask U: %d bytes in party0's record, %d in party1's; want none, and party1's share in the fixed-mask variant only",
					len(p0.FixedU.Data), len(p1.FixedU.Data))
			}
			if len(act.Phi.Data)+len(act.X0.Data)+len(act.P0Seed)+len(act.FixedU.Data) != 0 {
				t.Errorf("the actuator's record holds shares: %+v", act)
			}
			rz := s.Resolved()
			f := rz.Params.Field
			for _, c := range []struct {
				name   string
				w0, w1 codec.MatrixWire
				want   mpc.Matrix
			}{{"Φ", p0.Phi, p1.Phi, rz.Phi}, {"x0", p0.X0, p1.X0, rz.X0}} {
				m0, err := c.w0.Decode(f, c.want.Rows, c.want.Cols)
				if err != nil {
					t.Fatal(err)
				}
				m1, err := c.w1.Decode(f, c.want.Rows, c.want.Cols)
				if err != nil {
					t.Fatal(err)
				}
				sum := mpc.NewMatrix(c.want.Rows, c.want.Cols)
				f.MatAdd(sum, m0, m1)
				if !sum.Equal(c.want) {
					t.Errorf("%s: the parties' shares do not add up to it", c.name)
				}
				if m0.Equal(c.want) || m1.Equal(c.want) {
					t.Errorf("%s: a party's record holds the value itself, not a share", c.name)
				}
			}
		})
	}
}

// readSetup reads and opens role r's set-up record of loop "l".
func readSetup(t *testing.T, nc *nats.Conn, sealers map[codec.Role]*codec.Sealer, r codec.Role) codec.SetupPayload {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), bus.SetupBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), bus.SetupKey("l", r))
	if err != nil {
		t.Fatal(err)
	}
	h, body, err := sealers[r].Open(e.Value())
	if err != nil || h.Kind != codec.KindSetup || h.To != r {
		t.Fatalf("%s's record: %v, %+v", r, err, h)
	}
	var p codec.SetupPayload
	if err := codec.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two sensors of one controller share it afresh: party0's shares of Φ and
// x0 and its P0 seed differ between their set-ups, and so do the streams
// their measurements are shared from. A sensor whose randomness were fixed
// (a zero key, a seed from the controller) would hand the same shares to a
// party after every new set-up, and shares of one value taken twice with
// the same mask tell a party the difference of the values; u would stay
// right, so no other test would see it.
func TestSensorsShareAfresh(t *testing.T) {
	cs := pendulumController(t)
	sealers := testkeys.Sealers(t)
	var p0 [2]codec.SetupPayload
	var stream [2][64]byte
	for i := range p0 {
		nc := natstest.Conn(t)
		s, err := New(nc, sealers[codec.RoleSensor], Options{Loop: "l", Controller: cs, Variant: mpc.FixedMask, Compress: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Setup(t.Context()); err != nil {
			t.Fatal(err)
		}
		p0[i] = readSetup(t, nc, sealers, codec.RoleParty0)
		if _, err := io.ReadFull(s.rng, stream[i][:]); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(p0[0].Phi.Data, p0[1].Phi.Data) || bytes.Equal(p0[0].X0.Data, p0[1].X0.Data) {
		t.Error("two set-ups gave party0 the same share of Φ or of x0")
	}
	if bytes.Equal(p0[0].P0Seed, p0[1].P0Seed) {
		t.Error("two set-ups gave party0 the same P0 seed")
	}
	if stream[0] == stream[1] {
		t.Error("two sensors share measurements from the same stream")
	}
}

// pendulumController is the pendulum's controller spec (examples/qube-servo2).
func pendulumController(t *testing.T) mpc.ControllerSpec {
	t.Helper()
	cs, err := mpc.LoadControllerSpec("../../examples/qube-servo2/controller.json")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

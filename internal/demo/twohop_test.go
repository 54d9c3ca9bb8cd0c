package demo

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestLoopTwoHop runs the pendulum with the two-hop tick (DUET_TWO_HOP on the
// sensor and both parties), in real time so that the parties' pre-openings
// come between ticks: the loop balances as with three hops, u stays within
// the fixed-point bound of the float64 controller, the parties use the same
// item on every tick and none twice, and almost every tick takes the short
// path at the sensor and at both parties.
func TestLoopTwoHop(t *testing.T) {
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		t.Run(v.String(), func(t *testing.T) {
			cs, ps := pendulum(t)
			// A 20-ms period: a stall of the shared machine shorter than
			// that leaves the mask shares in time for the next tick (with
			// 10 ms, a run of the package's tests on a busy 2-core VM
			// sent 259-282 of 300 ticks masked, against 298 when quiet).
			c := startWith(t, Options{Controller: cs, Plant: ps, Variant: v, Compress: true, Period: 20 * time.Millisecond,
				Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100, TwoHop: true}, 50)
			// Everything the parties send the sensor, as the broker sees it.
			nc, err := nats.Connect(c.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			masks := make(chan *nats.Msg, 4096)
			sub, err := nc.ChanSubscribe(bus.MaskYSubject(c.opt.Loop), masks)
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			const ticks = 300
			audit := startWireAudit(t, c)
			s := runTwoHop(t, c, ticks)
			if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.MaxDiff > bound {
				t.Fatalf("max |u - uplain| = %g exceeds the bound %g", s.MaxDiff, bound)
			}
			checkAudit(t, c, ticks-5)
			audit.check(codec.KindPreT)
			loop := c.opt.Loop
			paths := func(service, path string) float64 {
				return testutil.ToFloat64(c.Metrics[service].TickPaths.WithLabelValues(loop, path))
			}
			// The first tick has no pre-opening (three hops); the rest should
			// all be short on an idle machine, allowing for a few stalls.
			if got := paths("sensor", "two_hop"); got < ticks-20 {
				t.Errorf("sensor: %v of %d ticks sent masked (three_hop %v)", got, ticks, paths("sensor", "three_hop"))
			}
			for i := 0; i < 2; i++ {
				name := fmt.Sprintf("party%d", i)
				if two, fb := paths(name, "two_hop"), paths(name, "fallback"); two < ticks-20 || two+fb != paths("sensor", "two_hop") {
					t.Errorf("%s: two_hop %v, fallback %v; the sensor sent %v masked", name, two, fb, paths("sensor", "two_hop"))
				}
			}
			// The sensor receives only the measurement rows of each item's
			// V (p x 1), never the state rows, each sealed to it.
			sensorSealer, err := codec.NewSealer(codec.RoleSensor, c.Identity(codec.RoleSensor), c.PublicKeys())
			if err != nil {
				t.Fatal(err)
			}
			prm := c.Sensor.Resolved().Params
			if err := sub.Unsubscribe(); err != nil {
				t.Fatal(err)
			}
			var got []*nats.Msg
			for len(masks) > 0 {
				got = append(got, <-masks)
			}
			var n int
			var replay []byte
			for _, m := range got {
				h, body, err := sensorSealer.Open(m.Data)
				if err != nil {
					t.Fatalf("mask share: %v", err)
				}
				var mp codec.MaskYPayload
				if err := codec.Unmarshal(body, &mp); err != nil {
					t.Fatal(err)
				}
				if h.Kind != codec.KindMaskY || mp.V.Rows != uint32(prm.P) || mp.V.Cols != 1 {
					t.Fatalf("the sensor received %s with a %dx%d matrix, want mask_y with %dx1", h.Kind, mp.V.Rows, mp.V.Cols, prm.P)
				}
				n++
				replay = m.Data
			}
			if n < 2*(ticks-20) {
				t.Errorf("%d mask shares seen for %d ticks", n, ticks)
			}
			// A replayed mask share and one with the state rows too (as a
			// compromised party might send) are refused and counted.
			before := counter(c, "sensor", "replay") + counter(c, "sensor", "dimension")
			p0, err := codec.NewSealer(codec.RoleParty0, c.Identity(codec.RoleParty0), c.PublicKeys())
			if err != nil {
				t.Fatal(err)
			}
			body, err := codec.Marshal(codec.MaskYPayload{Item: 1, V: codec.PutMatrix(prm.Field, mpc.NewMatrix(prm.N+prm.P, 1)), Epoch: c.Sensor.Epoch()})
			if err != nil {
				t.Fatal(err)
			}
			wide, err := p0.Seal(codec.Header{Kind: codec.KindMaskY, Loop: c.opt.Loop, Tick: 1 << 40, From: codec.RoleParty0, To: codec.RoleSensor}, body)
			if err != nil {
				t.Fatal(err)
			}
			for _, env := range [][]byte{replay, wide} {
				if err := nc.Publish(bus.MaskYSubject(c.opt.Loop), env); err != nil {
					t.Fatal(err)
				}
			}
			nc.Flush()
			deadline := time.Now().Add(2 * time.Second)
			for counter(c, "sensor", "replay")+counter(c, "sensor", "dimension") < before+2 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := counter(c, "sensor", "replay") + counter(c, "sensor", "dimension"); got != before+2 {
				t.Errorf("the sensor counted %v replay and dimension rejects for a replayed and a too-wide mask share, want %v", got, before+2)
			}
			t.Logf("ticks %d misses %d p50 %v p99 %v max|Δu| %.4g two-hop %v/%v/%v", s.Ticks, s.Misses, s.P50, s.P99, s.MaxDiff,
				paths("sensor", "two_hop"), paths("party0", "two_hop"), paths("party1", "two_hop"))
		})
	}
}

// TestTwoHopPartiesRejectMalformed: a masked measurement and pre-openings
// sealed with the genuine sensor's and peer's keys (a compromised or buggy
// sender) but of the wrong shape are refused by party 0 and counted, and the
// loop goes on in two hops with the right outputs.
func TestTwoHopPartiesRejectMalformed(t *testing.T) {
	cs, ps := pendulum(t)
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true, Period: 10 * time.Millisecond,
		Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100, TwoHop: true}, 50)
	if err := c.RunTicks(context.Background(), 30); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prm := c.Sensor.Resolved().Params
	f := prm.Field
	seal := func(from codec.Role, kind codec.Kind, v any) []byte {
		t.Helper()
		s, err := codec.NewSealer(from, c.Identity(from), c.PublicKeys())
		if err != nil {
			t.Fatal(err)
		}
		body, err := codec.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		// A tick ahead of the loop's (none of these is admitted, so the
		// loop's later ticks are not refused), but within the other
		// party's reach: party0 refuses one further beyond its latest
		// measurement as malformed, before its shape is looked at.
		env, err := s.Seal(codec.Header{Kind: kind, Loop: c.opt.Loop, Tick: 1 << 9, From: from, To: codec.RoleParty0}, body)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	col := func(rows int) codec.MatrixWire { return codec.PutMatrix(f, mpc.NewMatrix(rows, 1)) }
	_, phiCols := prm.PhiShape()
	inc, peer := instances(t, c, 1)
	bad := []struct {
		subject string
		env     []byte
	}{
		// T_y with a row too many.
		{bus.MeasureSubject(c.opt.Loop, 0), seal(codec.RoleSensor, codec.KindMeasureMasked, codec.MeasureMaskedPayload{Item: 1, T: col(prm.P + 1), SentUnixNano: time.Now().UnixNano()})},
		// T_x with a row too many.
		{bus.ExchangeSubject(c.opt.Loop, 0), seal(codec.RoleParty1, codec.KindPreT, codec.MulPayload{Item: 1, T: col(prm.N + 1), Inc: inc, Peer: peer})},
		// An S in the fixed-mask variant (opened once, at set-up).
		{bus.ExchangeSubject(c.opt.Loop, 0), seal(codec.RoleParty1, codec.KindPreT, codec.MulPayload{Item: 1, T: col(prm.N), S: col(prm.N), Inc: inc, Peer: peer})},
		// The same in a tick's Protocol 1 message.
		{bus.ExchangeSubject(c.opt.Loop, 0), seal(codec.RoleParty1, codec.KindMul, codec.MulPayload{Item: 1, T: col(phiCols), S: col(prm.N), Inc: inc, Peer: peer})},
	}
	before := counter(c, "party0", "dimension")
	for _, b := range bad {
		if err := nc.Publish(b.subject, b.env); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	two0 := testutil.ToFloat64(c.Metrics["sensor"].TickPaths.WithLabelValues(c.opt.Loop, "two_hop"))
	const ticks = 100
	if err := c.RunTicks(context.Background(), ticks); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := counter(c, "party0", "dimension") - before; got != float64(len(bad)) {
		t.Errorf("party0 counted %v dimension rejects for %d malformed messages", got, len(bad))
	}
	if two := testutil.ToFloat64(c.Metrics["sensor"].TickPaths.WithLabelValues(c.opt.Loop, "two_hop")) - two0; two < ticks-20 {
		t.Errorf("after the malformed messages %v of %d ticks went in two hops", two, ticks)
	}
	s := Summarize(followed(t, c))
	if s.Applied < 30+ticks-5 || s.Misses > 5 {
		t.Fatalf("loop disturbed: %d applied, %d misses of %d ticks", s.Applied, s.Misses, 30+ticks)
	}
	if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.MaxDiff > bound {
		t.Fatalf("max |u - uplain| = %g exceeds the bound %g", s.MaxDiff, bound)
	}
	checkAudit(t, c, 30+ticks-5)
}

// TestTwoHopThroughBatches: with every message to the other party sent as
// a batch (as under load, when the dispatcher has more messages waiting),
// the pre-openings travel in batches too, a lone one as well, and are taken
// from them: nothing travels on the loop's exchange subjects, the ticks stay
// short at both parties and nothing is refused as a wrong kind.
func TestTwoHopThroughBatches(t *testing.T) {
	cs, ps := pendulum(t)
	// 20 ms, as TestLoopTwoHop: at 10 ms a stall of the shared VM pushed
	// ticks to three hops (173 of 200 in two hops in one run of the suite).
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Period: 20 * time.Millisecond,
		Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100, TwoHop: true, PeerBatchAlways: true}, 50)
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var direct atomic.Int64
	for i := 0; i < 2; i++ {
		if _, err := nc.Subscribe(bus.ExchangeSubject(c.opt.Loop, i), func(*nats.Msg) { direct.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const ticks = 200
	runTwoHop(t, c, ticks)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := direct.Load(); n != 0 {
		t.Errorf("%d messages on the loop's exchange subjects: want every message to the other party in a batch", n)
	}
	checkAudit(t, c, ticks-5)
	loop := c.opt.Loop
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("party%d", i)
		m := c.Metrics[name]
		two := testutil.ToFloat64(m.TickPaths.WithLabelValues(loop, "two_hop"))
		fb := testutil.ToFloat64(m.TickPaths.WithLabelValues(loop, "fallback"))
		if two < ticks-20 {
			t.Errorf("%s: %v of %d ticks in two hops, %v fallbacks", name, two, ticks, fb)
		}
		if k := testutil.ToFloat64(m.Rejects.WithLabelValues("kind")); k != 0 {
			t.Errorf("%s: %v messages refused as a wrong kind", name, k)
		}
	}
}

// runTwoHop runs ticks ticks in real time and requires nearly all of them
// applied.
func runTwoHop(t *testing.T, c *Cluster, ticks int) Summary {
	t.Helper()
	if err := c.RunTicks(context.Background(), uint64(ticks)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	s := Summarize(c.Records())
	if s.Applied < ticks-5 || s.Misses > 5 {
		t.Fatalf("applied %d of %d ticks, %d misses", s.Applied, ticks, s.Misses)
	}
	return s
}

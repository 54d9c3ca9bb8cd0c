package demo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/sim"
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
			c := startWith(t, Options{Controller: cs, Plant: ps, Variant: v, Compress: true, Period: 10 * time.Millisecond,
				Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100, TwoHop: true}, 50)
			const ticks = 300
			if err := c.RunTicks(context.Background(), ticks); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			s := Summarize(c.Records())
			if s.Applied < ticks-5 || s.Misses > 5 {
				t.Fatalf("applied %d of %d ticks, %d misses", s.Applied, ticks, s.Misses)
			}
			if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.MaxDiff > bound {
				t.Fatalf("max |u - uplain| = %g exceeds the bound %g", s.MaxDiff, bound)
			}
			checkAudit(t, c, ticks-5)
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
			t.Logf("ticks %d misses %d p50 %v p99 %v max|Δu| %.4g two-hop %v/%v/%v", s.Ticks, s.Misses, s.P50, s.P99, s.MaxDiff,
				paths("sensor", "two_hop"), paths("party0", "two_hop"), paths("party1", "two_hop"))
		})
	}
}

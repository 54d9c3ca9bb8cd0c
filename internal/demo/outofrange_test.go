package demo

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// A plant whose measurement leaves the controller's range (Q<18,9>: ±256
// for the pendulum's angles) sends no shares, but its ticks still reach the
// actuator: each gets the fail-safe at its deadline, counted as a miss,
// instead of the plant keeping the last input it was given.
func TestOutOfRangeMeasurementAppliesFailSafe(t *testing.T) {
	cs, _ := pendulum(t)
	ps := plant.Spec{Kind: plant.KindLTI, A: [][]float64{{1}}, B: [][]float64{{0}}, C: [][]float64{{300}, {0}}, X0: []float64{1}}
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 100}, 50)
	const ticks = 20
	if err := c.RunTicks(context.Background(), ticks); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the last deadline
	if got := testutil.ToFloat64(c.Metrics["sensor"].Rejects.WithLabelValues("range")); got != ticks {
		t.Errorf("sensor counted %v measurements out of range, want %d", got, ticks)
	}
	s := Summarize(c.Records())
	if s.Misses != ticks || s.Applied != ticks {
		t.Fatalf("actuator: %d fail-safes of %d inputs applied for %d ticks out of range (all of them fail-safes); want a fail-safe for each", s.Misses, s.Applied, ticks)
	}
}

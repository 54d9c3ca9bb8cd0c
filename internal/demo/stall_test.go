package demo

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A stalled party costs the ticks it stalled, not a further tick to
// resynchronize. Party0 stops right after its multiplication of a tick t
// (as a host freeze would stop it), so its Protocol 1 message of t+1 reaches
// party1 after the sensor's measurement of t+2.
//
// For 90 ms: party1 holds that measurement until t+1 ends instead of
// abandoning t+1, which party0 still finishes (with party1's message,
// waiting in its queue). Had party1 given t+1 up, their state versions
// would differ at t+2 and both would abandon it too: one state version
// mismatch per stall at each party, what this test saw before the hold.
//
// For 130 ms the measurement of t+3 comes too: party1 gives up t+1 and the
// held t+2 (a version mismatch follows, as before), and discards an item
// for t+2, which took none at party1 but one at party0, so that their items
// stay paired (without that, an item mismatch per stall).
func TestStalledPartyKeepsTicksPaired(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	for _, stall := range []time.Duration{90 * time.Millisecond, 130 * time.Millisecond} {
		t.Run(stall.String(), func(t *testing.T) {
			stallAt := map[uint64]bool{}
			for k := uint64(60); k <= 270; k += 30 {
				stallAt[k] = true
			}
			cs, ps := pendulum(t)
			c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true,
				Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 300, Log: testLog(t),
				AfterMultiply: func(party int, tick uint64) {
					if party == 0 && stallAt[tick] {
						time.Sleep(stall)
					}
				}}, 300)
			audit := startWireAudit(t, c)
			if err := c.RunTicks(context.Background(), 300); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			m0, m1 := c.Metrics["party0"], c.Metrics["party1"]
			mismatches := func(kind string) float64 {
				return testutil.ToFloat64(m0.Mismatches.WithLabelValues("pendulum", kind)) +
					testutil.ToFloat64(m1.Mismatches.WithLabelValues("pendulum", kind))
			}
			version, items := mismatches("version"), mismatches("item")
			held := metrics.Sum(m1.Held)
			s := Summarize(c.Records())
			n := len(stallAt)
			t.Logf("%d stalls of %v: %d misses at the actuator, party1 held %v measurements, %v state version and %v item mismatches, party0/party1 abandoned %v/%v ticks",
				n, stall, s.Misses, held, version, items, metrics.Sum(m0.Abandoned), metrics.Sum(m1.Abandoned))
			// Each stall makes party1 hold a measurement; a freeze of the
			// host now and then may add a miss or mismatch of its own.
			if held < float64(n-1) {
				t.Errorf("party1 held %v measurements in %d stalls, want one per stall", held, n)
			}
			if items > 2 {
				t.Errorf("%v item mismatches in %d stalls, want none", items, n)
			}
			if stall < 120*time.Millisecond {
				if version > 2 {
					t.Errorf("%v state version mismatches in %d stalls, want none", version, n)
				}
				if s.Misses > n+n/2 {
					t.Errorf("%d misses in %d stalls, want about one per stall", s.Misses, n)
				}
			} else if s.Misses > 4*n {
				t.Errorf("%d misses in %d stalls, want about three per stall", s.Misses, n)
			}
			// Every in-time tick within the fixed-point bound of the reference
			// that follows the updates the parties kept: a stall's abandoned
			// and rolled-back updates leave the sensor's reference ahead.
			checkBound(t, c, Summarize(followed(t, c)))
			if m := maxAlphaAfter(c.Records(), 100); m >= 20 {
				t.Errorf("the pendulum fell: max |α| %.2f°", m)
			}
			checkAudit(t, c, 250)
			audit.check(codec.KindMul)
		})
	}
}

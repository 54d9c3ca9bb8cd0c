package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Two instances of one party (a second started while the first runs, as a
// rolling restart or a misconfigured replica would): the newer takes the
// loop's state record over, and the other party works with the newer one
// from its first message on, refusing the older one's, whose loop stops at
// the first message of the other party that names the newer instance, or at
// its next write, whichever comes first (README, Failure behaviour, "two
// instances of one party"). The loop runs on with the newer instance, on
// paired items, and the older one takes no more items from the queue.
//
// Before the other party chose between the instances (codec.MulPayload's
// Inc and Peer), with two busy loops beside the test, 6 of 30 per-tick
// runs failed: the first instance went on completing ticks with P0 after
// the second took the record over, and the loop stayed stuck in state
// version mismatches (once, in an earlier session, with a wrong u applied,
// |u − u_plain| ~1e25); and 6 of 6 fixed-mask two-hop runs broke (every
// tick a fail-safe, or the first instance still taking items, or a hang).
func TestSecondInstanceFencesFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		variant mpc.Variant
		twoHop  bool
	}{{"pertick", mpc.PerTick, false}, {"pertick-2hop", mpc.PerTick, true}, {"fixed-2hop", mpc.FixedMask, true}} {
		for i := range 2 {
			t.Run(fmt.Sprintf("%s-party%d", tc.name, i), func(t *testing.T) { secondInstanceFencesFirst(t, i, tc.variant, tc.twoHop) })
		}
	}
}

// secondInstanceFencesFirst starts a second instance of party i.
func secondInstanceFencesFirst(t *testing.T, i int, variant mpc.Variant, twoHop bool) {
	cs, ps := pendulum(t)
	var logs testlog.Buffer
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: variant, TwoHop: twoHop, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100,
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}, 50)
	const loop = "pendulum"
	// A loop stuck by the two instances must fail the test, not hang it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.RunTicks(ctx, 100); err != nil {
		t.Fatal(err)
	}
	self, other := fmt.Sprintf("party=%d", i), fmt.Sprintf("party=%d", 1-i)
	first, firstM := c.Parties[i], c.Metrics[fmt.Sprintf("party%d", i)]
	// The first instance keeps running: StartParty replaces only the
	// cluster's handle on it.
	startRestoredParty(t, c, i, loop)
	if err := c.RunTicks(ctx, 100); err != nil {
		t.Fatal(err)
	}
	logged := func(msg, party string) bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, msg) && strings.Contains(l, party) {
				return true
			}
		}
		return false
	}
	if !logged(`msg="the other party is a new instance: working with it"`, other) {
		t.Fatalf("party%d did not switch to the second instance of party%d; log:\n%s", 1-i, i, logs.String())
	}
	if !logged(`msg="loop stopped"`, self) || !strings.Contains(logs.String(), "fenced") {
		t.Fatalf("the first instance's loop did not stop within 100 ticks of the second's start; log:\n%s", logs.String())
	}
	if first.Ready() {
		t.Error("the fenced instance still reports ready")
	}
	// From here on the first instance takes nothing: its consumer is gone,
	// so every item goes to the instance that serves the loop.
	taken := metrics.Sum(firstM.ItemsConsumed)
	startAt := c.Records()
	const after = 400
	if err := c.RunTicks(ctx, after); err != nil {
		t.Fatal(err)
	}
	if got := metrics.Sum(firstM.ItemsConsumed); got != taken {
		t.Errorf("the fenced instance took %v more items", got-taken)
	}
	recs := c.Records()
	if i == 1 { // P0 ran as one instance throughout: the reference can follow it
		recs = followed(t, c)
	}
	s := Summarize(recs[len(startAt):])
	if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.Applied < after-2 || s.Misses > 2 || s.MaxDiff > bound {
		t.Fatalf("after the fence: %d of %d ticks applied, %d misses, max |u - u_plain| %g (bound %g)", s.Applied, after, s.Misses, s.MaxDiff, bound)
	}
	t.Logf("after the fence: %d of %d ticks applied, %d misses; the fenced instance took %v items in all", s.Applied, after, s.Misses, taken)
	if a := c.Audit(); a.Reused != 0 {
		t.Fatalf("audit: %d items reused", a.Reused)
	}
}

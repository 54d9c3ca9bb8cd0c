package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

func realtimeCluster(t *testing.T, file bool) *Cluster {
	t.Helper()
	cs, ps := pendulum(t)
	return startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 300, FileStore: file}, 300)
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
	recs := followed(t, c) // P0 ran throughout
	checkBound(t, c, Summarize(recs))
	expect := int(outage / (40 * time.Millisecond))
	got := missesBetween(recs, killedAt, restartAt+25)
	if got < expect-2 || got > expect+8 {
		t.Errorf("%d ticks missed around a %v outage, want about %d", got, outage, expect)
	}
	// Each missed tick is 40 ms of zero input, so the pendulum swings; it
	// must never fall and must be balanced again within 2 s.
	if m := maxAlphaAfter(recs, killedAt); m >= 20 {
		t.Errorf("pendulum fell after the crash: max |α| %.2f°", m)
	}
	if m := maxAlphaAfter(recs, restartAt+50); m >= 1.5 {
		t.Errorf("pendulum not balanced 2 s after recovery: max |α| %.2f°", m)
	}
	checkAudit(t, c, 150)
	// At 25 Hz the party prepares every next item between ticks (fixed
	// mask): all but the ticks right after a start or a resynchronization.
	m0 := c.Metrics["party0"]
	prepared, consumed := metrics.Sum(m0.ItemsPrepared), metrics.Sum(m0.ItemsConsumed)
	if prepared < 0.8*consumed {
		t.Errorf("party0 prepared %v of %v items between ticks, want at least 80%%", prepared, consumed)
	}
	// Every tick party0 abandoned is counted once, with its reason: while
	// party1 was away each of party0's ticks ran into the next measurement.
	abandoned, misses := metrics.Sum(m0.Abandoned), metrics.Sum(m0.Misses)
	late := testutil.ToFloat64(m0.Abandoned.WithLabelValues("pendulum", "late"))
	if abandoned != misses || late < float64(expect-2) {
		t.Errorf("party0: %v ticks abandoned by reason (%v late), %v misses; want them equal, and at least %d late", abandoned, late, misses, expect-2)
	}
	t.Logf("killed at tick %d, restarted at %d: %d misses, version %d -> %d; party0 prepared %v of %v items, abandoned %v ticks (%v late, %v item mismatch)",
		killedAt, restartAt, got, before.Version, after.Version, prepared, consumed, abandoned, late,
		testutil.ToFloat64(m0.Abandoned.WithLabelValues("pendulum", "item_mismatch")))
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
	recs := followed(t, c) // the parties ran throughout
	if m := maxAlphaAfter(recs, at+50); m >= 1.5 {
		t.Errorf("pendulum not balanced after the server restart: max |α| %.2f°", m)
	}
	s := Summarize(recs)
	checkBound(t, c, s)
	checkAudit(t, c, s.Applied-s.Misses-5)
	t.Logf("queue %d at start, %d before restart, %d after; %d misses over %d ticks", depth, before, afterDepth, s.Misses, s.Ticks)
}

// TestChaos runs 2,000 ticks while killing and restarting a party, a dealer
// and the NATS server at seeded random points, and checks that no item was
// used twice, P0 and P1 never used different items on a tick, the state was
// never reset, and the pendulum never falls and is balanced again soon after
// each recovery.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	t.Run("three-hop", func(t *testing.T) { chaos(t, false) })
	// With the two-hop tick, in real time (10 ms) so that the parties'
	// pre-openings come between ticks: the kills and restarts land between
	// pre-opening and masked measurement too.
	t.Run("two-hop", func(t *testing.T) { chaos(t, true) })
}

func chaos(t *testing.T, twoHop bool) {
	const total = 2000
	rng := rand.New(rand.NewSource(7))
	cs, ps := pendulum(t)
	period := 40 * time.Millisecond // Fast: the plant paces the ticks
	if twoHop {
		period = 10 * time.Millisecond
	}
	c, err := Start(context.Background(), Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: !twoHop,
		Period: period, Deadline: 30 * time.Millisecond, Dealers: 2, LowWater: 400, FileStore: true, Log: testLog(t),
		TwoHop: twoHop})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 400); err != nil {
		t.Fatal(err)
	}
	audit := startWireAudit(t, c)
	// Nine events at seeded ticks, at least 120 ticks apart.
	type event struct {
		at   uint64
		kind int // 0: party, 1: dealer, 2: NATS server
	}
	var events []event
	at := uint64(150)
	for i := 0; i < 9; i++ {
		at += 120 + uint64(rng.Intn(60))
		events = append(events, event{at: at, kind: i % 3})
	}
	done := make(chan error, 1)
	go func() { done <- c.RunTicks(context.Background(), total) }()
	var recoveries []uint64
	version := [2]uint64{}
	for _, ev := range events {
		for lastTick(c) < ev.at {
			select {
			case err := <-done:
				logTrouble(t, c.Records(), recoveries)
				t.Fatalf("run ended before tick %d: %v", ev.at, err)
			case <-time.After(2 * time.Millisecond):
			}
		}
		for i := range version {
			if st, ok := c.Parties[i].Status("pendulum"); ok {
				if st.Version+1 < version[i] {
					t.Fatalf("party%d state version fell from %d to %d: state reset", i, version[i], st.Version)
				}
				version[i] = max(version[i], st.Version)
			}
		}
		switch ev.kind {
		case 0:
			id := rng.Intn(2)
			c.KillParty(id)
			time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
			if err := c.StartParty(id); err != nil {
				t.Fatal(err)
			}
			t.Logf("tick %d: killed and restarted party%d", ev.at, id)
		case 1:
			ds := c.Dealers()
			c.StopDealer(ds[rng.Intn(len(ds))])
			if _, err := c.StartDealer(); err != nil {
				t.Fatal(err)
			}
			t.Logf("tick %d: killed and restarted a dealer", ev.at)
		case 2:
			if err := c.RestartServer(time.Duration(20+rng.Intn(80)) * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			t.Logf("tick %d: restarted the NATS server", ev.at)
		}
		recoveries = append(recoveries, lastTick(c))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	// One instance of each party at a time (a killed one is gone before
	// its successor starts): the reference follows P0's kept updates
	// through its restarts, and every tick applied in time is within the
	// bound of it.
	recs := followed(t, c)
	byTick := map[uint64]TickRecord{}
	for _, r := range recs {
		byTick[r.Tick] = r
	}
	// After each recovery the pendulum never falls (|α| < 20°) and is
	// balanced again (|α| < 1.5° for good) soon after: we record the settle
	// time and require it within 50 ticks (2 s). How far it swings depends on
	// how many ticks the outage cost: each one is 40 ms of zero input.
	var settles []uint64
	for i, rt := range recoveries {
		resumed := rt
		for resumed < total && (!byTick[resumed].Applied || byTick[resumed].Miss) {
			resumed++
		}
		end := uint64(total)
		if i+1 < len(events) {
			end = events[i+1].at
		}
		settled := resumed
		for k := rt; k < end; k++ {
			r, ok := byTick[k]
			if !ok || len(r.Y) < 2 {
				continue
			}
			if math.Abs(r.Y[1]) >= 20 {
				for j := rt; j <= k; j++ {
					if r := byTick[j]; r.Miss || !r.Applied || j+40 > k {
						t.Logf("tick %d applied %v miss %v y %v u %v uplain %v", j, r.Applied, r.Miss, r.Y, r.U, r.UPlain)
					}
				}
				t.Fatalf("recovery %d (tick %d): the pendulum fell, |α| = %.1f° at tick %d", i, rt, r.Y[1], k)
			}
			if math.Abs(r.Y[1]) >= 1.5 {
				settled = k + 1
			}
		}
		if settled-resumed > 50 {
			t.Errorf("recovery %d (tick %d, resumed %d): balanced again only after %d ticks", i, rt, resumed, settled-resumed)
		}
		settles = append(settles, settled-resumed)
	}
	t.Logf("ticks from resumption to balanced (|α| < 1.5°) per recovery: %v", settles)
	for i := range version {
		st, _ := c.Parties[i].Status("pendulum")
		if st.Version+1 < version[i] {
			t.Fatalf("party%d state version fell from %d to %d", i, version[i], st.Version)
		}
	}
	s := Summarize(recs)
	checkAudit(t, c, s.Applied-s.Misses-20)
	if twoHop {
		audit.check(codec.KindPreT, codec.KindMul)
	} else {
		audit.check(codec.KindMul)
	}
	checkBound(t, c, s)
	// In real time (two-hop) a plant that does not answer while the server
	// restarts costs its ticks (the sensor counts them as misses; Fast mode
	// asks again instead).
	unread := 0
	if twoHop {
		unread = int(testutil.ToFloat64(c.Metrics["sensor"].Misses.WithLabelValues("pendulum")))
	}
	if s.Ticks+unread < total-5 {
		t.Fatalf("only %d ticks recorded (%d plant reads failed)", s.Ticks, unread)
	}
	if twoHop {
		short := testutil.ToFloat64(c.Metrics["sensor"].TickPaths.WithLabelValues("pendulum", "two_hop"))
		if short < total/2 {
			t.Errorf("only %v of %d ticks sent masked", short, total)
		}
		t.Logf("two hops: sensor %v, parties %v and %v (fallback %v and %v)", short,
			testutil.ToFloat64(c.Metrics["party0"].TickPaths.WithLabelValues("pendulum", "two_hop")),
			testutil.ToFloat64(c.Metrics["party1"].TickPaths.WithLabelValues("pendulum", "two_hop")),
			testutil.ToFloat64(c.Metrics["party0"].TickPaths.WithLabelValues("pendulum", "fallback")),
			testutil.ToFloat64(c.Metrics["party1"].TickPaths.WithLabelValues("pendulum", "fallback")))
	}
	t.Logf("%d ticks, %d misses, audit %+v", s.Ticks, s.Misses, c.Audit())
}

// logTrouble logs, for a run that ended early, the ticks after the last
// recovery that missed, were not applied, or whose secure u differs by more
// than 1 V from the plaintext controller's (which keeps its own state, so
// after misses small differences are expected): misses alone mean the loop
// starved, a far-off u a wrong computation.
func logTrouble(t *testing.T, recs []TickRecord, recoveries []uint64) {
	t.Helper()
	from := uint64(0)
	if len(recoveries) > 0 {
		from = recoveries[len(recoveries)-1]
	}
	shown := 0
	for _, r := range recs {
		if r.Tick < from || shown >= 60 {
			continue
		}
		wrong := len(r.U) != len(r.UPlain)
		for i := range r.U {
			if !wrong && math.Abs(r.U[i]-r.UPlain[i]) > 1 {
				wrong = true
			}
		}
		if r.Miss || !r.Applied || wrong {
			t.Logf("tick %d: applied %v, miss %v, u %v, plaintext u %v, y %v", r.Tick, r.Applied, r.Miss, r.U, r.UPlain, r.Y)
			shown++
		}
	}
}

// testLog logs warnings and errors of the services to the test log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestSensorRestartResumesSetup(t *testing.T) {
	// 1 -> 8: a set-up made with one item per stream message (as earlier
	// releases made it) is resumed by a sensor configured for 8, which keeps
	// the set-up's 1 (the parties and dealers hold it) and the queue's size.
	for _, c := range []struct{ before, configured, kept int }{{8, 8, 8}, {1, 8, 1}} {
		t.Run(fmt.Sprintf("%d-%d", c.before, c.configured), func(t *testing.T) {
			testSensorRestart(t, c.before, c.configured, c.kept)
		})
	}
}

func testSensorRestart(t *testing.T, before, configured, kept int) {
	cs, ps := pendulum(t)
	const queueMax = 456
	var warnings testlog.Buffer
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100, QueueMax: queueMax, ItemsPerMsg: before,
		Log: slog.New(slog.NewTextHandler(&warnings, &slog.HandlerOptions{Level: slog.LevelWarn}))}, 50)
	if err := c.RunTicks(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	v0, _ := c.Parties[0].Status("pendulum")
	c.opt.ItemsPerMsg = configured
	if err := c.RestartSensor(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.RunTicks(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	v1, _ := c.Parties[0].Status("pendulum")
	// A configured value the resumed set-up does not take is a warning
	// naming the variable, not a line at info level.
	if warned := strings.Contains(warnings.String(), "DUET_ITEMS_PER_MSG is not applied"); warned != (configured != kept) {
		t.Errorf("the sensor warned of DUET_ITEMS_PER_MSG %v, want %v (kept %d, configured %d)", warned, configured != kept, kept, configured)
	}
	if v1.Version < v0.Version+95 {
		t.Fatalf("party0 state version %d -> %d: the restarted sensor did not resume the set-up", v0.Version, v1.Version)
	}
	// The restarted sensor's own reference starts again from x0; the
	// followed one goes on from the parties' state.
	recs := followed(t, c)
	checkBound(t, c, Summarize(recs))
	if last := recs[len(recs)-1].Tick; last < 200+50 {
		t.Fatalf("last tick %d: the resumed sensor did not skip ahead", last)
	}
	if m := maxAlphaAfter(recs, 150); m >= 1.5 {
		t.Fatalf("max |α| %.2f° after the sensor restart", m)
	}
	checkAudit(t, c, 190)
	js := jetStreamAs(t, c, "probe")
	st, err := js.Stream(context.Background(), bus.OfflineStream("pendulum"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.CachedInfo().Config.MaxMsgs, int64((queueMax+kept-1)/kept); got != want {
		t.Errorf("queue holds %d messages after the restart, want %d (%d items of %d)", got, want, queueMax, kept)
	}
}

// TestSensorWaitsForThePlant: a real-time sensor that starts before its
// plant (as in a deployment, where nothing orders them) waits for the plant's
// first answer instead of counting every period until then as a miss and
// burning its tick number; the loop then starts at tick 1.
func TestSensorWaitsForThePlant(t *testing.T) {
	cs, ps := pendulum(t)
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.FixedMask, Compress: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 300, PlantLate: true}, 300)
	const ticks = 20
	done := make(chan error, 1)
	go func() { done <- c.RunTicks(context.Background(), ticks) }()
	time.Sleep(400 * time.Millisecond) // ten periods without a plant
	if err := c.StartPlant(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartPlant(); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Fatalf("a second StartPlant: %v, want an error", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	misses := testutil.ToFloat64(c.Metrics["sensor"].Misses.WithLabelValues(c.opt.Loop))
	recs := followed(t, c)
	if misses != 0 {
		t.Fatalf("the sensor counted %v misses while the plant was starting", misses)
	}
	if len(recs) != ticks || recs[0].Tick != 1 || recs[ticks-1].Tick != ticks {
		var first uint64
		if len(recs) > 0 {
			first = recs[0].Tick
		}
		t.Fatalf("%d ticks recorded, the first %d; want ticks 1..%d", len(recs), first, ticks)
	}
	s := Summarize(recs)
	if s.Applied < ticks-1 {
		t.Fatalf("%d of %d ticks applied once the plant answered", s.Applied, ticks)
	}
	checkBound(t, c, s)
}

// TestQueueRecreatedWhilePartiesDown: the loop's offline queue deleted and
// set up again while both parties are down (`nats stream rm`, then the
// sensor restarted, as README's upgrade notes prescribe) numbers its items
// from 1 again. The restarted parties restore a high-water mark of the old
// queue; they start again from the new queue's first item. Before, they
// discarded every item up to the old mark, every tick missing until the
// dealers had published past it.
func TestQueueRecreatedWhilePartiesDown(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time test")
	}
	cs, ps := pendulum(t)
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 30, QueueMax: 60, ItemsPerMsg: 1}, 30)
	const before = 150 // items taken from the old queue: more than the new one holds (60)
	if err := c.RunTicks(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	c.KillParty(0)
	c.KillParty(1)
	js := jetStreamAs(t, c, "operator")
	ctx := context.Background()
	if err := js.DeleteStream(ctx, bus.OfflineStream("pendulum")); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartSensor(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, bus.OfflineStream("pendulum"))
	if err != nil {
		t.Fatal(err)
	}
	if last := st.CachedInfo().State.LastSeq; last >= before {
		t.Fatalf("the new queue's last sequence is %d: not recreated below the old high-water mark", last)
	}
	discarded := func(i int) float64 { return metrics.Sum(c.Metrics[fmt.Sprintf("party%d", i)].ItemsDiscarded) }
	for i := range 2 {
		if err := c.StartParty(i); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitReady(rctx, 1); err != nil {
		t.Fatal(err)
	}
	v0, _ := c.Parties[0].Status("pendulum")
	if !v0.Restored {
		t.Fatal("party0 did not restore its persisted state")
	}
	const after = 100
	from := lastTick(c)
	if err := c.RunTicks(ctx, after); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	v1, _ := c.Parties[0].Status("pendulum")
	if v1.Version < v0.Version+after-5 {
		t.Fatalf("party0 state version %d -> %d over %d ticks on the new queue", v0.Version, v1.Version, after)
	}
	if m := missesBetween(c.Records(), from+5, from+after); m > 0 {
		t.Errorf("%d ticks missed on the new queue after the first five", m)
	}
	for i := range 2 {
		if d := discarded(i); d > 8 {
			t.Errorf("party%d discarded %v items of the new queue", i, d)
		}
	}
	checkAudit(t, c, before+after-10)
}

// A plant whose simulation diverges (an LTI plant the controller does not
// stabilize: x grows 10^100-fold a tick, past float64 at the fourth) stops,
// and the ticks run ends with its error. Before the plant stopped on it,
// the run went on with every read unanswered; once it did, a Fast sensor
// asked the gone plant for the same tick again, for ever.
func TestDivergedPlantEndsTheRun(t *testing.T) {
	cs, _ := pendulum(t)
	ps := plant.Spec{Kind: plant.KindLTI, A: [][]float64{{1e100, 0}, {0, 1e100}}, B: [][]float64{{0}, {0}}, C: [][]float64{{1, 0}, {0, 1}}, X0: []float64{1, 1}}
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 30,
		Log: slog.New(slog.DiscardHandler)}, 30)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := c.RunTicks(ctx, 100000)
	if !errors.Is(err, ErrPlantStopped) || !strings.Contains(err.Error(), "diverged") {
		t.Fatalf("RunTicks: %v (context %v), want ErrPlantStopped with the plant's divergence", err, ctx.Err())
	}
}

// jetStreamAs is a JetStream context on a connection of c's named name, with
// the sensor's permissions.
func jetStreamAs(t *testing.T, c *Cluster, name string) jetstream.JetStream {
	t.Helper()
	nc, _, _, err := c.connAs(name, codec.RoleSensor)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

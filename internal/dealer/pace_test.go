package dealer

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The wait before a queue's next check: DUET_POLL while the rate is not
// known yet, the time the parties would take to bring the queue a quarter
// of its low-water mark below the mark, and never outside [DUET_POLL,
// DUET_POLL_MAX].
func TestNextCheck(t *testing.T) {
	const poll, pollMax = 50 * time.Millisecond, time.Second
	for _, c := range []struct {
		headroom, lowWater int
		rate               float64
		want               time.Duration
	}{
		{100, 750, -1, pollMax / 4},          // unknown: a quarter of pollMax
		{100, 750, 0, pollMax},               // nothing taken
		{0, 750, 25, pollMax},                // at the mark, 7.5 s of margin
		{0, 40, 25, 400 * time.Millisecond},  // at a mark of 40
		{10, 40, 25, 800 * time.Millisecond}, // 0.8 s to 10 below the mark
		{0, 100, 1000, poll},                 // a fast loop: 25 ms, at least poll
		{300, 400, 1000, 400 * time.Millisecond},
		{1 << 30, 750, 1e-9, pollMax}, // no overflow
		{100, 750, 1e12, poll},
	} {
		if got := nextCheck(c.headroom, c.lowWater, c.rate, poll, pollMax); got != c.want {
			t.Errorf("nextCheck(%d items, mark %d, %g/s) = %v, want %v", c.headroom, c.lowWater, c.rate, got, c.want)
		}
	}
}

// The rate is unknown until a quarter of a window has passed, and again
// after the count went back (a recreated consumer); then it is the average
// since the window began, and after each whole window the average over it,
// so that a burst and checks a few milliseconds apart do not swing it.
func TestPacer(t *testing.T) {
	const window = time.Second
	t0 := time.Unix(1000, 0)
	var p pacer
	for _, c := range []struct {
		at    time.Duration
		taken int
		want  float64
	}{
		{0, 100, -1},
		{100 * time.Millisecond, 164, -1}, // a burst of 64 within the first quarter
		{200 * time.Millisecond, 50, -1},  // went back: a new window from here
		{400 * time.Millisecond, 55, -1},  // 200 ms in: not a quarter yet
		{450 * time.Millisecond, 60, 40},  // a quarter in: the first estimate, 10 in 250 ms
		{800 * time.Millisecond, 90, 40},  // kept until the window ends
		{1200 * time.Millisecond, 40, -1}, // went back again
		{2200 * time.Millisecond, 65, 25}, // a whole window: 25 in 1 s
		{2201 * time.Millisecond, 65, 25}, // a check 1 ms later
		{2700 * time.Millisecond, 97, 25}, // a burst of 32
		{3200 * time.Millisecond, 97, 32}, // the window's average
		{4200 * time.Millisecond, 97, 0},  // quiet
	} {
		if got := p.observe(t0.Add(c.at), c.taken, window); got != c.want {
			t.Errorf("at %v with %d taken: rate %g, want %g", c.at, c.taken, got, c.want)
		}
	}
}

// A replica fills a queue to its low-water mark and then, while the
// parties take nothing, checks it every DUET_POLL_MAX, not every DUET_POLL;
// when a party drains the queue, the replica refills it.
func TestServePacesChecks(t *testing.T) {
	const loop, lowWater = "pendulum", 32
	const poll, pollMax = 5 * time.Millisecond, 500 * time.Millisecond
	ctx := context.Background()
	js, stream, _ := startServe(t, loop, lowWater, 1000, poll, pollMax)

	msgs := func() int {
		t.Helper()
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.State.Msgs)
	}
	waitFull := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); msgs() < lowWater; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the queue holds %d items, want %d", what, msgs(), lowWater)
			}
		}
	}
	waitFull("filling")
	// Let the replica see the full queue and measure the parties' rate
	// (a window of DUET_POLL_MAX), then count its requests over 1.5 s: at
	// DUET_POLL_MAX less up to a quarter it makes at most 2 per 375 ms (one
	// per party); at DUET_POLL it would make 600.
	time.Sleep(pollMax + 100*time.Millisecond)
	before := apiRequests(t, js)
	time.Sleep(1500 * time.Millisecond)
	if got := apiRequests(t, js) - before - 1; got > 12 {
		t.Errorf("an idle full queue: %d JetStream API requests in 1.5 s, want at most 12 (a check every %v)", got, pollMax)
	}

	// Party 0 takes the queue 8 items below its mark (the fill may have
	// gone past the mark: a check right after a refill can read a
	// consumer's pending count before it has caught up with the publishes):
	// the replica finds the queue below its mark at a check and refills it.
	c, err := stream.Consumer(ctx, bus.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	take := int(info.NumPending) - lowWater + 8
	batch, err := c.Fetch(take)
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() {
	}
	if info, err = c.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if info.NumPending >= lowWater {
		t.Fatalf("after party 0 took %d items its consumer has %d pending, want < %d", take, info.NumPending, lowWater)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err = c.Info(ctx); err != nil {
			t.Fatal(err)
		}
		if info.NumPending >= lowWater {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drained queue was not refilled: party 0 has %d pending, want %d", info.NumPending, lowWater)
		}
	}
}

// spread takes at most a quarter off, never goes below DUET_POLL, and
// does not give every loop the same wait.
func TestSpread(t *testing.T) {
	const poll, d = 50 * time.Millisecond, time.Second
	seen := map[time.Duration]bool{}
	for range 1000 {
		got := spread(d, poll)
		if got <= d*3/4 || got > d {
			t.Fatalf("spread(%v) = %v, want in (%v, %v]", d, got, d*3/4, d)
		}
		seen[got] = true
	}
	if len(seen) < 100 {
		t.Errorf("spread(%v) gave %d distinct waits in 1000, want them spread", d, len(seen))
	}
	if got := spread(poll, poll); got != poll {
		t.Errorf("spread(%v, %v) = %v, want %v", poll, poll, got, poll)
	}
	if got := spread(0, 0); got != 0 {
		t.Errorf("spread(0, 0) = %v", got)
	}
}

func TestBackoff(t *testing.T) {
	const poll, pollMax = 50 * time.Millisecond, time.Second
	for n, want := range []time.Duration{poll, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, pollMax, pollMax} {
		if got := backoff(poll, pollMax, n); got != want {
			t.Errorf("backoff after %d full rounds = %v, want %v", n, got, want)
		}
	}
	if got := backoff(poll, pollMax, 1<<30); got != pollMax {
		t.Errorf("backoff after 2^30 full rounds = %v, want %v", got, pollMax)
	}
}

// While one party takes items and the other does not, the stream fills to
// its MaxMsgs with the items the second has not taken, and the first's
// depth stays below the low-water mark. Every refill round then draws and
// seals a batch that the server refuses: the replica backs off to a round
// every DUET_POLL_MAX, and counts the rounds in duet_queue_full_total.
func TestServeBacksOffFullQueue(t *testing.T) {
	const loop, lowWater, maxMsgs = "pendulum", 32, 40
	const poll, pollMax = 5 * time.Millisecond, 400 * time.Millisecond
	ctx := context.Background()
	_, stream, m := startServe(t, loop, lowWater, maxMsgs, poll, pollMax)

	c0, err := stream.Consumer(ctx, bus.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	// Party 0 takes 24 items as soon as they are there; party 1 none.
	for taken := 0; taken < 24; {
		batch, err := c0.Fetch(24-taken, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range batch.Messages() {
			taken++
		}
	}
	rounds := func() float64 { return testutil.ToFloat64(m.QueueFull.WithLabelValues(loop)) }
	for deadline := time.Now().Add(30 * time.Second); rounds() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			info, _ := stream.Info(ctx)
			t.Fatalf("no refill round found the queue full (the stream holds %d of %d)", info.State.Msgs, maxMsgs)
		}
	}
	// Backed off after 7 rounds (5 ms doubled to 400 ms, 1.3 s in all);
	// then a round every 400 ms. Without the back-off a round came every
	// few milliseconds.
	time.Sleep(1500 * time.Millisecond)
	before := rounds()
	time.Sleep(1200 * time.Millisecond)
	if got := rounds() - before; got > 4 {
		t.Errorf("%v full refill rounds in 1.2 s, want at most 4 (one every %v)", got, pollMax)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != maxMsgs {
		t.Errorf("the stream holds %d items, want %d (full)", info.State.Msgs, maxMsgs)
	}
}

// A message the server always refuses (here larger than the stream's
// MaxMsgSize) fails every refill round. The replica logs and counts each
// (duet_offline_publish_errors_total) and backs off as from a full queue;
// before, it drew and sealed a batch and checked the queue again at once,
// in a loop, with nothing logged or counted.
func TestServeBacksOffFailedPublish(t *testing.T) {
	const loop, poll, pollMax = "pendulum", 5 * time.Millisecond, 400 * time.Millisecond
	_, _, m := startServeWith(t, loop, 32, 40, poll, pollMax, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 64 }, nil)
	rounds := func() float64 { return testutil.ToFloat64(m.PublishErrors.WithLabelValues(loop)) }
	for deadline := time.Now().Add(10 * time.Second); rounds() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no failed refill round counted")
		}
	}
	// As TestServeBacksOffFullQueue: a round every 400 ms after 1.3 s.
	time.Sleep(1500 * time.Millisecond)
	before, published := rounds(), testutil.ToFloat64(m.ItemsPublished.WithLabelValues(loop))
	time.Sleep(1200 * time.Millisecond)
	if got := rounds() - before; got < 1 || got > 4 {
		t.Errorf("%v failed refill rounds in 1.2 s, want 1 to 4 (one every %v)", got, pollMax)
	}
	if got := testutil.ToFloat64(m.QueueFull.WithLabelValues(loop)); got != 0 {
		t.Errorf("%v failed rounds counted as a full queue", got)
	}
	if got := testutil.ToFloat64(m.ItemsPublished.WithLabelValues(loop)) - published; got != 0 {
		t.Errorf("%v items published past a 64-byte MaxMsgSize", got)
	}
}

// A queue that holds no more items than the low-water mark is full before
// it reaches the mark (the sensor sizes one, the dealer the other): the
// replica says so when it starts serving the loop.
func TestServeWarnsQueueBelowLowWater(t *testing.T) {
	for _, c := range []struct {
		lowWater int
		warn     bool
	}{{50, true}, {40, true}, {39, false}} {
		var buf testlog.Buffer
		startServeWith(t, "pendulum", c.lowWater, 40, 5*time.Millisecond, 50*time.Millisecond, nil, func(o *Options) { o.Log = slog.New(slog.NewTextHandler(&buf, nil)) })
		warned := func() bool { return strings.Contains(buf.String(), "cannot reach DUET_LOW_WATER") }
		for deadline := time.Now().Add(5 * time.Second); c.warn && !warned() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // the replica has started serving
		if got := warned(); got != c.warn {
			t.Errorf("40 items, low-water mark %d: warned %v, want %v (log %q)", c.lowWater, got, c.warn, buf.String())
		}
	}
}

// startServe runs a replica's serve for one loop's queue (MaxMsgs maxMsgs)
// on an embedded server until the test ends.
func startServe(t *testing.T, loop string, lowWater int, maxMsgs int64, poll, pollMax time.Duration) (jetstream.JetStream, jetstream.Stream, *metrics.Set) {
	t.Helper()
	return startServeWith(t, loop, lowWater, maxMsgs, poll, pollMax, nil, nil)
}

// startServeWith is startServe with the stream's configuration changed by
// edit (if not nil) before the replica starts, and the replica's options
// (batches of 8 items, logging nowhere) by opt (if not nil).
func startServeWith(t *testing.T, loop string, lowWater int, maxMsgs int64, poll, pollMax time.Duration, edit func(*jetstream.StreamConfig), opt func(*Options)) (jetstream.JetStream, jetstream.Stream, *metrics.Set) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: maxMsgs}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		cfg := stream.CachedInfo().Config
		edit(&cfg)
		if stream, err = js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	sd, _, _ := testSealers(t)
	m := metrics.New("d")
	o := Options{Name: "d", LowWater: lowWater, Batch: 8, Poll: poll, PollMax: pollMax, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if opt != nil {
		opt(&o)
	}
	d, err := New(nc, sd, o)
	if err != nil {
		t.Fatal(err)
	}
	prm := pendulumParams(t, mpc.FixedMask)
	gen, err := mpc.NewDealer(prm, mpc.NewSession([32]byte{'p'}), true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	d.mu.Lock()
	d.epoch[loop] = 1 // as register records it
	d.mu.Unlock()
	go func() { defer close(done); d.serve(ctx, loop, 1, prm, gen, stream, 1) }()
	t.Cleanup(func() { cancel(); <-done })
	return js, stream, m
}

// apiRequests is the account's JetStream API request count so far (the
// request that reads it counts itself).
func apiRequests(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ai, err := js.AccountInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ai.API.Total
}

// A queue whose depth cannot be checked (here a party's consumer deleted)
// is refilled no more: from the second failed check in a row the replica
// counts each as a failed round (duet_offline_publish_errors_total) and no
// longer exports the loop's depth, which would otherwise stay at the last
// one found and hide the queue running dry (and, in the alert's max, the
// other replicas' depths). A check that succeeds exports it again.
func TestServeDropsDepthWhenChecksFail(t *testing.T) {
	const loop, poll, pollMax = "pendulum", 5 * time.Millisecond, 50 * time.Millisecond
	ctx := context.Background()
	_, stream, m := startServe(t, loop, 32, 40, poll, pollMax)
	exported := func() bool { return testutil.CollectAndCount(m.QueueDepth) == 1 }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s: not %s", what)
			}
		}
	}
	waitFor("the depth exported", exported)
	if got := testutil.ToFloat64(m.PublishErrors.WithLabelValues(loop)); got != 0 {
		t.Fatalf("%v failed rounds before any check failed", got)
	}
	cfg, err := stream.Consumer(ctx, bus.ConsumerName(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteConsumer(ctx, bus.ConsumerName(1)); err != nil {
		t.Fatal(err)
	}
	waitFor("the depth dropped and the failures counted", func() bool {
		return !exported() && testutil.ToFloat64(m.PublishErrors.WithLabelValues(loop)) > 0
	})
	if _, err := stream.CreateOrUpdateConsumer(ctx, cfg.CachedInfo().Config); err != nil {
		t.Fatal(err)
	}
	waitFor("the depth exported again", exported)
}

// A batch larger than the queue has room for (DUET_BATCH above its size
// less the low-water mark) is cut to the room: before, each refill round
// published the whole batch, the stream refused the rest, and the round
// counted as a full queue (duet_queue_full_total) with both parties
// keeping up, its items drawn and sealed for nothing.
func TestRefillCutToTheQueuesRoom(t *testing.T) {
	const maxMsgs, lowWater = 40, 20
	js, _, m := startServeWith(t, "pendulum", lowWater, maxMsgs, 5*time.Millisecond, 50*time.Millisecond, nil, func(o *Options) { o.Batch = 1000 })
	ctx := t.Context()
	cons, err := js.Consumer(ctx, bus.OfflineStream("pendulum"), bus.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	depth := func() int {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.NumPending)
	}
	for deadline := time.Now().Add(10 * time.Second); depth() < maxMsgs; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the queue holds %d of %d after 10 s", depth(), maxMsgs)
		}
	}
	time.Sleep(100 * time.Millisecond) // rounds that would find it full
	if full, published := metrics.Sum(m.QueueFull), metrics.Sum(m.ItemsPublished); full != 0 || published != maxMsgs {
		t.Errorf("%v rounds found the queue full, %v items published; want 0, and the queue's %d", full, published, maxMsgs)
	}
}

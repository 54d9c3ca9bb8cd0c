package party

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
)

// A loop's offline consumer callback blocked on a full item buffer returns
// when the loop stops, while the service's context goes on: a fence stops
// one loop of a running service. Before 8c28fd4 the callback waited for the
// service's context only, so it and the batch it held stayed until the
// service shut down (this test then fails on its last wait).
func TestConsumerCallbackReturnsWhenLoopStops(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background() // never cancelled: the service runs on
	const loop = "consume-stop"
	if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 100}, 1, false); err != nil {
		t.Fatal(err)
	}
	// A prefetch of one item a message: the buffer holds 2*1+1 messages, so
	// of six the fourth's callback blocks. The messages need not be items:
	// the callback queues a malformed one as a raw item with its error.
	for range 6 {
		if _, err := js.Publish(ctx, bus.OfflineSubject(loop), []byte("not an item")); err != nil {
			t.Fatal(err)
		}
	}
	s := &Service{nc: nc, js: js, opt: Options{ID: 0, Prefetch: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	w := &worker{s: s, id: 0, loop: loop, perMsg: 1}
	stop, err := w.consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(stop)
	t.Cleanup(stop) // a failed wait leaves no callback blocked for the package's other tests
	// The consumer pulls one message at a time, the next only once the
	// callback of the one before has returned: with message n delivered, a
	// callback still running is n's. (A receive from the full buffer moves
	// the blocked sender's batch in at once, before the sender has returned:
	// the buffer's length alone does not say which callback is blocked.)
	cons, err := js.Consumer(ctx, bus.OfflineStream(loop), bus.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	blockedOn := func(n uint64) func() bool {
		return func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.Delivered.Stream == n && len(w.items) == cap(w.items) && consumeCallbacks() == 1
		}
	}
	waitUntil(t, "the item buffer full and the fourth message's callback blocked", blockedOn(4))
	if r := <-w.items; len(r) != 1 || r[0].err == nil {
		t.Fatalf("queued %+v; want one raw item with the malformed message's error", r)
	}
	// The blocked callback's batch took the freed place; the fifth
	// message's callback blocks.
	waitUntil(t, "the fifth message's callback blocked", blockedOn(5))
	stop()
	waitUntil(t, "the blocked callback returned after the loop stopped", func() bool { return consumeCallbacks() == 0 })
}

// consumeCallbacks counts the goroutines running a worker's offline
// consumer callback (in this test, blocked on the full buffer).
func consumeCallbacks() int { return goroutinesIn("party.(*worker).consume.func") }

// goroutinesIn counts the goroutines whose stacks hold fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), fn)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitUntil polls cond every 5 ms for up to 5 s, and fails the test
// naming what did not happen.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s: not %s", what)
		}
	}
}

// A loop whose offline consumer is deleted under it (nats consumer rm, or
// the queue removed) stops with that error, so that the party is not ready
// and is restarted; before, it ran on taking no item, every tick missing,
// and stayed ready. The deletion reaches the client as such only while a
// pull waits; otherwise as missed heartbeats, and the loop looks the
// consumer up.
func TestDeletedConsumerStopsTheLoop(t *testing.T) {
	defer func(e time.Duration) { pullExpiry = e }(pullExpiry)
	pullExpiry = 2 * time.Second // heartbeats every second
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const loop = "consume-deleted"
	stream, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 100}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{nc: nc, js: js, opt: Options{ID: 0, Prefetch: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	w := &worker{s: s, id: 0, loop: loop, perMsg: 1, stop: make(chan struct{})}
	stop, err := w.consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := stream.DeleteConsumer(ctx, bus.ConsumerName(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.stop:
	case <-time.After(20 * time.Second):
		t.Fatal("the loop did not stop within 20 s of its consumer's deletion")
	}
	if e := w.stopErr.Load(); e == nil || !errors.Is(*e, jetstream.ErrConsumerDeleted) && !errors.Is(*e, jetstream.ErrConsumerNotFound) {
		t.Fatalf("stopped with %v, want the deleted consumer's error", e)
	}
}

// A lookup of the loop's consumer after its whole stream was deleted (as a
// real server answers it) counts as the consumer gone, as a deleted
// consumer does; a consumer that is there does not.
func TestConsumerMissingAfterStreamDeleted(t *testing.T) {
	js, stream := testQueue(t, "consume-stream-rm")
	ctx := t.Context()
	if _, err := stream.Consumer(ctx, bus.ConsumerName(0)); err != nil || consumerMissing(err) {
		t.Fatalf("the consumer, present: %v, missing %v", err, consumerMissing(err))
	}
	if err := js.DeleteStream(ctx, stream.CachedInfo().Config.Name); err != nil {
		t.Fatal(err)
	}
	_, err := stream.Consumer(ctx, bus.ConsumerName(0))
	if !consumerMissing(err) {
		t.Fatalf("lookup after the stream's deletion: %v, want it taken as the consumer gone", err)
	}
}

// A loop whose offline consumer, looked up after missed heartbeats, is found
// under its name but created since the loop started consuming (the queue
// deleted and set up again while the party ran) stops, naming it: pulls by
// that name reach the new queue, whose items, numbered from 1 again, are all
// at or below the loop's high-water mark, so every tick would miss. The
// consumer the loop started with, found, does not stop it.
func TestRecreatedConsumerStopsTheLoop(t *testing.T) {
	defer func(d time.Duration) { consumerRecheck = d }(consumerRecheck)
	consumerRecheck = 10 * time.Millisecond
	const loop = "consume-recreated"
	js, stream := testQueue(t, loop)
	ctx := t.Context()
	cons, err := stream.Consumer(ctx, bus.ConsumerName(0))
	if err != nil {
		t.Fatal(err)
	}
	w := consumeWorker(js, loop)
	done := make(chan struct{})
	defer close(done)
	onErr := w.consumeErrs(ctx, stream, cons.CachedInfo().Created, done)
	looking := func() bool { return goroutinesIn("party.(*worker).consumeErrs.func") == 0 }

	onErr(nil, jetstream.ErrNoHeartbeat)
	waitUntil(t, "the lookup of the consumer the loop started with ended", looking)
	select {
	case <-w.stop:
		t.Fatalf("the loop stopped with its own consumer found: %v", *w.stopErr.Load())
	default:
	}

	if err := js.DeleteStream(ctx, bus.OfflineStream(loop)); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: loop, MaxMsgs: 100}, 1, false); err != nil {
		t.Fatal(err)
	}
	onErr(nil, jetstream.ErrNoHeartbeat)
	select {
	case <-w.stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not stop within 5 s of finding its consumer created again")
	}
	if e := w.stopErr.Load(); e == nil || !errors.Is(*e, errQueueRecreated) {
		t.Fatalf("stopped with %v, want errQueueRecreated", e)
	}
}

// A loop that starts consuming with a high-water mark beyond its queue's
// last sequence (a state record of a queue since deleted and set up again)
// takes items from the new queue's start; one at or below it is kept.
func TestHighWaterMarkOfAnOldQueue(t *testing.T) {
	const loop = "consume-old-hwm"
	js, _ := testQueue(t, loop)
	ctx := t.Context()
	const last = 3
	for range last {
		if _, err := js.Publish(ctx, bus.OfflineSubject(loop), []byte("not an item")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ hwm, want uint64 }{
		{itemID(last, 0xff), itemID(last, 0xff)}, // the last message's items, all taken
		{itemID(last+1, 0), 0},                   // beyond the queue: an old queue's
		{itemID(1<<40, 7), 0},
	} {
		w := consumeWorker(js, loop)
		w.hwm, w.minSeq, w.burn = c.hwm, c.hwm+1, 2
		stop, err := w.consume(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if w.hwm != c.want || (c.want == 0) != (w.minSeq == 0 && w.burn == 0) {
			t.Errorf("high-water mark %#x with the queue's last sequence %d: now %#x (minSeq %#x, burn %d), want %#x",
				c.hwm, last, w.hwm, w.minSeq, w.burn, c.want)
		}
	}
}

// testQueue sets loop's offline queue (100 messages) up on an embedded
// server.
func testQueue(t *testing.T, loop string) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := bus.EnsureOfflineQueue(t.Context(), js, bus.OfflineQueue{Loop: loop, MaxMsgs: 100}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	return js, stream
}

// consumeWorker is P0's worker for loop's offline queue on js: one item a
// message, a prefetch of one, logging nowhere.
func consumeWorker(js jetstream.JetStream, loop string) *worker {
	s := &Service{js: js, opt: Options{ID: 0, Prefetch: 1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	return &worker{s: s, id: 0, loop: loop, perMsg: 1, stop: make(chan struct{})}
}

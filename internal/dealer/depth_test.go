package dealer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/natstest"
)

// A queue's depth is the fewer of the messages either party's consumer has
// not taken, and each check after the first costs the server one
// consumer-info request per party, not a lookup and an info each (every
// replica checks every loop's queue every DUET_POLL). A consumer that can
// no longer be read is looked up again, and a recreated one is found.
func TestPendingMsgsRequests(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: "pendulum", MaxMsgs: 100}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := js.Publish(ctx, bus.OfflineSubject("pendulum"), []byte("item")); err != nil {
			t.Fatal(err)
		}
	}
	// Party 0 takes two items, party 1 one: the depth is party 0's 3, and
	// the stream holds party 1's 4.
	take := func(party, n int) {
		t.Helper()
		c, err := stream.Consumer(ctx, bus.ConsumerName(party))
		if err != nil {
			t.Fatal(err)
		}
		batch, err := c.Fetch(n)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for range batch.Messages() {
			got++
		}
		if got != n {
			t.Fatalf("party %d took %d items, want %d", party, got, n)
		}
	}
	take(0, 2)
	take(1, 1)
	// Right after a pull the server's consumer info can report no pending
	// messages for a moment (nats-server 2.15.2: this test's first check
	// read depth 0 in 13 of 300 runs, a later read the right count): wait
	// for the counts to settle, then count the requests of the checks.
	settle := time.Now().Add(5 * time.Second)
	for {
		var fresh consumers
		depth, held, taken, err := fresh.pendingMsgs(ctx, stream)
		if err == nil && depth == 3 && held == 4 && taken == 2 {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("the counts did not settle: depth %d, held %d, taken to sequence %d, %v; want 3, 4 and 2", depth, held, taken, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var cs consumers
	const checks = 10
	before := apiRequests(t, js)
	for i := range checks {
		depth, held, taken, err := cs.pendingMsgs(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if depth != 3 || held != 4 || taken != 2 {
			t.Fatalf("check %d: depth %d, held %d, taken to sequence %d; want 3 and 2 (party 0's) and 4 (party 1's)", i, depth, held, taken)
		}
	}
	// The account-info request that reads the total counts itself.
	if got := apiRequests(t, js) - before - 1; got != 2*checks {
		t.Errorf("%d checks made %d JetStream API requests, want %d (one per party consumer)", checks, got, 2*checks)
	}

	// The consumers recreated (a new set-up of the loop): the kept handles
	// fail once, and the next check finds the new consumers.
	for i := range 2 {
		if err := stream.DeleteConsumer(ctx, bus.ConsumerName(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := cs.pendingMsgs(ctx, stream); err == nil {
		t.Fatal("a check of deleted consumers succeeded")
	}
	if stream, err = bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: "pendulum", MaxMsgs: 100}, 1, false); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, _, _, err = cs.pendingMsgs(ctx, stream)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after the consumers were recreated: %v", err)
	}
}

package party

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/pkg/codec"
)

// Two instances of one party overlap (a rolling restart, a second replica
// by mistake). The later one claims the state record, so its instance
// number, the claim's revision, is larger; the other party works with the
// latest instance it has heard from, refuses an earlier one's messages
// (counted as reason "instance"), and names the instance it works with, so
// that an earlier instance stops at the first message that names a later one.
func TestPeerInstances(t *testing.T) {
	ctx := context.Background()
	first := persistingWorker(t, "instances-1")
	second := &worker{s: first.s, id: first.id, loop: first.loop, prm: first.prm, p: first.p}
	if err := second.openPersister(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.claim(ctx, first.persist.rev); err != nil {
		t.Fatal(err)
	}
	if first.inc == 0 || second.inc <= first.inc {
		t.Fatalf("instance numbers: first %d, second %d; want 0 < first < second", first.inc, second.inc)
	}

	// w stands for the other party: its own instance is 1.
	w := persistingWorker(t, "instances-2")
	w.inc = 1
	w.pendMul, w.pendTrunc = map[uint64]peerMul{}, map[uint64]peerTrunc{}
	rejects := func() float64 { return testutil.ToFloat64(w.s.opt.Metrics.Rejects.WithLabelValues("instance")) }
	if err := w.peerInstance(first.inc, 0); err != nil || w.peerInc != first.inc {
		t.Fatalf("first instance: %v, works with %d", err, w.peerInc)
	}
	w.pendMul[7] = peerMul{item: 1}
	w.pendTrunc[7] = peerTrunc{item: 1}
	w.peerPre.ok = true
	if err := w.peerInstance(second.inc, w.inc); err != nil || w.peerInc != second.inc {
		t.Fatalf("second instance: %v, works with %d", err, w.peerInc)
	}
	if len(w.pendMul) != 0 || len(w.pendTrunc) != 0 || w.peerPre.ok {
		t.Error("the first instance's early messages and pre-opening were kept for the second")
	}
	err := w.peerInstance(first.inc, w.inc)
	if !errors.Is(err, codec.ErrInstance) || w.peerInc != second.inc || rejects() != 1 {
		t.Fatalf("the first instance again: %v (works with %d, %v rejects); want %v", err, w.peerInc, rejects(), codec.ErrInstance)
	}
	if err := w.peerInstance(0, 0); !errors.Is(err, codec.ErrInstance) || rejects() != 2 {
		t.Fatalf("an instance without persisted state after a persisted one: %v; want %v", err, codec.ErrInstance)
	}
	if w.fenced {
		t.Fatal("the receiver stopped")
	}

	// The first instance hears that the other party works with the second.
	first.pendMul, first.pendTrunc = map[uint64]peerMul{}, map[uint64]peerTrunc{}
	if err := first.peerInstance(w.inc, first.inc); err != nil || first.fenced {
		t.Fatalf("named itself: %v, stopped %v", err, first.fenced)
	}
	if err := first.peerInstance(w.inc, second.inc); !errors.Is(err, ErrFenced) || !first.fenced {
		t.Fatalf("named a later instance: %v, stopped %v; want %v and stopped", err, first.fenced, ErrFenced)
	}

	// A later instance is heard even from a message whose tick an earlier
	// instance's message took: the instance check comes before the replay
	// guard.
	g := persistingWorker(t, "instances-3")
	g.inc, g.guard = 1, codec.NewReplayGuard()
	g.pendMul, g.pendTrunc = map[uint64]peerMul{}, map[uint64]peerTrunc{}
	h := codec.Header{Version: codec.Version, Kind: codec.KindMul, Loop: g.loop, Tick: 5, From: codec.RoleParty1, To: codec.RoleParty0}
	body := func(inc uint64) []byte {
		b, err := codec.Marshal(&codec.MulPayload{Item: 1, Version: 2, Inc: inc, Peer: g.inc})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var mp codec.MulPayload
	if err := g.acceptPeer(h, body(first.inc), &mp, &mp.Inc, &mp.Peer, nil); err != nil || g.peerInc != first.inc {
		t.Fatalf("tick 5 from the first instance: %v, works with %d", err, g.peerInc)
	}
	if err := g.acceptPeer(h, body(second.inc), &mp, &mp.Inc, &mp.Peer, nil); !errors.Is(err, codec.ErrReplay) || g.peerInc != second.inc {
		t.Fatalf("tick 5 from the second instance: %v, works with %d; want %v and the second instance", err, g.peerInc, codec.ErrReplay)
	}
	h.Tick = 6
	if err := g.acceptPeer(h, body(first.inc), &mp, &mp.Inc, &mp.Peer, nil); !errors.Is(err, codec.ErrInstance) {
		t.Fatalf("tick 6 from the first instance: %v; want %v", err, codec.ErrInstance)
	}
	if err := g.acceptPeer(h, body(second.inc), &mp, &mp.Inc, &mp.Peer, nil); err != nil || mp.Version != 2 {
		t.Fatalf("tick 6 from the second instance: %v (version %d)", err, mp.Version)
	}
}

// A second instance restores while the first still writes its record, here
// every 0.2 ms (a loop writes once a tick, 40 ms at 25 Hz): a write
// between the second's read and its claim makes it read again, and it takes
// the loop over rather than stopping.
func TestRestoreWhileAnotherInstanceWrites(t *testing.T) {
	ctx := context.Background()
	first := persistingWorker(t, "instances-restore")
	stop := make(chan struct{})
	done := make(chan int)
	go func() { // the first instance's writes
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			data, err := first.persist.seal(first.record())
			if err != nil {
				return
			}
			rev, err := first.persist.kv.Update(ctx, first.loop, data, first.persist.rev)
			if err != nil {
				return // fenced by the second
			}
			first.persist.rev = rev
			n++
			time.Sleep(200 * time.Microsecond)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	_, p := pendulumParty(t) // its own party: the first's is read by its writes meanwhile
	second := &worker{s: first.s, id: first.id, loop: first.loop, prm: first.prm, p: p, guard: codec.NewReplayGuard()}
	if err := second.openPersister(ctx); err != nil {
		t.Fatal(err)
	}
	err := second.restore(ctx)
	close(stop)
	writes := <-done
	if err != nil {
		t.Fatalf("the second instance did not take the loop over (%d writes of the first's meanwhile): %v", writes, err)
	}
	if !second.restored || second.inc <= first.persist.rev {
		t.Fatalf("restored %v, instance %d after the first's last revision %d", second.restored, second.inc, first.persist.rev)
	}
	t.Logf("%d writes of the first instance during the test", writes)
}

package demo

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The broker may replay: here it stores an offline item message again, at a
// new stream sequence, after the parties have used its items. Both parties
// must refuse every item of the copies (each would be a triple and a mask
// used twice: the values opened with them would give away the difference
// of two ticks' inputs), and the loop must go on with its items paired.
//
// With restart, the dealer that drew the items is replaced by another, and
// party1 is killed and started again before the copies are stored: it has
// taken no item of that dealer since, so only its persisted state can tell
// it the copies' items were used.
func TestReplayedOfflineItemsRefused(t *testing.T) {
	for _, c := range []struct {
		name              string
		compress, restart bool
	}{{"compressed", true, false}, {"uncompressed", false, false}, {"compressed-party1-restarted", true, true}} {
		compress, restart := c.compress, c.restart
		t.Run(c.name, func(t *testing.T) {
			cs, ps := pendulum(t)
			c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: compress, Fast: true,
				Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100}, 50)
			nc, err := nats.Connect(c.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			const loop = "pendulum"
			var mu sync.Mutex
			var captured []byte
			sub, err := nc.Subscribe(bus.OfflineSubject(loop), func(m *nats.Msg) {
				mu.Lock()
				if captured == nil {
					captured = slices.Clone(m.Data)
				}
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			// The dealer refills while the loop runs, once the queue is
			// down to its low-water mark; the first message published from
			// then on is the one replayed. Enough ticks follow for the
			// parties to have used all its items.
			ctx := context.Background()
			var data []byte
			ran := 0
			for data == nil && ran < 3000 {
				if err := c.RunTicks(ctx, 50); err != nil {
					t.Fatal(err)
				}
				ran += 50
				mu.Lock()
				data = captured
				mu.Unlock()
			}
			sub.Unsubscribe()
			if data == nil {
				t.Fatalf("no offline item message captured in %d ticks", ran)
			}
			if err := c.RunTicks(ctx, 600); err != nil {
				t.Fatal(err)
			}
			misses, total := 6, ran+1400
			if restart {
				old := c.Dealers()
				if _, err := c.StartDealer(); err != nil {
					t.Fatal(err)
				}
				for _, name := range old {
					c.StopDealer(name)
				}
				// The old dealer's items still queued are used up.
				if err := c.RunTicks(ctx, 600); err != nil {
					t.Fatal(err)
				}
				c.KillParty(1)
				startRestoredParty(t, c, 1, loop)
				// The restarted party's resynchronization comes before the
				// copies: it may skip both parties past the end of the
				// queue, and a party skips the items below the skip
				// without looking at them (not counted as replays).
				if err := c.RunTicks(ctx, 50); err != nil {
					t.Fatal(err)
				}
				misses += 4 // the restarted party's resynchronization
				total += 650
			}
			items, err := codec.PeekItems(data, 64)
			if err != nil {
				t.Fatal(err)
			}
			reused := func(svc string) float64 {
				return counter(c, svc, "replay")
			}
			before0, before1 := reused("party0"), reused("party1")
			consumed := func(svc string) float64 {
				return testutil.ToFloat64(c.Metrics[svc].ItemsConsumed.WithLabelValues(loop))
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			const copies = 3
			for range copies {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := js.Publish(pctx, bus.OfflineSubject(loop), data)
				cancel()
				if err != nil {
					t.Fatalf("storing the copy: %v", err)
				}
			}
			// The copies wait behind at most the queue's capacity.
			c0 := consumed("party0")
			if err := c.RunTicks(ctx, 800); err != nil {
				t.Fatal(err)
			}
			want := float64(copies * len(items))
			if got0, got1 := reused("party0")-before0, reused("party1")-before1; got0 < want || got1 < want {
				t.Errorf("replay rejects after %d copies of a %d-item message: party0 %v, party1 %v; want >= %v each", copies, len(items), got0, got1, want)
			}
			if consumed("party0")-c0 < 780 {
				t.Errorf("party0 used %v items in 800 ticks", consumed("party0")-c0)
			}
			s := Summarize(followed(t, c))
			if bound := sim.OutputBound(cs, c.Sensor.Resolved()); s.Applied < total-misses || s.Misses > misses || s.MaxDiff > bound {
				t.Fatalf("loop disturbed: %d applied, %d misses, max |u - u_plain| %g (bound %g) of %d ticks", s.Applied, s.Misses, s.MaxDiff, bound, total)
			}
			checkAudit(t, c, total-misses)
		})
	}
}

// startRestoredParty starts party i (again) and waits until it is ready
// with the loop's persisted state restored.
func startRestoredParty(t *testing.T, c *Cluster, i int, loop string) {
	t.Helper()
	if err := c.StartParty(i); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !c.Parties[i].Ready() && wctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if st, _ := c.Parties[i].Status(loop); !st.Restored {
		t.Fatalf("party%d did not restore its persisted state", i)
	}
}

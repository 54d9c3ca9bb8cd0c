package bench

import (
	"context"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func TestDealerQuick(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	quiesced := countQuiesce(t)
	rows, err := RunDealer(context.Background(), DealerOptions{URL: url, Items: 1000, Replicas: []int{1, 3}, Variants: []mpc.Variant{mpc.FixedMask}, Compress: []bool{true}},
		[]DealerCase{{Name: "pendulum", Controller: cs}})
	if err != nil {
		t.Fatal(err)
	}
	// Replicas 1 and 3, each with 8 items per stream message and with 1.
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	if *quiesced != 0 {
		t.Errorf("quiesced %d times for %d points: a dealer is measured as it runs, with its memory mapped (quiesce)", *quiesced, len(rows))
	}
	for i, r := range rows {
		if want := []int{8, 8, 1, 1}[i]; r.PerMsg != want || r.Items%want != 0 {
			t.Errorf("row %d: %d items per message (%d items), want %d", i, r.PerMsg, r.Items, want)
		}
		if r.Rate <= 0 || r.StreamBytes < float64(r.PayloadBytes) {
			t.Errorf("%+v: want a positive rate and stream bytes >= payload bytes", r)
		}
		t.Logf("%+v", r)
	}
}

// A controller whose items exceed a multi-item message's budget gets fewer
// items per message, and the queue keeps the capacity asked for, in items.
func TestLargeItemsKeepQueueCapacity(t *testing.T) {
	r := startRig(t)
	ctx := context.Background()
	const queueMax = 400
	for _, c := range []struct {
		loop    string
		cs      mpc.ControllerSpec
		perMsg  int // the sensor's items per message after sizing
		variant mpc.Variant
	}{
		{"bigitem", RandomController(99, 1, 1), 1, mpc.PerTick},
		{"smallit", RandomController(2, 1, 1), 8, mpc.FixedMask},
	} {
		if _, err := r.setupLoop(r.admin, loopSpec{Loop: c.loop, Controller: c.cs, Variant: c.variant, Compress: true, QueueMax: queueMax, ItemsPerMsg: 8}); err != nil {
			t.Fatal(err)
		}
		st, err := r.js.Stream(ctx, bus.OfflineStream(c.loop))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := st.CachedInfo().Config.MaxMsgs, int64((queueMax+c.perMsg-1)/c.perMsg); got != want {
			t.Errorf("%s: stream holds %d messages, want %d (%d items of %d per message)", c.loop, got, want, queueMax, c.perMsg)
		}
	}
	stop, err := r.startDealers(1, dealer.Options{LowWater: 64, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, c := range []struct {
		loop   string
		perMsg int
	}{{"bigitem", 1}, {"smallit", 8}} {
		var k int
		if err := waitFor(ctx, time.Minute, "a stream message", func() bool { k, err = storedPerMsg(ctx, r, c.loop); return err == nil }); err != nil {
			t.Fatal(err)
		}
		if k != c.perMsg {
			t.Errorf("%s: the dealer put %d items in a message, want %d", c.loop, k, c.perMsg)
		}
	}
}

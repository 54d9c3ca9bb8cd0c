package party

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Run that cannot subscribe to the other party's batches returns that
// error, naming the subscription, and only once the loops it started have
// ended: none is left running without a dispatcher to deliver its messages.
func TestRunFailsWithoutItsSubscription(t *testing.T) {
	nc := natstest.Conn(t)
	s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a", "b"},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // the subscription fails; the loops wait for their set-up
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10 s; %d loops still running", workerRuns())
	}
	if err == nil || !strings.Contains(err.Error(), "batch subscription") {
		t.Fatalf("Run: %v, want the batch subscription's error", err)
	}
	if n := workerRuns(); n != 0 {
		t.Errorf("%d loops still running after Run returned", n)
	}
}

// workerRuns counts the goroutines running a worker's loop.
func workerRuns() int { return goroutinesIn("party.(*worker).run(") }

// A measurement that comes before the loop's set-up is complete (the
// fixed-mask set-up waits for the other party's S share) abandons its tick
// as not_ready; it was a kind reject, which fired DuetForbiddenMessages at
// every restart of a fixed-mask party.
func TestMeasurementBeforeReadyNotAReject(t *testing.T) {
	m := metrics.New("party1")
	w := &worker{s: &Service{opt: Options{ID: 1, Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}, id: 1, loop: "l"}
	w.onMeasure(context.Background(), 5, false)
	w.onMeasureMasked(context.Background(), 6, itemID(1, 0))
	if got := testutil.ToFloat64(m.Abandoned.WithLabelValues("l", missNotReady)); got != 2 {
		t.Errorf("%v ticks abandoned as not_ready, want 2", got)
	}
	if got := testutil.ToFloat64(m.Misses.WithLabelValues("l")); got != 2 {
		t.Errorf("%v misses, want 2", got)
	}
	if got := metrics.Sum(m.Rejects); got != 0 {
		t.Errorf("%v rejects counted, want none", got)
	}
}

// A state bucket the server refuses (three replicas on a single server)
// names the variables it was made with: every process of the party shares
// the bucket. An error that is not the server's refusal is left bare.
func TestRefusedStateBucketNamesTheVariables(t *testing.T) {
	nc := natstest.Conn(t)
	var key [32]byte
	s, err := New(nc, testSealer(t, codec.RoleParty1), Options{ID: 1, Loops: []string{"a"}, StateKey: &key, StateReplicas: 3,
		StateStorage: jetstream.FileStorage, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(s, "a")
	err = w.openPersister(t.Context())
	for _, want := range []string{"duet-state-party1", "DUET_STATE_FILE_STORE=true", "DUET_STATE_REPLICAS=3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("three replicas on one server: %v, want an error naming %s", err, want)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.openPersister(ctx); err == nil || strings.Contains(err.Error(), "DUET_STATE_REPLICAS") {
		t.Errorf("a cancelled start: %v, want its error without the variables", err)
	}
}

package party

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

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

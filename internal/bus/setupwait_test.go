package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/natstest"
)

// A server without JetStream never creates the set-up bucket: a service
// waiting for it says why instead of hanging in silence, and a bucket that
// is only missing (the sensor has not set up yet) is waited for quietly.
func TestWaitSetupBucketSaysWhy(t *testing.T) {
	for _, jsOn := range []bool{false, true} {
		ns := natstest.Server(t, &server.Options{JetStream: jsOn, StoreDir: t.TempDir()})
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err = WaitSetupBucket(ctx, js, slog.New(slog.NewTextHandler(&buf, nil)))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("JetStream %v: %v, want the context's deadline", jsOn, err)
		}
		logged := strings.Contains(buf.String(), "waiting for the set-up bucket")
		if logged != !jsOn {
			t.Errorf("JetStream %v: logged %q", jsOn, buf.String())
		}
	}
}

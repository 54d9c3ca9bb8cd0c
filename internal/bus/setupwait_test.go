package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// A set-up record that apply refuses is reported once per revision, however
// often it is read again, and the wait ends when a record apply takes is
// written; a missing record is waited for quietly.
func TestWaitSetupRecordRefusesOncePerRevision(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kv, err := EnsureSetupBucket(ctx, js, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	const key = "l1.actuator"
	var buf bytes.Buffer
	var mu sync.Mutex
	var refused []uint64
	refusals := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(refused)
	}
	// waitRefused waits until the waiter has refused n records: a loaded
	// machine may hold its next read back.
	waitRefused := func(n int) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); refusals() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%d records refused in 10 s, want %d", refusals(), n)
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- WaitSetupRecord(ctx, kv, key, slog.New(slog.NewTextHandler(&buf, nil)), func(data []byte) error {
			if string(data) != "good" {
				return errors.New("does not open")
			}
			return nil
		}, func(rev uint64, _ error) {
			mu.Lock()
			refused = append(refused, rev)
			mu.Unlock()
		})
	}()
	time.Sleep(250 * time.Millisecond) // missing: read about twice, quietly
	bad1, err := kv.Put(ctx, key, []byte("bad"))
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(1)
	time.Sleep(350 * time.Millisecond) // read again about three times
	bad2, err := kv.Put(ctx, key, []byte("bad again"))
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(2)
	time.Sleep(250 * time.Millisecond)
	if _, err := kv.Put(ctx, key, []byte("good")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end on a good record")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 2 || refused[0] != bad1 || refused[1] != bad2 {
		t.Errorf("refusals reported at revisions %v, want [%d %d]: once per revision", refused, bad1, bad2)
	}
	if buf.Len() != 0 {
		t.Errorf("logged while the record was missing or refused: %q", buf.String())
	}
}

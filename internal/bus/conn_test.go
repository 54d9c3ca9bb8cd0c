package bus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/natstest"
)

func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// The offline queue is created with consumers that acknowledge on delivery,
// a second call leaves it as it is, and a queue whose consumers an earlier
// version made with explicit acks is refused with the remedy, not changed.
func TestEnsureOfflineQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := jetStream(t)
	q := OfflineQueue{Loop: "pend-1", MaxMsgs: 100}
	for range 2 {
		st, err := EnsureOfflineQueue(ctx, js, q, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			c, err := st.Consumer(ctx, ConsumerName(i))
			if err != nil {
				t.Fatal(err)
			}
			if p := c.CachedInfo().Config.AckPolicy; p != jetstream.AckNonePolicy {
				t.Errorf("consumer %s: ack policy %v, want none", ConsumerName(i), p)
			}
		}
	}

	old := OfflineQueue{Loop: "pend-2", MaxMsgs: 100}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: OfflineStream(old.Loop), Subjects: []string{OfflineSubject(old.Loop)},
		Retention: jetstream.InterestPolicy, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: ConsumerName(0), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	_, err = EnsureOfflineQueue(ctx, js, old, 1, false)
	if !errors.Is(err, ErrOldQueue) || !strings.Contains(err.Error(), OfflineStream(old.Loop)) || !strings.Contains(err.Error(), "nats stream rm") {
		t.Fatalf("queue with an explicit-ack consumer: %v; want ErrOldQueue naming the stream and the remedy", err)
	}
	c, err := st.Consumer(ctx, ConsumerName(0))
	if err != nil || c.CachedInfo().Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("the old consumer was changed or removed: %v", err)
	}
}

// A bucket opened with another replica count than it has is warned of,
// naming the bucket, both counts and the variable, before CreateOrUpdate
// changes it; one with the same count, or not there yet, is not. (The
// change itself needs a cluster: a single server refuses more than one
// replica, so only the warning is tested.)
func TestWarnReplicaChange(t *testing.T) {
	ctx := t.Context()
	js := jetStream(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	WarnReplicaChange(ctx, js, log, SetupBucket, 3, "DUET_REPLICAS")
	if buf.Len() != 0 {
		t.Errorf("no bucket yet: logged %q", buf.String())
	}
	if _, err := EnsureSetupBucket(ctx, js, 1, false); err != nil {
		t.Fatal(err)
	}
	WarnReplicaChange(ctx, js, log, SetupBucket, 1, "DUET_REPLICAS")
	if buf.Len() != 0 {
		t.Errorf("the same replica count: logged %q", buf.String())
	}
	WarnReplicaChange(ctx, js, log, SetupBucket, 3, "DUET_REPLICAS")
	for _, want := range []string{"level=WARN", "bucket=" + SetupBucket, "replicas=1", "configured=3", "variable=DUET_REPLICAS"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("another replica count: logged %q, want %s in it", buf.String(), want)
		}
	}
}

// WaitConnected returns at once on a connection that is up, and on one
// still trying its first server when its context ends or the connection is
// closed (the sensor's test TestItemSizeCheckedOnceConnected has the server
// come up).
func TestWaitConnected(t *testing.T) {
	if err := WaitConnected(t.Context(), natstest.Conn(t)); err != nil {
		t.Errorf("a connection that is up: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing listens on
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := WaitConnected(ctx, nc); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no server, the context ended: %v, want its error", err)
	}
	time.AfterFunc(50*time.Millisecond, nc.Close)
	if err := WaitConnected(t.Context(), nc); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("no server, the connection closed: %v, want nats.ErrConnectionClosed", err)
	}
}

// A NATS URL is logged without its credentials: a user and password, or a
// token, in any URL of the list.
func TestRedactURL(t *testing.T) {
	in := "nats://alice:s3cret@h1:4222, tls://t0ken@h2:4443,nats://h3:4222,user:pw@h4:4222,h5:4222,nats://h6:bad port"
	got := RedactURL(in)
	for _, secret := range []string{"s3cret", "t0ken", "alice", "pw@"} {
		if strings.Contains(got, secret) {
			t.Errorf("RedactURL(%q) = %q: %q left in", in, got, secret)
		}
	}
	want := "nats://redacted@h1:4222,tls://redacted@h2:4443,nats://h3:4222,redacted@h4:4222,h5:4222,(unparsable URL)"
	if got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
}

// CountAsyncErrors counts each asynchronous error and still hands it to the
// callback set before it (Connect's log).
func TestCountAsyncErrorsChains(t *testing.T) {
	o := nats.GetDefaultOptions()
	var logged, counted []error
	o.AsyncErrorCB = func(_ *nats.Conn, _ *nats.Subscription, err error) { logged = append(logged, err) }
	if err := CountAsyncErrors(func(err error) { counted = append(counted, err) })(&o); err != nil {
		t.Fatal(err)
	}
	o.AsyncErrorCB(nil, nil, nats.ErrSlowConsumer)
	if len(logged) != 1 || len(counted) != 1 || counted[0] != nats.ErrSlowConsumer {
		t.Errorf("logged %v, counted %v; want the error once in each", logged, counted)
	}
}

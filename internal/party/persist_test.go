package party

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestStateWritesReuseBuffers: on a real JetStream KV bucket, every state
// write reuses one message and one sealed-record buffer (PublishMsg copies
// what it sends), its acknowledgement arrives through the service's router
// with the record's revision, and every stored record is the state at its
// write; a write the server refuses (a stale revision) is resolved by the
// fence check, and the state is stored all the same.
func TestStateWritesReuseBuffers(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prm, p := pendulumParty(t)
	f := prm.Field
	key := [32]byte{7}
	s := &Service{nc: nc, js: js, opt: Options{ID: 0, StateKey: &key, StateStorage: jetstream.MemoryStorage,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	w := &worker{s: s, id: 0, loop: "persist-1", prm: prm, p: p}
	ctx := context.Background()
	if err := w.openPersister(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.claim(ctx, 0); err != nil {
		t.Fatal(err)
	}
	pst := w.persist
	write := func(v int64) {
		t.Helper()
		x := mpc.NewMatrix(prm.N, 1)
		x.Data[1] = f.FromInt64(v)
		if err := p.SetState(x); err != nil {
			t.Fatal(err)
		}
		w.version = uint64(v)
		if err := w.save(ctx); err != nil {
			t.Fatal(err)
		}
		if !pst.inflight {
			t.Fatal("no write in flight after save")
		}
		if !w.flushState(ctx) {
			t.Fatalf("state %d not persisted", v)
		}
		e, err := pst.kv.Get(ctx, w.loop)
		if err != nil {
			t.Fatal(err)
		}
		if e.Revision() != pst.rev {
			t.Fatalf("revision %d stored, the party holds %d", e.Revision(), pst.rev)
		}
		rec, err := pst.open(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		got, err := rec.X.Decode(f, prm.N, 1)
		if err != nil || rec.Version != uint64(v) || !got.Equal(x) {
			t.Fatalf("stored record: version %d, state equal %v (%v); want version %d", rec.Version, got.Equal(x), err, v)
		}
	}
	write(1)
	msg, buf := pst.msg, &pst.buf[0]
	for v := int64(2); v < 6; v++ {
		rev := pst.rev
		write(v)
		if pst.msg != msg || &pst.buf[0] != buf {
			t.Fatalf("write %d did not reuse the message and record", v)
		}
		if pst.rev != rev+1 {
			t.Fatalf("write %d acknowledged at revision %d, want %d", v, pst.rev, rev+1)
		}
	}
	// A write at a stale revision is refused; the fence check finds this
	// instance's own record and takes its revision, and the state is written
	// again synchronously.
	pst.rev--
	write(6)
	write(7)
	if pst.msg != msg {
		t.Fatal("the write after a refused one took a new message")
	}
}

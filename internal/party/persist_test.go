package party

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestStateWritesReuseBuffers: on a real JetStream KV bucket, every state
// write reuses one message and one sealed-record buffer (PublishMsg copies
// what it sends), its acknowledgement arrives through the service's router
// with the record's revision, and every stored record is the state at its
// write; a write the server refuses (a stale revision) is resolved by the
// fence check, and the state is stored all the same.
func TestStateWritesReuseBuffers(t *testing.T) {
	w := persistingWorker(t, "persist-1")
	prm, f := w.prm, w.prm.Field
	ctx := context.Background()
	pst := w.persist
	write := func(v int64) {
		t.Helper()
		x := saveState(t, w, v)
		if !pst.inflight {
			t.Fatal("no write in flight after save")
		}
		if !w.flushState(ctx) {
			t.Fatalf("state %d not persisted", v)
		}
		rev, rec := storedRecord(t, w)
		if rev != pst.rev {
			t.Fatalf("revision %d stored, the party holds %d", rev, pst.rev)
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

// A party one state update ahead of its peer rolls back to the share it
// kept (a version mismatch). The rollback must reach the store before the
// next tick: the stored record holds the update given up, and a crash would
// otherwise restore it, a state the peer never had, at a version that
// matches the peer's again one tick later.
func TestRollbackIsPersisted(t *testing.T) {
	w := persistingWorker(t, "rollback-1")
	prm, p, f := w.prm, w.p, w.prm.Field
	ctx := context.Background()
	kept, ahead := mpc.NewMatrix(prm.N, 1), mpc.NewMatrix(prm.N, 1)
	kept.Data[0], ahead.Data[0] = f.FromInt64(4), f.FromInt64(5)
	if err := p.SetState(ahead); err != nil {
		t.Fatal(err)
	}
	w.version, w.prev, w.hasPrev = 5, kept, true
	if err := w.save(ctx); err != nil || !w.flushState(ctx) {
		t.Fatalf("version 5 not persisted: %v", err)
	}
	type event struct {
		tick, version uint64
		updated       bool
	}
	var events []event
	w.s.opt.StateVersion = func(_ string, tick, version uint64, updated bool) {
		events = append(events, event{tick, version, updated})
	}
	// Tick 10 is open with item 77; the peer's message says version 4.
	w.cur, w.st, w.item = 10, begun, 77
	w.onMul(10, peerMul{item: 77, version: 4})
	if w.version != 4 || w.st != idle {
		t.Fatalf("after the mismatch: version %d, stage %v; want 4, idle", w.version, w.st)
	}
	// The rollback is reported (Options.StateVersion, LoopStatus).
	if want := (event{10, 4, false}); len(events) != 1 || events[0] != want {
		t.Errorf("state versions reported %v, want [%v]", events, want)
	}
	if v := w.versionPub.Load(); v != 4 {
		t.Errorf("LoopStatus.Version %d after the rollback, want 4", v)
	}
	if !w.flushState(ctx) { // what the next tick's start does
		t.Fatal("the rolled-back state not persisted")
	}
	e, err := w.persist.kv.Get(ctx, w.loop)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := w.persist.open(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	x, err := rec.X.Decode(f, prm.N, 1)
	if err != nil || rec.Version != 4 || !x.Equal(kept) {
		t.Fatalf("stored after the rollback: version %d, the kept state %v (%v); want version 4 and the kept state", rec.Version, x.Equal(kept), err)
	}
}

// saveState sets w's state (v in its second element) and version (v) and
// starts the state's write; it returns the state.
func saveState(t *testing.T, w *worker, v int64) mpc.Matrix {
	t.Helper()
	x := mpc.NewMatrix(w.prm.N, 1)
	x.Data[1] = w.prm.Field.FromInt64(v)
	if err := w.p.SetState(x); err != nil {
		t.Fatal(err)
	}
	w.version = uint64(v)
	if err := w.save(context.Background()); err != nil {
		t.Fatal(err)
	}
	return x
}

// storedRecord reads w's stored state record: its revision and the record.
func storedRecord(t *testing.T, w *worker) (uint64, stateRecord) {
	t.Helper()
	e, err := w.persist.kv.Get(context.Background(), w.loop)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := w.persist.open(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision(), rec
}

// testStateKey is the state key of persistingWorker's party.
var testStateKey = [32]byte{7}

// persistingWorker is P0's worker for loop with the pendulum's party, its
// state persisted to a JetStream KV bucket of an embedded server, and the
// record's key claimed.
func persistingWorker(t *testing.T, loop string) *worker {
	t.Helper()
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	prm, p := pendulumParty(t)
	key := testStateKey
	s := &Service{nc: nc, js: js, opt: Options{ID: 0, StateKey: &key, StateStorage: jetstream.MemoryStorage,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	w := &worker{s: s, id: 0, loop: loop, prm: prm, p: p}
	ctx := context.Background()
	if err := w.openPersister(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.claim(ctx, 0); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestDeletedRecordWrittenAgain: a state record deleted (or purged) while
// the loop runs is written again at the next write, with the current state,
// and the writes after it go on; before, each write failed its revision
// check, the re-read found no record, and every tick missed. A record
// another instance has created meanwhile fences this one.
func TestDeletedRecordWrittenAgain(t *testing.T) {
	for _, purge := range []bool{false, true} {
		w := persistingWorker(t, fmt.Sprintf("persist-del-%v", purge))
		ctx := context.Background()
		write := func(v int64) bool {
			t.Helper()
			saveState(t, w, v)
			return w.flushState(ctx)
		}
		stored := func() uint64 {
			t.Helper()
			_, rec := storedRecord(t, w)
			return rec.Version
		}
		if !write(1) {
			t.Fatal("version 1 not persisted")
		}
		var err error
		if purge {
			err = w.persist.kv.Purge(ctx, w.loop)
		} else {
			err = w.persist.kv.Delete(ctx, w.loop)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !write(2) || w.fenced {
			t.Fatalf("purge %v: version 2 not persisted after the record was deleted (fenced %v)", purge, w.fenced)
		}
		if v := stored(); v != 2 {
			t.Fatalf("purge %v: version %d stored, want 2", purge, v)
		}
		if !write(3) || stored() != 3 {
			t.Fatalf("purge %v: the write after the record was written again failed", purge)
		}
		// Deleted again, and created by someone else before this party
		// writes: fenced. First between checkFence's read, which found it
		// gone, and its Create (recreate directly), then before the write.
		if err := w.persist.kv.Delete(ctx, w.loop); err != nil {
			t.Fatal(err)
		}
		if _, err := w.persist.kv.Create(ctx, w.loop, []byte("another instance")); err != nil {
			t.Fatal(err)
		}
		if err := w.recreate(ctx); !errors.Is(err, ErrFenced) {
			t.Fatalf("purge %v: recreate over a record another instance created: %v, want ErrFenced", purge, err)
		}
		if write(4) || !w.fenced {
			t.Fatalf("purge %v: a record another instance created did not fence this one", purge)
		}
	}
}

// TestRecordUnderAnotherKey: after a key rotation the party's state record,
// sealed under its old key, does not open; the party starts from the set-up
// state and says why, counting other_key, not auth (which fired
// DuetForbiddenMessages on every rotation, once per loop). A record that
// does not authenticate, here another loop's record moved to this loop's
// key under the same key, is still rejected and counted as auth.
func TestRecordUnderAnotherKey(t *testing.T) {
	ctx := context.Background()
	first := persistingWorker(t, "rotated")
	saveState(t, first, 5)
	if !first.flushState(ctx) {
		t.Fatal("version 5 not persisted")
	}
	restoreWith := func(loop string, key [32]byte) (*worker, *metrics.Set, string) {
		t.Helper()
		var logs bytes.Buffer
		m := metrics.New("party")
		s := &Service{nc: first.s.nc, js: first.s.js, opt: Options{ID: 0, StateKey: &key, StateStorage: jetstream.MemoryStorage,
			Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m}}
		w := &worker{s: s, id: 0, loop: loop, prm: first.prm, p: first.p, guard: codec.NewReplayGuard(), epoch: first.epoch}
		if err := w.openPersister(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.restore(ctx); err != nil {
			t.Fatalf("restore of %s: %v", loop, err)
		}
		return w, m, logs.String()
	}

	// The record restores under its own key and loop.
	w, _, _ := restoreWith("rotated", testStateKey)
	if !w.restored || w.version != 5 {
		t.Fatalf("the record under its own key: restored %v, version %d; want version 5", w.restored, w.version)
	}

	// The same key, another loop's record: auth.
	e, err := first.persist.kv.Get(ctx, "rotated")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.persist.kv.Put(ctx, "moved", e.Value()); err != nil {
		t.Fatal(err)
	}
	w, m, logs := restoreWith("moved", testStateKey)
	if w.restored || testutil.ToFloat64(m.Rejects.WithLabelValues("auth")) != 1 {
		t.Fatalf("another loop's record: restored %v, %v auth rejects; want refused and counted once\n%s",
			w.restored, testutil.ToFloat64(m.Rejects.WithLabelValues("auth")), logs)
	}

	// Under another key: the old key's record.
	w, m, logs = restoreWith("rotated", [32]byte{8})
	if w.restored || w.version != 0 {
		t.Fatalf("a record of the old key restored (version %d)", w.version)
	}
	for _, r := range codec.Reasons() {
		want := 0.0
		if r == "other_key" {
			want = 1
		}
		if n := testutil.ToFloat64(m.Rejects.WithLabelValues(r)); n != want {
			t.Fatalf("the old key's record counted %v rejects %q, want %v", n, r, want)
		}
	}
	if !strings.Contains(logs, "key rotation") {
		t.Fatalf("the log does not say the key changed:\n%s", logs)
	}
}

// A state record whose tick is above codec.MaxTick is refused at restore,
// naming the tick: restored, the loop would refuse every message as stale
// (its replay guard admits no tick above the bound).
func TestRestoreRefusesTickAboveMaxTick(t *testing.T) {
	ctx := context.Background()
	first := persistingWorker(t, "far")
	first.cur = codec.MaxTick + 1
	saveState(t, first, 5)
	if !first.flushState(ctx) {
		t.Fatal("version 5 not persisted")
	}
	key := testStateKey
	s := &Service{nc: first.s.nc, js: first.s.js, opt: Options{ID: 0, StateKey: &key, StateStorage: jetstream.MemoryStorage,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party")}}
	w := &worker{s: s, id: 0, loop: "far", prm: first.prm, p: first.p, guard: codec.NewReplayGuard(), epoch: first.epoch}
	if err := w.openPersister(ctx); err != nil {
		t.Fatal(err)
	}
	err := w.restore(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("tick %d above the largest", uint64(codec.MaxTick+1))) || w.restored {
		t.Fatalf("restore of a record at tick 2^62+1: %v, restored %v; want refused, naming the tick", err, w.restored)
	}
}

// TestGivenUpTickItemPersisted: an item taken by a tick that is then given
// up (no state update, so no write of its own) is in the record written
// before the next item is taken, with its serial, so a party restored from
// it refuses a copy of the item. Before, the record kept the marks of the
// last completed tick, and a restored party took such copies again, sending
// a second opening under their masks.
func TestGivenUpTickItemPersisted(t *testing.T) {
	w := persistingWorker(t, "given-up")
	ctx := context.Background()
	saveState(t, w, 1)
	if !w.flushState(ctx) {
		t.Fatal("version 1 not persisted")
	}
	w.expander = mpc.NewExpander(w.prm, [32]byte{1})
	w.items = make(chan []rawItem, 1)
	nonce := mpc.ItemSerial{Instance: 5, Counter: 1}.Nonce()
	w.items <- []rawItem{tagged([32]byte{1}, rawItem{seq: itemID(3, 1), nonce: nonce})}
	seq, _, _, err := w.takeItem(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	// The tick is given up (its state not updated); the next tick starts.
	if !w.flushState(ctx) {
		t.Fatal("state not persisted at the next tick's start")
	}
	_, rec := storedRecord(t, w)
	if got := restoredHWM(rec); got != seq || rec.Version != 1 {
		t.Fatalf("stored record: item mark %d, version %d; want the taken item %d at version 1", got, rec.Version, seq)
	}
	var restored itemSerials
	if err := restored.unmarshal(rec.Serials); err != nil {
		t.Fatal(err)
	}
	if err := restored.take(nonce); !errors.Is(err, codec.ErrReplay) {
		t.Fatalf("a copy of the taken item after a restore: %v, want it refused as a replay", err)
	}

	// With the after queue (PersistDelay), the given-up tick's write goes
	// with the other loops' writes, not synchronously at the next start.
	w.s.after = newAfterQueue(time.Millisecond)
	w.items <- []rawItem{tagged([32]byte{1}, rawItem{seq: itemID(4, 1), nonce: mpc.ItemSerial{Instance: 5, Counter: 2}.Nonce()})}
	if seq, _, _, err = w.takeItem(ctx, true); err != nil {
		t.Fatal(err)
	}
	w.miss(missLate, "given up")
	if !w.s.after.pending() {
		t.Fatal("a tick given up with its item unwritten queued no write")
	}
	if got := w.s.after.take(); len(got) != 1 || got[0] != w {
		t.Fatalf("the after queue holds %d workers, want this one", len(got))
	}
	if !w.deferred(ctx) || !w.persist.inflight {
		t.Fatal("the after queue's run started no write")
	}
	waitUntil(t, "the write answered", w.persist.poll)
	if !w.flushState(ctx) {
		t.Fatal("state not persisted")
	}
	if _, rec := storedRecord(t, w); restoredHWM(rec) != seq {
		t.Fatalf("stored item mark %d, want %d", restoredHWM(rec), seq)
	}
	// A tick given up because its write failed queues none: the next tick
	// tries again (a queued write would have it wait for two).
	w.persist.dirty = true
	w.miss(missPersist, "state not persisted")
	if w.s.after.pending() {
		t.Fatal("a tick given up on a failed write queued another")
	}
}

// TestLastWriteAtShutdown: a tick's update left for its deferred write
// (PersistDelay) when the service stops is stored by the worker's last
// write; before, the after queue stopped with the service and the restarted
// party was an update behind the other.
func TestLastWriteAtShutdown(t *testing.T) {
	w := persistingWorker(t, "last-write")
	saveState(t, w, 1)
	if !w.flushState(context.Background()) {
		t.Fatal("version 1 not persisted")
	}
	// A tick completes (finish): the state updated, its write deferred.
	x := mpc.NewMatrix(w.prm.N, 1)
	x.Data[0] = w.prm.Field.FromInt64(2)
	if err := w.p.SetState(x); err != nil {
		t.Fatal(err)
	}
	w.version = 2
	w.persist.dirty = true
	w.lastWrite()
	if _, rec := storedRecord(t, w); rec.Version != 2 {
		t.Fatalf("stored version %d after the last write, want 2", rec.Version)
	}
}

// TestLastWriteWhenTheLoopStops: a loop that stops for another reason than
// a shutdown (its offline consumer gone) stores the update its last tick
// left for the deferred write, as a shutdown does; before, it returned
// without, and the after queue skips a loop that has exited. A fenced loop
// writes nothing: another instance holds the record.
func TestLastWriteWhenTheLoopStops(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	prm := pendulumParams(t)
	f := prm.Field
	setups, err := bus.EnsureSetupBucket(ctx, js, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	sensor := testSealer(t, codec.RoleSensor)
	for _, c := range []struct {
		loop    string
		fence   bool
		version uint64 // stored once the loop has stopped
	}{
		{"stop-consumer-gone", false, 1},
		{"stop-fenced", true, 0},
	} {
		if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: c.loop, MaxMsgs: 100}, 1, false); err != nil {
			t.Fatal(err)
		}
		r, cols := prm.PhiShape()
		body, err := codec.Marshal(codec.SetupPayload{Epoch: rigEpoch, Params: codec.PutParams(prm), Phi: codec.PutMatrix(f, mpc.NewMatrix(r, cols)),
			X0: codec.PutMatrix(f, mpc.NewMatrix(prm.N, 1)), Stream: bus.OfflineStream(c.loop)})
		if err != nil {
			t.Fatal(err)
		}
		env, err := sensor.Seal(codec.Header{Kind: codec.KindSetup, Loop: c.loop, Tick: rigEpoch, From: codec.RoleSensor, To: codec.RoleParty1}, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := setups.Put(ctx, bus.SetupKey(c.loop, codec.RoleParty1), env); err != nil {
			t.Fatal(err)
		}
		key := testStateKey
		s, err := New(nc, testSealer(t, codec.RoleParty1), Options{ID: 1, Loops: []string{c.loop}, StateKey: &key, StateStorage: jetstream.MemoryStorage,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New("party1")})
		if err != nil {
			t.Fatal(err)
		}
		w := newWorker(s, c.loop)
		done := make(chan error, 1)
		go func() { done <- w.run(ctx) }()
		waitUntil(t, "the loop in its event loop", w.live.Load)
		// A tick completes (finish): the state updated, its write left for
		// the after queue.
		w.mu.Lock()
		x := mpc.NewMatrix(prm.N, 1)
		x.Data[0] = f.FromInt64(2)
		if err := w.p.SetState(x); err != nil {
			t.Fatal(err)
		}
		w.version, w.persist.dirty = 1, true
		w.fenced = c.fence
		w.mu.Unlock()
		if c.fence {
			w.stopWith(ErrFenced)
		} else {
			w.consumerGone(jetstream.ErrConsumerDeleted)
		}
		select {
		case err := <-done:
			if err == nil || errors.Is(err, ErrFenced) != c.fence {
				t.Fatalf("%s: the loop stopped with %v", c.loop, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the loop did not stop within 20 s", c.loop)
		}
		if _, rec := storedRecord(t, w); rec.Version != c.version {
			t.Errorf("%s: stored version %d once the loop stopped, want %d", c.loop, rec.Version, c.version)
		}
	}
}

// TestNothingHandledAfterTheLastWrite: once the loop's last write is done
// (lastWrite, as run stops), the dispatcher, which delivers until run has
// returned, starts no tick on a measurement it handles inline, and the after
// queue's run does nothing: the tick's item mark and update would not be
// stored, and the party, restarted, would be an update behind the other.
// Before, the measurement began a tick (taking an item) and the deferred work
// staged and pre-opened the next item.
func TestNothingHandledAfterTheLastWrite(t *testing.T) {
	r := newTwoHopRig(t, 4)
	r.persistState()
	w := r.w[0]
	w.live.Store(true) // in the event loop: the dispatcher may handle inline
	w.lastWrite()
	if queue := w.deliverInline(t.Context(), r.measureMsg(0, 1, r.y(), false, 0)); queue {
		t.Fatal("a measurement after the last write was queued, not dropped")
	}
	if w.cur != 0 || w.st != idle || w.hwm != 0 || w.persist.dirty {
		t.Fatalf("after the last write a measurement began a tick: tick %d, stage %v, item mark %#x, state unwritten %v", w.cur, w.st, w.hwm, w.persist.dirty)
	}
	if !w.deferred(t.Context()) || w.hasStaged || w.pre.ok || w.persist.dirty {
		t.Fatalf("the after queue's run after the last write: staged %v, pre-opened %v, state unwritten %v; want nothing done", w.hasStaged, w.pre.ok, w.persist.dirty)
	}
}

// TestFailedStartMarksExited: a loop whose start fails is marked exited, so
// that the dispatcher drops its messages; before, they were queued for a
// worker that never read them, and counted as overload once its queue was
// full.
func TestFailedStartMarksExited(t *testing.T) {
	nc := natstest.Conn(t)
	s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"failed"}, Metrics: metrics.New("party"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(s, "failed")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.run(ctx); err == nil {
		t.Fatal("run without a set-up and a cancelled context: no error")
	}
	if !w.exited.Load() {
		t.Fatal("a loop whose start failed is not marked exited")
	}
}

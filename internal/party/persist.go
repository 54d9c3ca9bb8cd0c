package party

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Crash recovery without controller reset: after every state update the
// party writes its state share, state version, last tick and the offline
// queue's high-water mark to its own JetStream KV bucket, sealed to itself
// (XChaCha20-Poly1305 under a key derived from its identity seed), so neither
// the broker nor anyone else learns the share. Writes are compare-and-set on
// the key's revision: a second instance of the same party that restores the
// record takes it over, and the first one's next write fails, which stops it
// (a single-writer fence).

// StateBucket names party i's state bucket.
func StateBucket(party int) string { return fmt.Sprintf("duet-state-party%d", party) }

// StateKey derives the key sealing a party's persisted state from its
// identity seed.
func StateKey(id *codec.Identity) ([32]byte, error) { return id.RecordKey("duet/v1/party-state") }

// Persist turns crash recovery on in o: the state key derived from the
// party's identity id, and JetStream file storage for the state if
// fileStore, else memory storage.
func (o *Options) Persist(id *codec.Identity, fileStore bool) error {
	key, err := StateKey(id)
	if err != nil {
		return err
	}
	o.StateKey, o.StateStorage = &key, jetstream.MemoryStorage
	if fileStore {
		o.StateStorage = jetstream.FileStorage
	}
	return nil
}

// ErrFenced means another instance of the same party took over the loop.
var ErrFenced = errors.New("party: fenced: another instance of this party took over the loop")

// stateRecord is what the party persists per loop (codec.StateRecord).
type stateRecord = codec.StateRecord

type persister struct {
	kv       jetstream.KeyValue
	key      codec.RecordKey
	loop     string // the record's key in the bucket, which its seal binds
	rev      uint64
	instance uint64
	dirty    bool // the latest state is not persisted yet

	// The write in flight (pipelined): it overlaps the idle time until the
	// next tick, which waits for it before starting. Its acknowledgement
	// comes through the service's stateAcks on ackCh; res holds it once
	// taken (poll) until resolve consumes it.
	nc       *nats.Conn
	acks     *stateAcks
	ackCh    chan ackResult
	inflight bool
	token    uint64
	res      ackResult
	hasRes   bool
	// onResult, with the two-hop tick, is called with each write's result
	// (stateAcks.register): it releases the mask share parked for the write
	// (worker.releaseMask).
	onResult func(ackResult)

	// Reused from write to write (nats.Conn.PublishMsg copies what it
	// sends): the message, its header value, the sealed record, the
	// state's encoding and the record being sealed (which aliases wire).
	msg       *nats.Msg
	lastSeq   []string
	buf, wire []byte
	rec       stateRecord
}

// saveTimeout bounds a state write; the tick loop never waits longer.
const saveTimeout = 250 * time.Millisecond

// seal seals a record of the persister's loop, bound to its key in the
// bucket (the loop ID): another loop's record does not open as this one's.
func (p *persister) seal(rec stateRecord) ([]byte, error) {
	return p.key.SealAppend(nil, p.loop, rec)
}

func (p *persister) open(data []byte) (stateRecord, error) {
	var rec stateRecord
	err := p.key.Open(p.loop, data, &rec)
	return rec, err
}

// openPersister binds the party's state bucket.
func (w *worker) openPersister(ctx context.Context) error {
	if w.s.opt.StateKey == nil {
		return nil
	}
	w.s.replicasChecked.Do(func() {
		bus.WarnReplicaChange(ctx, w.s.js, w.s.opt.Log, StateBucket(w.id), max(1, w.s.opt.StateReplicas), "DUET_STATE_REPLICAS")
	})
	kv, err := w.s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: StateBucket(w.id), History: 1,
		Storage: w.s.opt.StateStorage, Replicas: max(1, w.s.opt.StateReplicas)})
	if api := (*jetstream.APIError)(nil); errors.As(err, &api) { // refused by the server
		return fmt.Errorf("state bucket %s (made with DUET_STATE_FILE_STORE=%v and DUET_STATE_REPLICAS=%d: the replicas at most the NATS servers in the cluster, and every process of party%d shares the bucket, so set both alike on all): %w",
			StateBucket(w.id), w.s.opt.StateStorage == jetstream.FileStorage, max(1, w.s.opt.StateReplicas), w.id, err)
	} else if err != nil {
		return fmt.Errorf("state bucket %s: %w", StateBucket(w.id), err)
	}
	acks, err := w.s.stateAcks()
	if err != nil {
		return err
	}
	var inst [8]byte
	if _, err := rand.Read(inst[:]); err != nil {
		return err
	}
	msg := nats.NewMsg("$KV." + StateBucket(w.id) + "." + w.loop)
	lastSeq := []string{""}
	msg.Header[jetstream.ExpectedLastSubjSeqHeader] = lastSeq
	w.persist = &persister{kv: kv, key: codec.NewRecordKey(w.s.opt.StateKey), loop: w.loop, instance: binary.LittleEndian.Uint64(inst[:]) | 1,
		nc: w.s.nc, acks: acks, ackCh: make(chan ackResult, 1), msg: msg, lastSeq: lastSeq}
	if w.s.opt.TwoHop {
		w.persist.onResult = w.releaseMask
	}
	return nil
}

// restore loads the persisted record of this loop, if it belongs to the
// current set-up epoch, and claims the key (the fence). A record written
// between the read and the claim (another instance still running, as in a
// rolling restart) is read again: the newer instance takes the loop over
// rather than stopping (claimAttempts).
func (w *worker) restore(ctx context.Context) error {
	if w.persist == nil {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := w.restoreOnce(ctx)
		if attempt == claimAttempts || !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
		w.s.opt.Log.Info("the state record changed while it was restored: reading it again", "party", w.id, "loop", w.loop, "attempt", attempt)
	}
}

// claimAttempts bounds restore's reads: another instance writes at most
// once a tick, and a read and a claim take a few milliseconds.
const claimAttempts = 10

// restoreOnce is one read and claim of restore.
func (w *worker) restoreOnce(ctx context.Context) error {
	w.hasPrev = false
	e, err := w.persist.kv.Get(ctx, w.loop)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) && w.restored:
		return errors.New("the state record was deleted while it was restored")
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return w.claim(ctx, 0)
	case err != nil:
		return fmt.Errorf("reading persisted state: %w", err)
	}
	rec, err := w.persist.open(e.Value())
	if (err != nil || rec.Epoch != w.epoch) && w.restored {
		// An earlier read restored a record of this epoch: the set-up
		// state is gone from the worker.
		return fmt.Errorf("the state record changed while it was restored, to one of another set-up epoch or one that does not open (%v)", err)
	}
	if err != nil {
		// Another key (other_key) is what a key rotation leaves, not
		// taken for forged input (auth); the broker could also serve one.
		w.s.opt.Metrics.Reject(err)
		if errors.Is(err, codec.ErrOtherKey) {
			w.s.opt.Log.Warn("persisted state was sealed under another key of this party's, as after a key rotation; starting from the set-up state", "loop", w.loop, "err", err)
		} else {
			w.s.opt.Log.Error("persisted state rejected; starting from the set-up state", "loop", w.loop, "err", err)
		}
		return w.claim(ctx, e.Revision())
	}
	if rec.Epoch != w.epoch {
		w.s.opt.Log.Info("persisted state is from another set-up epoch; starting fresh", "loop", w.loop)
		return w.claim(ctx, e.Revision())
	}
	if rec.Tick > codec.MaxTick {
		// The replay guard refuses every tick above it: restored, the loop
		// would refuse all its messages as stale.
		return fmt.Errorf("persisted state: tick %d above the largest a loop reaches (2^62)", rec.Tick)
	}
	f := w.prm.Field
	x, err := rec.X.Decode(f, w.prm.N, 1)
	if err != nil {
		return fmt.Errorf("persisted state: %w", err)
	}
	if err := w.p.SetState(x); err != nil {
		return err
	}
	if rec.HasPrev {
		if w.prev, err = rec.Prev.Decode(f, w.prm.N, 1); err != nil {
			return fmt.Errorf("persisted state: %w", err)
		}
		w.hasPrev = true
	}
	if err := w.serials.unmarshal(rec.Serials); err != nil {
		return fmt.Errorf("persisted state: %w", err)
	}
	w.version, w.cur, w.hwm = rec.Version, rec.Tick, restoredHWM(rec)
	w.guard.Restore(w.loop, rec.Tick)
	w.restored = true
	w.restoredPub.Store(true)
	w.versionPub.Store(rec.Version) // with Restored; run reports it (onVersion) once restore returns
	w.s.opt.Log.Info("state restored", "party", w.id, "loop", w.loop, "version", rec.Version, "tick", rec.Tick, "hwm", rec.HWM)
	return w.claim(ctx, e.Revision())
}

// claim writes the current record over revision rev (0: the key must not
// exist), taking the single-writer fence.
func (w *worker) claim(ctx context.Context, rev uint64) error {
	data, err := w.persist.seal(w.record())
	if err != nil {
		return err
	}
	var nrev uint64
	if rev == 0 {
		nrev, err = w.persist.kv.Create(ctx, w.loop, data)
	} else {
		nrev, err = w.persist.kv.Update(ctx, w.loop, data, rev)
	}
	if err != nil {
		return fmt.Errorf("%w (%w)", ErrFenced, err)
	}
	w.persist.rev, w.inc = nrev, nrev
	w.incPub.Store(nrev)
	return nil
}

// restoredHWM is the item id a restored record marks as the last taken.
func restoredHWM(rec stateRecord) uint64 {
	if rec.HWMIdx == 0 || rec.HWMIdx > 0xff {
		return itemID(rec.HWM, 0xff)
	}
	return itemID(rec.HWM, int(rec.HWMIdx))
}

func (w *worker) record() stateRecord {
	rec, _ := w.recordAppend(nil)
	return rec
}

// recordAppend is record with the matrices' entries appended to buf
// (codec.AppendMatrix): the record aliases the returned buffer until it is
// marshalled.
func (w *worker) recordAppend(buf []byte) (stateRecord, []byte) {
	f := w.prm.Field
	rec := stateRecord{Instance: w.persist.instance, Epoch: w.epoch, Version: w.version, Tick: w.cur, HWM: w.hwm >> 8, HWMIdx: w.hwm & 0xff}
	w.serialBuf = w.serials.marshal(w.serialBuf[:0])
	rec.Serials = w.serialBuf
	rec.X, buf = codec.AppendMatrix(f, buf, w.p.StateView())
	if w.hasPrev {
		rec.Prev, buf = codec.AppendMatrix(f, buf, w.prev)
		rec.HasPrev = true
	}
	return rec, buf
}

// save persists after a state update. The write is published
// asynchronously, compare-and-set on the record's revision
// (Nats-Expected-Last-Subject-Sequence), and the next tick waits for its
// acknowledgement before starting (flushState), so the persisted state is
// never more than one update behind. A revision conflict is checked against
// the stored record: if another instance wrote it, this one has been fenced
// off.
func (w *worker) save(ctx context.Context) error {
	if w.persist == nil {
		return nil
	}
	p := w.persist
	if p.inflight { // the previous write is still in flight
		if err := w.resolve(ctx); err != nil {
			return err
		}
	}
	p.dirty = true
	select { // a result that came after its write was given up
	case <-p.ackCh:
	default:
	}
	p.rec, p.wire = w.recordAppend(p.wire[:0])
	data, err := p.key.SealAppend(p.buf[:0], p.loop, &p.rec)
	if err != nil {
		return err
	}
	p.buf, p.msg.Data = data, data
	p.lastSeq[0] = strconv.FormatUint(p.rev, 10)
	token, reply := p.acks.register(p.ackCh, p.onResult)
	p.msg.Reply = reply
	parked := w.parkMask(token)
	if parked && w.inAfter && w.s.opt.PeerBatch > 1 {
		// Sent after the batch's pre-openings (flushAfter), so that its
		// acknowledgement, which releases the mask share, comes after
		// they have left.
		w.s.aout.writes = append(w.s.aout.writes, gatheredWrite{msg: p.msg, acks: p.acks, token: token})
	} else if err := p.nc.PublishMsg(p.msg); err != nil {
		p.acks.forget(token)
		w.unparkMask()
		w.s.opt.Log.Warn("persisting state", "party", w.id, "loop", w.loop, "err", err)
		return nil
	}
	p.token, p.inflight, p.hasRes = token, true, false
	return nil
}

// poll takes the in-flight write's result if it has arrived, without
// waiting, and reports whether there is one.
func (p *persister) poll() bool {
	if !p.hasRes {
		select {
		case r := <-p.ackCh:
			p.take(r)
		default:
		}
	}
	return p.hasRes
}

// take keeps r as the in-flight write's result if it is that write's.
func (p *persister) take(r ackResult) { p.res, p.hasRes = r, r.token == p.token }

// acked records the acknowledgement of the write in flight: the stored
// record is now the latest state, at the acknowledged revision.
func (p *persister) acked(seq uint64) {
	p.inflight, p.hasRes = false, false
	p.rev, p.dirty = seq, false
}

// resolve waits (bounded) for the write in flight.
func (w *worker) resolve(ctx context.Context) error {
	p := w.persist
	if !p.poll() {
		t := time.NewTimer(saveTimeout)
		defer t.Stop()
		select {
		case r := <-p.ackCh:
			p.take(r)
		case <-t.C:
		case <-ctx.Done():
		}
		if !p.hasRes {
			p.acks.forget(p.token)
			p.inflight = false
			if ctx.Err() == nil {
				w.s.opt.Log.Warn("persisting state: no acknowledgement", "party", w.id, "loop", w.loop)
			}
			return nil // dirty: retried synchronously before the next tick
		}
	}
	r := p.res
	p.inflight, p.hasRes = false, false
	switch {
	case r.err == nil:
		p.acked(r.seq)
	case r.errCode == int(jetstream.JSErrCodeStreamWrongLastSequence) || r.errCode == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return w.checkFence(ctx)
	default:
		w.s.opt.Log.Warn("persisting state", "party", w.id, "loop", w.loop, "err", r.err)
	}
	return nil // dirty: retried synchronously before the next tick
}

// checkFence re-reads the record after a revision conflict: our own earlier
// write may have landed after its timeout; anyone else's means a fence. A
// record deleted or purged while the loop runs (`nats kv del`) is written
// again, created as a new one, so that no other instance can hold it:
// before, every write after it failed its revision check, the re-read found
// nothing, and every tick missed for as long as the party ran.
func (w *worker) checkFence(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	e, err := w.persist.kv.Get(sctx, w.loop)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return w.recreate(sctx)
	}
	if err != nil {
		w.s.opt.Log.Warn("persisting state: re-reading the record", "party", w.id, "loop", w.loop, "err", err)
		return nil
	}
	rec, oerr := w.persist.open(e.Value())
	if oerr != nil || rec.Instance != w.persist.instance {
		return ErrFenced
	}
	w.persist.rev = e.Revision()
	return nil
}

// recreate writes the current record as a new one after it was deleted
// (checkFence): ErrFenced if another instance created it first.
func (w *worker) recreate(ctx context.Context) error {
	p := w.persist
	data, err := p.seal(w.record())
	if err != nil {
		return err
	}
	rev, err := p.kv.Create(ctx, w.loop, data)
	switch {
	case err == nil:
		p.rev, p.dirty = rev, false
		w.s.opt.Log.Warn("the state record was deleted while the loop ran: written again", "party", w.id, "loop", w.loop, "version", w.version, "revision", rev)
		return nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%w (it wrote the state record after it had been deleted)", ErrFenced)
	}
	w.s.opt.Log.Warn("persisting state: writing the deleted record again", "party", w.id, "loop", w.loop, "err", err)
	return nil
}

// saveSync writes the current record and waits (bounded) for the result.
func (w *worker) saveSync(ctx context.Context) error {
	p := w.persist
	p.dirty = true
	data, err := p.seal(w.record())
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	rev, err := p.kv.Update(sctx, w.loop, data, p.rev)
	if err == nil {
		p.rev, p.dirty = rev, false
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
		w.s.opt.Log.Warn("persisting state", "party", w.id, "loop", w.loop, "err", err)
		return nil
	}
	if err := w.checkFence(ctx); err != nil {
		return err
	}
	if !p.dirty { // written again by checkFence (recreate)
		return nil
	}
	if rev, err = p.kv.Update(sctx, w.loop, data, p.rev); err == nil {
		p.rev, p.dirty = rev, false
	}
	return nil
}

// flushState makes sure the latest state is persisted before a new tick
// starts; it reports whether it is.
func (w *worker) flushState(ctx context.Context) bool {
	if w.persist == nil {
		return true
	}
	w.unparkMask() // a tick starts: a mask share not yet released is too late
	var err error
	if w.persist.inflight {
		err = w.resolve(ctx)
	}
	if err == nil && w.persist.dirty {
		err = w.saveSync(ctx)
	}
	if err != nil {
		w.fenced = true
		return false
	}
	return !w.persist.dirty
}

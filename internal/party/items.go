package party

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// takeRaw takes the next buffered raw item, without waiting.
func (w *worker) takeRaw() (rawItem, bool) {
	for len(w.batch) == 0 {
		select {
		case b := <-w.items:
			w.batch = b
		default:
			return rawItem{}, false
		}
	}
	r := w.batch[0]
	w.batch[0] = rawItem{} // the message's bytes are not kept for it
	w.batch = w.batch[1:]
	return r, true
}

// rawItem is an offline item as the consumer queued it: only this party's
// part of the stream message (its sealed envelope, or with seed compression
// P0's nonce alone), since a loop buffers up to about three pulls of these
// and they are most of what a party holds per loop. The envelope is opened
// and decoded later, one item per tick (decode).
type rawItem struct {
	seq   uint64
	env   []byte   // this party's sealed material (nil: P0 expands its seed)
	nonce [16]byte // the item's nonce, as the dealer published it
	// tag is a compressed item's tag of its nonce (mpc.ItemTag), which P0
	// checks before it expands the item (material); tagged says the item
	// came with one (a dealer of an earlier release sends none).
	tag    [mpc.ItemTagLen]byte
	tagged bool
	err    error
	// items is how many items an error stands for: a message refused
	// whole carries its items' count, so that duet_items_discarded_total
	// counts items, not messages (0: one).
	items int
}

// item is an item being used: staged (decoded ahead) or taken by a tick.
// decode replaces the envelope by the material (or sets err).
type item struct {
	rawItem
	decoded bool
	mat     mpc.TickMaterial
}

// errEarlierEpoch marks the items of an earlier set-up of the loop, left in
// its queue when the sensor set it up anew: they are discarded and counted
// in items_discarded_total, not as rejected messages, which made
// DuetMalformedMessages fire after every new set-up (up to a low-water
// mark's worth of header rejects at each party). An item of a later epoch
// than the party's set-up is still rejected: the party must be restarted to
// read the new set-up.
var errEarlierEpoch = errors.New("offline item of an earlier set-up")

// trimItems checks a stream message's items (loop, epoch, shape, at most
// the set-up's items per message) and keeps this party's part of each: its
// envelopes are copied out of the message unless they are most of it, so
// that the other party's shares are not kept alive with them. Each item's id
// is seq<<8 | its index in the message (itemID); an error is one rawItem
// that carries it.
func (w *worker) trimItems(data []byte, seq uint64) []rawItem {
	// Peeked up to the largest count any set-up takes, and held to this
	// set-up's after the epoch: a message of an earlier set-up with more
	// items a message (DUET_ITEMS_PER_MSG lowered in a new set-up) is
	// discarded with its items counted, as any earlier set-up's, not
	// refused as malformed, which made DuetMalformedMessages fire.
	its, err := codec.PeekItemsAppend(w.peeked[:0], data, codec.MaxItemsPerMsg, w.loop)
	w.peeked = its
	defer clear(its) // keeps nothing of data alive
	if err != nil {
		return []rawItem{{seq: itemID(seq, 0), err: err}}
	}
	// PeekItems holds every item of a message to the first one's loop and epoch.
	if it := its[0]; it.Loop == w.loop && it.Epoch < w.epoch {
		return []rawItem{{seq: itemID(seq, 0), items: len(its), err: fmt.Errorf("%w: item of epoch %d, the set-up's is %d", errEarlierEpoch, it.Epoch, w.epoch)}}
	} else if it.Loop != w.loop || it.Epoch != w.epoch {
		return []rawItem{{seq: itemID(seq, 0), items: len(its), err: fmt.Errorf("%w: item for loop %q epoch %d, want %q epoch %d", codec.ErrHeader, it.Loop, it.Epoch, w.loop, w.epoch)}}
	} else if len(its) > max(1, w.perMsg) {
		return []rawItem{{seq: itemID(seq, 0), items: len(its), err: fmt.Errorf("%w: %d items in one stream message, the set-up's limit is %d", codec.ErrMalformed, len(its), max(1, w.perMsg))}}
	}
	out := make([]rawItem, len(its))
	own := 0
	for i, it := range its {
		out[i] = rawItem{seq: itemID(seq, i), nonce: it.Nonce, env: it.P1}
		if w.id == 0 {
			out[i].env = it.P0
			if !w.p0Sealed && len(it.P0) == mpc.ItemTagLen {
				// Seed compression: the nonce's tag, the share
				// expanded from the seed.
				out[i].tag, out[i].tagged, out[i].env = [mpc.ItemTagLen]byte(it.P0), true, nil
			}
		}
		own += len(out[i].env)
	}
	if own > 0 && 2*own < len(data) {
		for i := range out {
			out[i].env = bytes.Clone(out[i].env)
		}
	}
	return out
}

// itemID numbers the idx-th item of the stream message at sequence seq:
// increasing in the order the stream delivers them, as the high-water mark
// and the resynchronization need.
func itemID(seq uint64, idx int) uint64 { return seq<<8 | uint64(idx) }

// wireItem is an item id as the exchange, truncation and output payloads
// carry it: the stream sequence alone for a message's first item, as releases
// before multi-item messages sent it (so that such a party still pairs with
// this one while every message holds one item), and the id with the top bit
// set for the others. fromWire inverts it.
func wireItem(id uint64) uint64 {
	if id&0xff == 0 {
		return id >> 8
	}
	return id | 1<<63
}

func fromWire(v uint64) uint64 {
	if v&(1<<63) != 0 {
		return v &^ (1 << 63)
	}
	return v << 8
}

// decode opens and decodes the item once (material only reads what the
// set-up fixed before Consume started).
func (w *worker) decode(it *item) {
	if it.decoded {
		return
	}
	it.decoded = true
	if it.err == nil {
		it.mat = w.spareMaterial()
		if it.err = w.material(it.rawItem, &it.mat); it.err != nil {
			w.recycle(it.mat)
			it.mat = mpc.TickMaterial{}
		}
	}
	it.env = nil
}

// maxSpare bounds the spare materials a worker keeps: a tick needs the
// party's (begun), the staged item's and one being decoded.
const maxSpare = 2

// spareMaterial returns a material to decode an item into.
func (w *worker) spareMaterial() mpc.TickMaterial {
	if n := len(w.spare); n > 0 {
		m := w.spare[n-1]
		w.spare = w.spare[:n-1]
		return m
	}
	return mpc.TickMaterial{}
}

// recycle returns a material no one uses any more to the spares.
func (w *worker) recycle(m mpc.TickMaterial) {
	if m.Triple.V.Data != nil && len(w.spare) < maxSpare {
		w.spare = append(w.spare, m)
	}
}

// begin runs the party's Begin with the tick's material, which becomes the
// party's, and recycles the one it held before. A material Begin refuses is
// recycled at once (the party does not keep it).
func (w *worker) begin(y mpc.Matrix, mat mpc.TickMaterial) (mpc.MulMsg, error) {
	msg, err := w.p.Begin(y, mat)
	if err != nil {
		w.recycle(mat)
		return msg, err
	}
	w.recycle(w.begun)
	w.begun = mat
	return msg, nil
}

// consume starts the loop's offline consumer: its callback queues each
// stream message's raw items on w.items. stop ends it when the loop stops.
func (w *worker) consume(ctx context.Context) (stop func(), err error) {
	stream, err := w.s.js.Stream(ctx, bus.OfflineStream(w.loop))
	if err != nil {
		return nil, fmt.Errorf("offline stream: %w", err)
	}
	cons, err := stream.Consumer(ctx, bus.ConsumerName(w.id))
	if err != nil {
		return nil, fmt.Errorf("offline consumer: %w", err)
	}
	w.fromNewQueue(stream.CachedInfo().State.LastSeq)
	// The consumer acknowledges on delivery (see bus.EnsureOfflineQueue):
	// an item is consumed before this party can use it. The callback only
	// queues the raw item; it is opened and decoded by stageItem after a
	// tick, off the critical path, one per tick: decoding a whole pull batch
	// here would be a burst of work that delays every other loop's tick.
	// Each loop's consumer re-pulls after a different number of items, so
	// that the pull requests of many loops started together do not keep
	// arriving (and being answered) in the same instant.
	// A stream message holds up to w.perMsg items: the pull asks for as many
	// messages as make up the prefetch.
	pull := max(1, (w.s.opt.Prefetch+w.perMsg-1)/w.perMsg)
	// Room for two pulls, a stream message per element: the callback,
	// which only queues the message's raw items, rarely blocks. A full
	// buffer does block it, and with it further pulls: the flow control that
	// bounds the items a loop holds (up to about three times the prefetch).
	// Blocked, it is woken once per message the worker takes, not once per
	// item (per tick).
	items := make(chan []rawItem, 2*pull+1)
	w.mu.Lock()
	w.items = items
	w.mu.Unlock()
	// A callback blocked on a full buffer returns when the loop stops (a
	// fence stops one loop while the service runs on), not only with ctx.
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		batch := w.rawBatch(m)
		select {
		case items <- batch:
		case <-ctx.Done():
		case <-done:
		}
	}, jetstream.PullMaxMessages(pull), jetstream.PullThresholdMessages(pullThreshold(pull)), jetstream.PullExpiry(pullExpiry),
		jetstream.ConsumeErrHandler(w.consumeErrs(ctx, stream, cons.CachedInfo().Created, done)))
	if err != nil {
		return nil, fmt.Errorf("offline consume: %w", err)
	}
	return func() {
		cc.Stop()
		close(done)
	}, nil
}

// rawBatch is a stream message's raw items, as the consumer queues them. A
// message whose metadata cannot be read has no stream sequence: it is one
// item of id 0 that carries the error (malformed), refused when taken
// (takeItem). Before, it was discarded there as an item at or below the
// high-water mark, with no reject counted.
func (w *worker) rawBatch(m jetstream.Msg) []rawItem {
	meta, err := m.Metadata()
	if err != nil {
		return []rawItem{{err: fmt.Errorf("%w: offline stream message without its metadata: %v", codec.ErrMalformed, err)}}
	}
	return w.trimItems(m.Data(), meta.Sequence.Stream)
}

// fromNewQueue starts a restored loop from the first item of a queue that
// was deleted and set up again (`nats stream rm`, then the sensor) since its
// state record was written: the new queue numbers its items from 1 again, so
// a high-water mark beyond its last sequence (last) is the old queue's.
// Kept, every item up to it would be discarded, every tick missing until the
// dealers had published past it (at 25 Hz, 90,000 items an hour of the old
// queue's life). Within one stream an item taken is never beyond the last
// sequence. A broker that lies about it gains nothing: the item serials
// restored with the record still refuse an item used before.
func (w *worker) fromNewQueue(last uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hwm>>8 <= last {
		return
	}
	w.s.opt.Log.Warn("offline queue set up anew since the state record was written (its last sequence is below the last item taken): taking items from its start",
		"party", w.id, "loop", w.loop, "hwm", w.hwm>>8, "last_seq", last)
	w.hwm, w.minSeq, w.burn = 0, 0, 0
}

// errQueueRecreated: the loop's offline consumer was found under its name
// but created after the loop started consuming, as when the queue is
// deleted and set up again while the party runs.
var errQueueRecreated = errors.New("the offline consumer was created again since the loop started (the queue set up anew)")

// consumeErrs reports the offline consumer's errors, which the client
// otherwise drops: each error the first time and then once a minute. A
// deleted consumer (the queue removed, `nats stream rm` or `nats consumer
// rm`, while the party runs) ends the subscription for good: the loop would
// take no item again, every tick missing, so it stops with that error. The
// party is then not ready, and with no loop left Run returns, so that the
// party is restarted (and fails to start, saying why, until the sensor has
// set the queue up again). Before, the loop ran on without items and the
// party stayed ready.
func (w *worker) consumeErrs(ctx context.Context, stream jetstream.Stream, created time.Time, done chan struct{}) func(jetstream.ConsumeContext, error) {
	logs := bus.NewLogLimit()
	var checking atomic.Bool
	return func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrBadRequest) {
			w.consumerGone(err)
			return
		}
		// A consumer deleted while no pull was waiting shows as missed
		// heartbeats and pulls that no one answers: look it up, off the
		// client's goroutine, one look at a time, and again a little later
		// before believing it gone (a server recovering its state).
		if (errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders)) && checking.CompareAndSwap(false, true) {
			go func() {
				defer checking.Store(false)
				var cerr error
				for i := range 2 {
					if i > 0 {
						select {
						case <-done:
							return
						case <-time.After(consumerRecheck):
						}
					}
					cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					var c jetstream.Consumer
					c, cerr = stream.Consumer(cctx, bus.ConsumerName(w.id))
					cancel()
					if cerr == nil && !c.CachedInfo().Created.Equal(created) {
						// Pulls by its name would reach the new queue,
						// whose items (numbered from 1 again) are all at
						// or below the high-water mark. Restarted, the
						// party takes them from the start (fromNewQueue).
						cerr = errQueueRecreated
						break
					}
					if !consumerMissing(cerr) {
						return
					}
				}
				w.consumerGone(cerr)
			}()
		}
		ok, notLogged := logs.Allow(err.Error())
		if !ok {
			return
		}
		w.s.opt.Log.Warn("offline queue: consumer error", "party", w.id, "loop", w.loop, "err", err, "repeats_not_logged", notLogged)
	}
}

// consumerGone stops the loop whose offline consumer ended for good.
func (w *worker) consumerGone(err error) {
	w.stopWith(fmt.Errorf("offline queue: the loop's consumer %s ended (%w): restart the party once the sensor has set the queue up again", bus.ConsumerName(w.id), err))
}

// consumerMissing reports whether a lookup of the loop's offline consumer
// found it gone: the consumer, or its whole stream (`nats stream rm`, or a
// server restarted on memory storage), which the server reports as a
// stream not found. Before, only the first counted, so a stream deleted
// while no pull was waiting left the loop running with no item, every tick
// missing, and the party ready.
func consumerMissing(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// consumerRecheck is how long a loop waits to look its offline consumer up
// a second time when the first look did not find it.
var consumerRecheck = 2 * time.Second

// pullExpiry is how long a pull request of the offline consumer waits for
// items (jetstream's default; its heartbeats come at half of it, and two
// missed ones report a lost consumer). A variable for the tests.
var pullExpiry = 30 * time.Second

// pullThreshold is the pending count below which a loop's consumer asks
// for more items: spread over [prefetch/4, 3·prefetch/4] by a random draw,
// so that loops started together drift apart in when they pull.
func pullThreshold(prefetch int) int {
	lo, span := max(1, prefetch/4), max(1, prefetch/2)
	var b [2]byte
	_, _ = rand.Read(b[:])
	return min(prefetch, lo+int(binary.LittleEndian.Uint16(b[:]))%span)
}

// stageItem takes the next item off the queue's buffer, if one is there,
// decodes it and, with the fixed mask, precomputes its tick-independent
// product (mpc.Party.Prepare), so the next tick's critical path neither
// decodes nor computes half the product. The item is checked when nextItem
// uses it, as any other.
func (w *worker) stageItem() {
	if w.hasStaged {
		return
	}
	if r, ok := w.takeRaw(); ok {
		it := item{rawItem: r}
		w.decode(&it)
		if it.err == nil && w.prm.Variant == mpc.FixedMask && w.fixedOK {
			it.err = w.p.Prepare(&it.mat)
		}
		w.staged, w.hasStaged = it, true
	}
}

// nextItem takes the next usable item: the one pre-opened for the two-hop
// tick, else the next from the queue (takeItem), waiting for it on the
// worker's goroutine only: on the shared dispatcher (inline) a wait would
// hold every loop up, and the tick is handed over instead (handOver).
func (w *worker) nextItem(ctx context.Context) (uint64, codec.Serial, mpc.TickMaterial, error) {
	if seq, serial, mat, ok := w.takePre(); ok {
		return seq, serial, mat, nil
	}
	return w.takeItem(ctx, !w.inline)
}

var errNoItem = errors.New("party: no offline item available")

// takeItem takes the next usable item from the queue: consumed on delivery,
// never one at or below the high-water mark, never one below minSeq. Without
// wait it does not wait for one (errNoItem). It returns the item's id, its
// serial (checked: see itemSerials) and its material.
func (w *worker) takeItem(ctx context.Context, wait bool) (uint64, codec.Serial, mpc.TickMaterial, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var it item
		if w.hasStaged {
			it, w.staged, w.hasStaged = w.staged, item{}, false
		} else if r, ok := w.takeRaw(); ok {
			it = item{rawItem: r}
		} else {
			if !wait {
				return 0, codec.Serial{}, mpc.TickMaterial{}, errNoItem
			}
			if timer == nil {
				timer = time.NewTimer(w.s.opt.ItemWait)
			}
			select {
			case w.batch = <-w.items:
				continue
			case <-timer.C:
				return 0, codec.Serial{}, mpc.TickMaterial{}, errNoItem
			case <-ctx.Done():
				return 0, codec.Serial{}, mpc.TickMaterial{}, ctx.Err()
			}
		}
		if it.seq == 0 && it.err != nil {
			// Refused before it had an id (rawBatch): below every mark, it
			// would be discarded below as a copy, its reject never counted.
			w.recycle(it.mat)
			w.reject(it.err)
			w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Add(float64(max(1, it.items)))
			continue
		}
		if w.burn > 0 && it.seq > w.hwm && it.seq >= w.minSeq {
			// An item for a held measurement's tick given up (dropHeld):
			// marked taken, so the ordinary discard below drops it.
			w.burn--
			w.hwm = it.seq
		}
		if it.seq <= w.hwm || it.seq < w.minSeq {
			w.recycle(it.mat) // a staged item's: no one else has it
			w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Add(float64(max(1, it.items)))
			continue
		}
		w.hwm = it.seq
		w.decode(&it)
		if it.err == nil {
			// Only for an item that is then used, and with its nonce
			// checked against its sealed material (P0's seed-compressed
			// items have only the nonce: see itemSerials).
			if it.err = w.serials.take(it.nonce); it.err != nil && time.Since(w.serialLogged) >= 10*time.Second {
				// Each is counted (reject); a broker replaying a queue's
				// worth is logged once per 10 s.
				w.s.opt.Log.Warn("offline item refused", "party", w.id, "loop", w.loop, "item", it.seq, "err", it.err)
				w.serialLogged = time.Now()
			}
		}
		if it.err != nil {
			w.recycle(it.mat) // one Prepare refused
			if !errors.Is(it.err, errEarlierEpoch) {
				w.reject(it.err)
			}
			w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Add(float64(max(1, it.items)))
			continue
		}
		w.count(&w.ctrConsumed, w.s.opt.Metrics.ItemsConsumed)
		if w.persist != nil {
			// Its mark (hwm, serials) is stored before another item is
			// taken, whether or not its tick completes: a tick given up
			// writes no state of its own, and a party restarted from a
			// record without the marks of such ticks' items would take
			// copies of them (the broker may store a message again),
			// sending a second T = ξ - V under one V. After a completed
			// tick, or one given up between measurements, the deferred
			// write stores it (afterTick; miss); else the next tick's
			// start (flushState).
			w.persist.dirty = true
		}
		return it.seq, codec.Serial(it.nonce), it.mat, nil
	}
}

// material opens and decodes this party's material of an item into m.
func (w *worker) material(r rawItem, m *mpc.TickMaterial) error {
	if len(r.env) == 0 {
		if w.id != 0 {
			return fmt.Errorf("%w: item without party1 material", codec.ErrMalformed)
		}
		if w.p0Sealed {
			// Stripped on the way (the set-up's items are not compressed):
			// expanded, the genuine nonce would give material party1 does
			// not have, under a serial both agree on.
			return fmt.Errorf("%w: item without party0 material in a set-up without seed compression", codec.ErrMalformed)
		}
		// The nonce travels in the clear: checked by its tag before it is
		// expanded, and so before takeItem records it as used (a forged
		// one recorded would have the dealer's genuine items refused).
		if !r.tagged {
			return fmt.Errorf("%w: compressed offline item without its nonce's tag (from a dealer of an earlier release?)", codec.ErrVersion)
		}
		if !w.expander.CheckTag(r.nonce, r.tag) {
			return fmt.Errorf("%w: compressed offline item whose nonce %x does not match its tag (changed on the way)", codec.ErrAuth, r.nonce)
		}
		return w.expander.ExpandInto(r.nonce, m)
	}
	h, body, err := w.s.sealer.OpenScratch(&w.itemBuf, r.env)
	if err != nil {
		return err
	}
	if h.Kind != codec.KindMaterial || h.From != codec.RoleDealer || h.Loop != w.loop {
		return fmt.Errorf("%w: material envelope is %s from %s", codec.ErrHeader, h.Kind, h.From)
	}
	if h.Tick != w.epoch { // the dealer seals the set-up epoch as the tick
		return fmt.Errorf("%w: material of set-up epoch %d, want %d", codec.ErrHeader, h.Tick, w.epoch)
	}
	// mp's matrices alias w.itemBuf, until MaterialInto has decoded them.
	mp := &w.in.mat
	if err := codec.UnmarshalView(body, mp); err != nil {
		return err
	}
	if mp.Nonce != r.nonce {
		return fmt.Errorf("%w: sealed nonce differs from the item's", codec.ErrHeader)
	}
	return mp.MaterialInto(w.prm, m)
}

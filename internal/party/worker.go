package party

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

type stage uint8

const (
	idle       stage = iota
	begun            // sent our Protocol 1 message, waiting for the peer's
	multiplied       // P1 only: waiting for P0's Protocol 2 message
)

// maxPending bounds buffered early messages per kind.
const maxPending = 8

// worker runs one loop for one party. All protocol state is owned by the
// worker's goroutine; NATS callbacks only enqueue.
type worker struct {
	s    *Service
	loop string
	id   int
	peer codec.Role

	// mu guards all protocol state: the worker's goroutine and the
	// service's dispatcher (deliver) both run the state machine.
	mu sync.Mutex
	// inbox is the worker's own queue: messages the dispatcher could not
	// handle at once, in arrival order; queued counts them.
	inbox  chan *nats.Msg
	queued atomic.Int64
	live   atomic.Bool // in the event loop: the dispatcher may handle inline
	exited atomic.Bool
	stop   chan struct{}
	once   sync.Once
	// stopErr is why stop was closed (stopWith): ErrFenced, or why the
	// loop cannot go on.
	stopErr atomic.Pointer[error]
	// items carries the offline queue's stream messages, each as the
	// items it holds, from the consumer's callback (made before Consume
	// starts, under mu); batch is the rest of the message being used.
	items chan []rawItem
	batch []rawItem

	// Subjects, built once.
	subjPeer, subjOut, subjMeasure string
	subjExchange                   string // where the other party's messages come
	guard                          *codec.ReplayGuard
	ready                          atomic.Bool
	// Published copies for observers (tests, readiness).
	versionPub  atomic.Uint64
	restoredPub atomic.Bool
	incPub      atomic.Uint64
	peerIncPub  atomic.Uint64

	prm    mpc.Params
	p      *mpc.Party
	p0Seed [32]byte
	// p0Sealed: the set-up's items carry party0's share sealed (seed
	// compression off, codec.SetupPayload.P0Sealed); party 0 refuses an
	// item without it.
	p0Sealed bool
	epoch    uint64
	yBuf     mpc.Matrix

	// Fixed-mask set-up.
	ownS     mpc.Matrix
	peerS    mpc.Matrix // the other party's share that completed it
	fixedOK  bool
	lastPing time.Time

	// Tick state.
	cur uint64
	// measured: the highest tick of a measurement admitted since the
	// worker started (0: none yet), and when it rose; acceptPeer bounds
	// the other party's ticks by them (peerTickInRange).
	measured   uint64
	measuredAt time.Time
	st         stage
	item       uint64 // stream sequence of the item in use
	// itemSerial is that item's serial, which the tick's Protocol 1
	// exchange compares with the other party's (sameItem).
	itemSerial codec.Serial
	version    uint64 // state updates kept (a rollback takes one back)
	prev       mpc.Matrix
	hasPrev    bool
	hwm        uint64 // highest item id taken (itemID: stream sequence and index)
	minSeq     uint64 // item ids below this are discarded (resynchronization)
	// serials: the items taken in the epoch, by their dealer serials, so
	// that an item the broker delivers again is refused (itemSerials).
	serials      itemSerials
	serialBuf    []byte    // serials' encoding for the state record
	serialLogged time.Time // when a refused item was last logged
	gapLogged    time.Time // when a state gap no rollback mends was last logged
	perMsg       int       // most items in one stream message (set-up)

	persist *persister
	// inc is this instance's number (codec.MulPayload.Inc: the revision at
	// which it claimed the loop's state record; 0 without persistence), and
	// peerInc that of the other party's instance it works with, the latest
	// it has heard from (peerInstance).
	inc, peerInc uint64
	// afterQueued: the worker is in the service's afterQueue (under its mu).
	afterQueued bool
	// The mask share waiting for a state write (twohop.go, parkMask):
	// maskReady sealed, maskPark parked for a write, maskFree a spare.
	maskReady          *parkedMask
	maskPark, maskFree atomic.Pointer[parkedMask]
	// inAfter: the after queue's goroutine runs this worker's deferred
	// work, and what it sends joins that batch's (Service.sendAfter).
	inAfter bool
	// lastTrunc is when P0 last sent (or held) its Protocol 2 message
	// (sendTrunc).
	lastTrunc time.Time
	// sub is the loop's subscription, and dropped the messages it had
	// dropped when last counted (housekeep).
	sub     *nats.Subscription
	dropped int
	// staged is the next offline item, taken and prepared by afterTick.
	staged    item
	hasStaged bool
	// Items are decoded into recycled materials (mpc.TickMaterial.Recycle):
	// begun is the one the party holds since its latest Begin (it is the
	// party's until the next), spare the ones free to decode into.
	begun    mpc.TickMaterial
	spare    []mpc.TickMaterial
	restored bool
	fenced   bool
	// stopped: the loop's last write is done (lastWrite). Nothing is
	// handled after it, by the dispatcher (which delivers until run has
	// returned) or the after queue: a tick then would change the state, and
	// take an item, with no write left to store them.
	stopped bool

	// A measurement that arrived while the previous tick was open, held
	// until that tick ends (hold, release): its tick, and its share in
	// heldY (swapped with yBuf). curHeld: the open tick started from a
	// held measurement (it is not held for again). releaseQueued: releaseMsg
	// is in the inbox. inline: handle runs on the dispatcher (deliver).
	held, curHeld, releaseQueued, inline bool
	heldT                                uint64
	// heldFromHold: the held measurement's tick starts as a held one's
	// (curHeld); false for one handed over (handOver) that was not.
	heldFromHold bool
	// The sensor's stamps (SentUnixNano) of the measurement in yBuf
	// (ySent), of the held one (heldSent), and of the open tick's (sent),
	// which its output share carries to the actuator.
	ySent, heldSent, sent int64
	// burn: items to discard before the next one used, one per held
	// measurement given up (dropHeld), whose tick took none: the peer
	// took one for that tick, and the parties' items stay paired.
	burn int
	// missWrite: the after queue's run for this worker is a given-up
	// tick's, to write the item it took (miss), not a completed tick's.
	missWrite bool
	heldY     mpc.Matrix

	prevPending mpc.Matrix
	// prevSpare is a state buffer free for the next tick's prev.
	prevSpare mpc.Matrix
	// mulT, mulS: the peer's last Protocol 1 message, decoded in place
	// (decodeMul); pendMul holds copies.
	mulT, mulS mpc.Matrix
	pendMul    map[uint64]peerMul
	pendTrunc  map[uint64]peerTrunc

	// Buffers reused from message to message (all under mu): the payload
	// and the envelope being sent (nats.Conn.Publish copies the data), and
	// the plaintext of the message and of the item being opened (each
	// payload is decoded into copies before the buffer is used again).
	bodyBuf, envBuf, openBuf, itemBuf []byte
	// wireBuf holds the encoded matrices of the message being built
	// (codec.AppendMatrix); send marshals them into bodyBuf at once.
	wireBuf []byte
	// peeked holds the items of the stream message trimItems is taking
	// apart (in the offline consumer's callback only).
	peeked []codec.ItemMsg
	// in and out hold the payloads being decoded and sent, so that none is
	// moved to the heap for each message, as a payload handed to the codec
	// as an interface would be. Each is set in full before it is used, and
	// not used after the message: a decoded one aliases openBuf or itemBuf
	// (codec.UnmarshalView), a sent one wireBuf.
	in struct {
		measure codec.MeasurePayload
		masked  codec.MeasureMaskedPayload
		mul     codec.MulPayload
		trunc   codec.TruncPayload
		mat     codec.MaterialPayload
	}
	out struct {
		mul   codec.MulPayload
		maskY codec.MaskYPayload
		out   codec.OutputPayload
		trunc codec.TruncPayload
	}
	// The two-hop tick (twohop.go): this party's pre-opening of the next
	// item, the other party's, the sensor's T_y being handled, the other
	// party's T as this party builds it, and this party's Protocol 1
	// message of a tick run in two hops.
	pre     preOpen
	peerPre peerPre
	// sharesRun counts the sensor's measurements in a row that came as
	// shares although this party had announced its mask share for them
	// (twoHopBackoff).
	sharesRun int
	tyBuf     mpc.Matrix
	peerT     mpc.Matrix
	reply     pendingReply
	subjMaskY string
	// expander regenerates P0's compressed items (party 0).
	expander *mpc.Expander
	// The per-tick counters of this loop, looked up on first use.
	ctrTicks, ctrConsumed, ctrPrepared, ctrHeld prometheus.Counter
	ctrTwoHop, ctrFallback                      prometheus.Counter
}

// countPath increments the loop's duet_tick_paths_total for path, looking
// it up once.
func (w *worker) countPath(c *prometheus.Counter, path string) {
	if *c == nil {
		*c = w.s.opt.Metrics.TickPaths.WithLabelValues(w.loop, path)
	}
	(*c).Inc()
}

// count increments the loop's counter *c of vec, looking it up once.
func (w *worker) count(c *prometheus.Counter, vec *prometheus.CounterVec) {
	if *c == nil {
		*c = vec.WithLabelValues(w.loop)
	}
	(*c).Inc()
}

// zeroMetrics exports the loop's counters at 0 from the start
// (metrics.Zero).
func (w *worker) zeroMetrics() {
	m := w.s.opt.Metrics
	metrics.Zero([]string{w.loop}, m.Ticks, m.Misses, m.Held, m.ItemsConsumed, m.ItemsPrepared, m.ItemsDiscarded, m.LowWater)
	for _, r := range AbandonReasons {
		metrics.Zero([]string{w.loop, r}, m.Abandoned)
	}
	for _, k := range metrics.MismatchKinds {
		metrics.Zero([]string{w.loop, k}, m.Mismatches)
	}
	if w.s.opt.TwoHop {
		for _, p := range []string{metrics.PathTwoHop, metrics.PathFallback} {
			metrics.Zero([]string{w.loop, p}, m.TickPaths)
		}
	}
}

func newWorker(s *Service, loop string) *worker {
	return &worker{
		s: s, loop: loop, id: s.opt.ID, peer: codec.PartyRole(1 - s.opt.ID),
		inbox:        make(chan *nats.Msg, 1024),
		stop:         make(chan struct{}),
		subjPeer:     bus.ExchangeSubject(loop, 1-s.opt.ID),
		subjMeasure:  bus.MeasureSubject(loop, s.opt.ID),
		subjExchange: bus.ExchangeSubject(loop, s.opt.ID),
		subjOut:      bus.OutputSubject(loop),
		subjMaskY:    bus.MaskYSubject(loop),
		guard:        codec.NewReplayGuard(),
		pendMul:      map[uint64]peerMul{},
		pendTrunc:    map[uint64]peerTrunc{},
	}
}

func (w *worker) run(ctx context.Context) error {
	// Marked exited however run ends, a failed start included: the
	// dispatcher then drops the loop's messages instead of queueing them
	// (and counting overload) for a worker that never reads them.
	defer w.exit()
	w.zeroMetrics()
	if err := w.setup(ctx); err != nil {
		return err
	}
	if err := w.openPersister(ctx); err != nil {
		return err
	}
	if err := w.restore(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	w.onVersion(false) // the version the loop starts from: restored, or 0
	w.mu.Unlock()
	// One subscription for the sensor's and the other party's messages keeps
	// their arrival order. P0 sends its Protocol 2 message Trunc(t) right
	// after its output share (the state rows it needs are computed in
	// between, off the tick's critical path), ahead of any later message of
	// its own on the same connection. A masked measurement of t+1 is
	// causally after Trunc(t): P1 sends its mask share for t+1 only once
	// its tick t has ended. A three-hop Measure(t+1) comes on the sensor's
	// own schedule; should it still overtake Trunc(t) (P0 frozen between
	// the two messages while the plant and the sensor went on), P1 holds it
	// until the tick ends (hold), as after any late tick.
	// Every loop's subscription feeds the service's one channel, read by
	// its dispatcher (see deliver): the connection's reader hands each
	// message straight to it, and while it is busy no further goroutine is
	// woken per message. A full channel drops the message (nats.go's slow
	// consumer rule); the drops are counted as "overload" rejects.
	sub, err := w.s.nc.ChanSubscribe(bus.PartyInbox(w.loop, w.id), w.s.inbox)
	if err != nil {
		return err
	}
	defer func() {
		// The drops since the last housekeeping are counted too: after
		// Unsubscribe the subscription no longer says.
		w.mu.Lock()
		w.s.countDropped(sub, &w.dropped)
		w.mu.Unlock()
		sub.Unsubscribe()
	}()
	w.mu.Lock()
	w.sub = sub
	w.mu.Unlock()

	stopConsume, err := w.consume(ctx)
	if err != nil {
		return err
	}
	defer stopConsume()

	w.mu.Lock()
	if w.prm.Variant == mpc.FixedMask {
		w.sendFixedS(true)
	} else if w.inc != 0 {
		w.announce()
	}
	w.ready.Store(w.prm.Variant == mpc.PerTick)
	w.mu.Unlock()
	w.live.Store(true)
	// locked runs f under the worker's lock and reports a fence.
	locked := func(f func()) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		f()
		return w.fenced
	}
	for {
		select {
		case <-ctx.Done():
			w.lastWrite()
			return nil
		case <-w.stop:
			err := *w.stopErr.Load() // stored before stop closed (stopWith)
			if !errors.Is(err, ErrFenced) {
				// Its offline consumer gone, or any reason but a fence
				// (another instance holds the record: this one must not
				// write), the loop stores what its last tick left for
				// the after queue, which skips a loop that has exited.
				w.lastWrite()
			}
			return err
		case m := <-w.inbox:
			if locked(func() { w.handle(ctx, m); w.queued.Add(-1) }) {
				return ErrFenced
			}
		}
	}
}

// housekeep is the worker's periodic work (Service.housekeep): it counts
// the messages its subscription dropped, and in the fixed-mask variant sends
// its set-up share again until the other party has it.
func (w *worker) housekeep() {
	if !w.live.Load() { // before the event loop, or after exit
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.countDropped(w.sub, &w.dropped) // sub is set before live
	if w.prm.Variant == mpc.FixedMask && !w.fixedOK {
		w.sendFixedS(true)
	}
}

// stopWith stops the loop with err as Run's reason for it, from any
// goroutine; the first reason stands.
func (w *worker) stopWith(err error) {
	w.once.Do(func() {
		w.stopErr.Store(&err)
		close(w.stop)
	})
}

// lastWrite stores, as the loop stops (at a shutdown, or for any reason
// but a fence: run), the state a tick left for its deferred write
// (Options.PersistDelay), which the after queue no longer starts (it stops
// with the service, and skips a loop that has exited), and waits for a
// write in flight: restarted, the party is then not an update behind the
// other (which would roll back, a miss and the update lost).
// It marks the loop stopped under the same lock (handle, deferred), so that
// no tick starts after the write.
func (w *worker) lastWrite() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.persist == nil || w.fenced {
		return
	}
	// Not one deadline for both: the wait for a write in flight and the
	// write after it are each bounded (saveTimeout).
	if !w.flushState(context.Background()) {
		w.s.opt.Log.Warn("stopping: the latest state was not persisted", "party", w.id, "loop", w.loop, "version", w.version)
	}
}

// exit marks the worker stopped: the dispatcher drops its messages, and
// the service is no longer ready (a fenced loop is not served).
func (w *worker) exit() {
	w.live.Store(false)
	w.ready.Store(false)
	w.exited.Store(true)
}

// deliver is the dispatcher's part (Service.dispatch, one goroutine for
// all loops). It runs the state machine at once, on the dispatcher's
// goroutine, when that cannot block: no earlier message of this loop is
// waiting, the worker's goroutine is not inside a step, and, for a
// measurement, the previous state write is acknowledged and an item seems
// at hand (canInline; a tick that finds none after all does not wait for
// one there, but is handed over: handOver). Anything else goes to the
// worker's own queue, in order, for its goroutine, which may wait (for an
// item, for a write's acknowledgement).
// Under load the dispatcher handles message after message without waking
// a goroutine for each.
func (w *worker) deliver(ctx context.Context, m *nats.Msg) {
	if w.deliverInline(ctx, m) {
		w.enqueue(m)
	}
}

// deliverInline is deliver up to the queue: it handles m at once if it can
// (or drops it, if the worker has exited) and reports whether m is to be
// queued instead, in which case it has counted it in w.queued and the
// caller must enqueue it. m does not escape: a caller with a message only
// to hand over may pass one on its stack, and allocate only to enqueue.
func (w *worker) deliverInline(ctx context.Context, m *nats.Msg) (queue bool) {
	if w.exited.Load() {
		return false
	}
	if w.live.Load() && w.queued.Load() == 0 && w.mu.TryLock() {
		if w.queued.Load() == 0 && w.canInline(m.Subject) {
			w.inline = true
			w.handle(ctx, m)
			w.inline = false
			fenced := w.fenced
			w.mu.Unlock()
			if fenced {
				w.stopWith(ErrFenced)
			}
			return false
		}
		w.queued.Add(1)
		w.mu.Unlock()
	} else {
		w.queued.Add(1)
	}
	return true
}

// enqueue queues m for the worker's event loop, counted in w.queued by
// deliverInline; a full queue drops it (overload).
func (w *worker) enqueue(m *nats.Msg) {
	select {
	case w.inbox <- m:
	default:
		w.queued.Add(-1)
		w.s.opt.Metrics.Rejects.WithLabelValues("overload").Inc()
	}
}

// canInline reports whether a message on subject is to be handled on the
// dispatcher (under w.mu). Only a measurement may wait: the tick it starts
// waits for the previous state write and for an offline item. The write is
// checked in full; the items only at a glance (a staged item may be a copy
// its serial refuses, a queued message junk, a pre-opened item dropped for
// a gap in the ticks): a tick on the dispatcher takes an item without
// waiting (nextItem), and, finding none, hands the measurement over to the
// worker's goroutine (handOver). The glance spares that detour when no item
// can be at hand.
func (w *worker) canInline(subject string) bool {
	if subject != w.subjMeasure {
		return true
	}
	if p := w.persist; p != nil {
		if p.inflight {
			if !p.poll() || p.res.err != nil { // an error waits for resolve
				return false
			}
			p.acked(p.res.seq)
		}
		if p.dirty {
			return false
		}
	}
	if w.burn > 0 {
		return false // the next usable item is discarded first
	}
	if w.pre.ok && w.pre.seq >= w.minSeq || w.hasStaged && w.usable(w.staged.rawItem) {
		return true
	}
	// The batch's items are in order: its last tells whether any is usable.
	// One that holds none (a resynchronization has moved minSeq past them)
	// would have the tick handed over to the worker's goroutine once the
	// dispatcher had discarded them.
	if n := len(w.batch); n > 0 {
		return w.usable(w.batch[n-1])
	}
	return len(w.items) > 0
}

// usable reports whether r can be taken: not at or below the high-water
// mark, not below minSeq, not refused on arrival.
func (w *worker) usable(r rawItem) bool {
	return r.err == nil && r.seq > w.hwm && r.seq >= w.minSeq
}

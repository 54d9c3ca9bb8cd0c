package party

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/duet-mpc/duet/internal/bus"
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
	epoch  uint64
	yBuf   mpc.Matrix

	// Fixed-mask set-up.
	ownS     mpc.Matrix
	peerS    mpc.Matrix // the other party's share that completed it
	fixedOK  bool
	lastPing time.Time

	// Tick state.
	cur     uint64
	st      stage
	item    uint64 // stream sequence of the item in use
	version uint64 // number of state updates completed
	prev    mpc.Matrix
	hasPrev bool
	hwm     uint64 // highest item id taken (itemID: stream sequence and index)
	minSeq  uint64 // item ids below this are discarded (resynchronization)
	// serials: the items taken in the epoch, by their dealer serials, so
	// that an item the broker delivers again is refused (itemSerials).
	serials      itemSerials
	serialBuf    []byte    // serials' encoding for the state record
	serialLogged time.Time // when a refused item was last logged
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

	// A measurement that arrived while the previous tick was open, held
	// until that tick ends (hold, release): its tick, and its share in
	// heldY (swapped with yBuf). curHeld: the open tick started from a
	// held measurement (it is not held for again). releaseQueued: releaseMsg
	// is in the inbox. inline: handle runs on the dispatcher (deliver).
	held, curHeld, releaseQueued, inline bool
	heldT                                uint64
	// The sensor's stamps (SentUnixNano) of the measurement in yBuf
	// (ySent), of the held one (heldSent), and of the open tick's (sent),
	// which its output share carries to the actuator.
	ySent, heldSent, sent int64
	// burn: items to discard before the next one used, one per held
	// measurement given up (dropHeld), whose tick took none: the peer
	// took one for that tick, and the parties' items stay paired.
	burn  int
	heldY mpc.Matrix

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
	if err := w.setup(ctx); err != nil {
		return err
	}
	if err := w.openPersister(ctx); err != nil {
		return err
	}
	if err := w.restore(ctx); err != nil {
		return err
	}
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
	defer w.exit()
	sub, err := w.s.nc.ChanSubscribe(bus.PartyInbox(w.loop, w.id), w.s.inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	w.mu.Lock()
	w.sub = sub
	w.mu.Unlock()

	stream, err := w.s.js.Stream(ctx, bus.OfflineStream(w.loop))
	if err != nil {
		return fmt.Errorf("offline stream: %w", err)
	}
	cons, err := stream.Consumer(ctx, bus.ConsumerName(w.id))
	if err != nil {
		return fmt.Errorf("offline consumer: %w", err)
	}
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
	// A callback blocked on a full buffer returns when the loop does (a
	// fence stops one loop while the service runs on).
	done := make(chan struct{})
	defer close(done)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var batch []rawItem
		if meta, err := m.Metadata(); err != nil {
			batch = []rawItem{{err: err}}
		} else {
			batch = w.trimItems(m.Data(), meta.Sequence.Stream)
		}
		select {
		case items <- batch:
		case <-ctx.Done():
		case <-done:
		}
	}, jetstream.PullMaxMessages(pull), jetstream.PullThresholdMessages(pullThreshold(pull)))
	if err != nil {
		return fmt.Errorf("offline consume: %w", err)
	}
	defer cc.Stop()

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
			return nil
		case <-w.stop:
			return ErrFenced
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
	if d, err := w.sub.Dropped(); err == nil && d > w.dropped { // sub is set before live
		w.s.opt.Metrics.Rejects.WithLabelValues("overload").Add(float64(d - w.dropped))
		w.dropped = d
	}
	if w.prm.Variant == mpc.FixedMask && !w.fixedOK {
		w.sendFixedS(true)
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
// measurement, the previous state write is acknowledged and an item is at
// hand. Anything else goes to the worker's own queue, in order, for its
// goroutine, which may wait (for an item, for a write's acknowledgement).
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
				w.once.Do(func() { close(w.stop) })
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

// canInline reports whether handling a message on subject cannot block
// (under w.mu). Only a measurement can: the tick it starts waits for the
// previous state write and for an offline item.
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
	if w.pre.ok || w.hasStaged && w.staged.seq > w.hwm && w.staged.seq >= w.minSeq {
		return true
	}
	return len(w.batch) > 0 || len(w.items) > 0
}

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

// setup waits for the sensor's sealed set-up record and builds the party.
func (w *worker) setup(ctx context.Context) error {
	kv, err := bus.WaitSetupBucket(ctx, w.s.js, w.s.opt.Log)
	if err != nil {
		return err
	}
	key := bus.SetupKey(w.loop, codec.PartyRole(w.id))
	for {
		e, err := kv.Get(ctx, key)
		if err == nil {
			if err := w.applySetup(e.Value()); err != nil {
				w.s.opt.Metrics.Reject(err)
				w.s.opt.Log.Error("set-up record rejected", "loop", w.loop, "err", err)
			} else {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *worker) applySetup(data []byte) error {
	sp, prm, err := codec.OpenSetup(w.s.sealer, data, w.loop)
	if err != nil {
		return err
	}
	r, c := prm.PhiShape()
	phi, err := sp.Phi.Decode(prm.Field, r, c)
	if err != nil {
		return fmt.Errorf("Φ share: %w", err)
	}
	x0, err := sp.X0.Decode(prm.Field, prm.N, 1)
	if err != nil {
		return fmt.Errorf("x0 share: %w", err)
	}
	p, err := mpc.NewParty(prm, w.id, phi, x0)
	if err != nil {
		return err
	}
	if w.id == 0 {
		if len(sp.P0Seed) != 32 {
			return fmt.Errorf("%w: P0 seed has %d bytes, want 32", codec.ErrMalformed, len(sp.P0Seed))
		}
		copy(w.p0Seed[:], sp.P0Seed)
		w.expander = mpc.NewExpander(prm, w.p0Seed)
	}
	if prm.Variant == mpc.FixedMask {
		var u mpc.Matrix
		if w.id == 0 {
			u, err = mpc.FixedUShare0(prm, w.p0Seed)
		} else {
			u, err = sp.FixedU.Decode(prm.Field, r, c)
		}
		if err != nil {
			return fmt.Errorf("fixed U share: %w", err)
		}
		if w.ownS, err = p.FixedSetupMsg(u); err != nil {
			return err
		}
	}
	w.prm, w.p, w.epoch, w.perMsg = prm, p, sp.Epoch, max(1, sp.ItemsPerMsg)
	w.yBuf = mpc.NewMatrix(prm.P, 1)
	w.s.opt.Log.Info("set-up loaded", "party", w.id, "loop", w.loop, "epoch", sp.Epoch,
		"n", prm.N, "m", prm.M, "p", prm.P, "modulus", prm.Field.Name(), "mask", prm.Variant.String())
	return nil
}

// sendFixedS sends [[S]]_i of the fixed-mask set-up as a tick-0 KindMul
// message; Item 0 asks the peer to answer with its own, Item 1 does not.
func (w *worker) sendFixedS(ask bool) {
	item := uint64(1)
	if ask {
		item = 0
	}
	// Version carries the set-up epoch: the share is the same every time
	// within one, and a share of another epoch (a replay) is refused.
	w.out.mul = codec.MulPayload{Item: item, Version: w.epoch, S: codec.PutMatrix(w.prm.Field, w.ownS), Inc: w.inc, Peer: w.peerInc}
	w.send(codec.KindMul, 0, &w.out.mul)
}

// announce tells the other party, as this instance starts, which instance
// it is (a tick-0 KindMul with no matrices, in the per-tick variant; the
// fixed-mask set-up's S share does it in the other): the other party then
// works with it from then on, before this instance sends anything computed
// from an item, and the messages of an earlier instance still running are
// refused from that moment (peerInstance). Without it, in the two-hop
// tick, the other party could go on completing ticks with the earlier
// instance's pre-openings until this one's first message.
func (w *worker) announce() {
	w.out.mul = codec.MulPayload{Version: w.epoch, Inc: w.inc, Peer: w.peerInc}
	w.send(codec.KindMul, 0, &w.out.mul)
}

// send seals and publishes payload, a pointer to one of w.out's payloads
// (or to any other payload type).
func (w *worker) send(kind codec.Kind, tick uint64, payload any) {
	to, subj, env, ok := w.seal(kind, tick, payload, w.envBuf[:0])
	if !ok {
		return
	}
	var err error
	w.envBuf = env
	if w.inAfter && w.s.opt.PeerBatch > 1 {
		err = w.s.sendAfter(w.loop, to == w.peer, subj, env)
	} else if to != w.peer {
		err = w.s.publish(subj, env)
	} else {
		err = w.s.sendPeer(w.loop, subj, env)
	}
	if err != nil {
		w.s.opt.Log.Warn("publish", "subject", subj, "err", err)
	}
}

// seal marshals payload and seals it, appended to into, for the recipient
// of kind on this loop; false if it could not (logged).
func (w *worker) seal(kind codec.Kind, tick uint64, payload any, into []byte) (to codec.Role, subj string, env []byte, ok bool) {
	body, err := codec.MarshalAppend(w.bodyBuf[:0], payload)
	if err != nil {
		w.s.opt.Log.Error("marshal", "err", err)
		return to, subj, into, false
	}
	w.bodyBuf = body
	to, subj = w.peer, w.subjPeer
	switch kind {
	case codec.KindOutput:
		to, subj = codec.RoleActuator, w.subjOut
	case codec.KindMaskY:
		to, subj = codec.RoleSensor, w.subjMaskY
	}
	env, err = w.s.sealer.SealAppend(into, codec.Header{Kind: kind, Loop: w.loop, Tick: tick, From: w.s.sealer.Self(), To: to}, body)
	if err != nil {
		w.s.opt.Log.Error("seal", "err", err)
		return to, subj, into, false
	}
	return to, subj, env, true
}

func (w *worker) reject(err error) {
	w.s.opt.Metrics.Reject(err)
	w.s.opt.Log.Debug("message rejected", "party", w.id, "loop", w.loop, "err", err)
}

// handle runs the state machine on one inbound message (or releaseMsg),
// then starts a held measurement's tick if the open tick has ended.
func (w *worker) handle(ctx context.Context, m *nats.Msg) {
	if w.fenced { // the loop is stopping: nothing more is handled
		return
	}
	if m == releaseMsg {
		w.releaseQueued = false
	} else {
		w.handleMsg(ctx, m)
	}
	if w.held {
		w.release(ctx)
	}
}

// handleMsg opens and dispatches one inbound message.
func (w *worker) handleMsg(ctx context.Context, m *nats.Msg) {
	h, body, err := w.s.sealer.OpenScratch(&w.openBuf, m.Data)
	if err != nil {
		w.reject(err)
		return
	}
	if h.Loop != w.loop {
		w.reject(fmt.Errorf("%w: loop %q on loop %q's subject", codec.ErrHeader, h.Loop, w.loop))
		return
	}
	switch {
	case h.Kind == codec.KindMeasure && h.From == codec.RoleSensor:
		mp := &w.in.measure
		if err := w.accept(h, body, mp, func() error { return mp.Y.DecodeInto(w.prm.Field, w.yBuf) }); err != nil {
			return
		}
		w.noteShares(h.Tick)
		w.ySent = mp.SentUnixNano
		w.onMeasure(ctx, h.Tick, false)
	case h.Kind == codec.KindMeasureMasked && h.From == codec.RoleSensor:
		mp := &w.in.masked
		var item uint64
		if err := w.accept(h, body, mp, func() error {
			item = fromWire(mp.Item)
			w.tyBuf = sized(w.tyBuf, w.prm.P, 1)
			return mp.T.DecodeInto(w.prm.Field, w.tyBuf)
		}); err != nil {
			return
		}
		w.ySent = mp.SentUnixNano
		w.onMeasureMasked(ctx, h.Tick, item)
	case h.Kind == codec.KindPreT && h.From == w.peer:
		mp := &w.in.mul
		if err := w.acceptPeer(h, body, mp, &mp.Inc, &mp.Peer, func() error { return w.decodePreT(*mp) }); err != nil {
			return
		}
	case h.Kind == codec.KindMul && h.From == w.peer && h.Tick == 0:
		// A new instance's first message (announce): the fixed-mask
		// set-up's S share, or in the per-tick variant an announcement.
		var mp codec.MulPayload
		if err := codec.Unmarshal(body, &mp); err != nil {
			w.reject(err)
			return
		}
		if w.prm.Variant == mpc.PerTick {
			w.onAnnounce(mp)
			return
		}
		// One of another set-up epoch (a replay) is not taken for an
		// instance (onFixedS refuses it).
		if mp.Version == w.epoch {
			if err := w.peerInstance(mp.Inc, mp.Peer); err != nil {
				return
			}
		}
		w.onFixedS(mp)
	case h.Kind == codec.KindMul && h.From == w.peer:
		mp := &w.in.mul
		var in peerMul
		if err := w.acceptPeer(h, body, mp, &mp.Inc, &mp.Peer, func() (err error) { in, err = w.decodeMul(*mp); return }); err != nil {
			return
		}
		w.onMul(h.Tick, in)
	case h.Kind == codec.KindTrunc && h.From == codec.RoleParty0 && w.id == 1:
		tp := &w.in.trunc
		var in peerTrunc
		if err := w.acceptPeer(h, body, tp, &tp.Inc, &tp.Peer, func() (err error) {
			in.item = fromWire(tp.Item)
			in.y, err = tp.Y.Decode(w.prm.Field, w.prm.N, 1)
			return
		}); err != nil {
			return
		}
		w.onTrunc(h.Tick, in)
	default:
		w.reject(fmt.Errorf("%w: %s from %s is not accepted by %s", codec.ErrKind, h.Kind, h.From, w.s.sealer.Self()))
	}
}

// accept applies replay protection, decodes the payload and validates it;
// only a message that passes everything advances the replay guard, so a
// well-sealed but malformed message cannot move the expected tick. v's
// matrices may alias body (w.openBuf; codec.UnmarshalView): validate
// decodes them, and v is not kept.
func (w *worker) accept(h codec.Header, body []byte, v any, validate func() error) error {
	if err := w.guard.AdmitView(h, body, v, validate); err != nil {
		w.reject(err)
		return err
	}
	return nil
}

// acceptPeer is accept for a message of the other party, whose instance
// fields inc and peer (pointing into v) are checked (peerInstance) once v
// is decoded and before the message's freshness is: a new instance of the
// other party is heard even from a message whose tick an earlier
// instance's message has taken, or of an earlier tick (a restored instance
// pre-opens with the tick it restored, which the other party may be past).
func (w *worker) acceptPeer(h codec.Header, body []byte, v any, inc, peer *uint64, validate func() error) error {
	if err := codec.UnmarshalView(body, v); err != nil {
		w.reject(err)
		return err
	}
	if err := w.peerInstance(*inc, *peer); err != nil {
		return err
	}
	if err := w.guard.AdmitDecoded(h, validate); err != nil {
		w.reject(err)
		return err
	}
	return nil
}

// peerInstance checks the instance fields of a message of the other party
// (codec.MulPayload.Inc and Peer), which is authenticated but not yet
// checked for freshness. Two instances of one party may overlap (a
// rolling restart, a second replica by mistake): the later one restores
// the state record and claims it, and the earlier one learns it is fenced
// only when its next write fails; until then both would answer the other
// party, take different items and leave the loop's shares diverged. So
// the other party decides: it works with the latest instance it has heard
// from, refuses the messages of earlier ones (ErrInstance), and names the
// instance it works with in each of its messages, which stops an earlier
// instance at the first one it receives.
func (w *worker) peerInstance(inc, peer uint64) error {
	if peer > w.inc {
		w.fenced = true
		w.s.opt.Log.Error("stopping loop: the other party works with a later instance of this party (two instances overlapped, or the state bucket was recreated: restart both parties)",
			"party", w.id, "loop", w.loop, "instance", w.inc, "peer_works_with", peer)
		return ErrFenced
	}
	switch {
	case inc < w.peerInc:
		err := fmt.Errorf("%w: %s instance %d, this loop works with its instance %d", codec.ErrInstance, w.peer, inc, w.peerInc)
		w.reject(err)
		return err
	case inc > w.peerInc:
		if w.peerInc != 0 {
			w.s.opt.Log.Warn("the other party is a new instance: working with it", "party", w.id, "loop", w.loop, "from", w.peerInc, "to", inc)
		}
		// What an earlier instance sent ahead is not this one's.
		clear(w.pendMul)
		clear(w.pendTrunc)
		w.peerPre.ok = false
		w.peerInc = inc
		w.peerIncPub.Store(inc)
	}
	return nil
}

// onAnnounce takes the other party's announcement of a new instance
// (announce) in the per-tick variant.
func (w *worker) onAnnounce(mp codec.MulPayload) {
	if len(mp.S.Data) != 0 || len(mp.T.Data) != 0 || mp.S.Rows|mp.S.Cols|mp.T.Rows|mp.T.Cols != 0 {
		w.reject(fmt.Errorf("%w: a tick-0 announcement carries matrices", codec.ErrDimension))
		return
	}
	if mp.Version != w.epoch {
		w.reject(fmt.Errorf("%w: instance announcement of set-up epoch %d, want %d", codec.ErrReplay, mp.Version, w.epoch))
		return
	}
	_ = w.peerInstance(mp.Inc, mp.Peer)
}

// onFixedS completes the fixed-mask set-up with the other party's share of
// S (its tick-0 KindMul, which the replay guard does not cover: it may come
// again, as an answer or a request). A share of another set-up epoch is
// refused, and once the set-up is complete a different share is too, so a
// replayed message cannot change the opened S under a running loop.
func (w *worker) onFixedS(mp codec.MulPayload) {
	if mp.Version != w.epoch {
		w.reject(fmt.Errorf("%w: fixed-mask S share of set-up epoch %d, want %d (a party of an earlier release sends 0: upgrade both)", codec.ErrReplay, mp.Version, w.epoch))
		return
	}
	r, c := w.prm.PhiShape()
	s, err := mp.S.Decode(w.prm.Field, r, c)
	if err != nil {
		w.reject(err)
		return
	}
	if w.fixedOK {
		if !slices.Equal(s.Data, w.peerS.Data) {
			w.reject(fmt.Errorf("%w: a second, different fixed-mask S share in set-up epoch %d", codec.ErrReplay, w.epoch))
			return
		}
	} else {
		if err := w.p.FixedSetupFinish(w.ownS, s); err != nil {
			w.reject(err)
			return
		}
		w.peerS = s
		w.s.opt.Log.Info("fixed-mask set-up complete", "party", w.id, "loop", w.loop)
	}
	w.fixedOK = true
	w.ready.Store(true)
	if mp.Item == 0 {
		w.sendFixedS(false)
	}
}

// peerMul is a decoded, validated Protocol 1 message from the other party.
type peerMul struct {
	item, version uint64
	msg           mpc.MulMsg
}

// peerTrunc is a decoded, validated Protocol 2 message from P0.
type peerTrunc struct {
	item uint64
	y    mpc.Matrix
}

// decodeMul decodes the peer's Protocol 1 message into the worker's own
// matrices (mulT, mulS), which the next message overwrites: onMul uses them
// at once or keeps a copy.
func (w *worker) decodeMul(mp codec.MulPayload) (peerMul, error) {
	in := peerMul{item: fromWire(mp.Item), version: mp.Version}
	r, c := w.prm.PhiShape()
	w.mulT = sized(w.mulT, c, 1)
	if err := mp.T.DecodeInto(w.prm.Field, w.mulT); err != nil {
		return in, err
	}
	in.msg.T = w.mulT
	if w.prm.Variant == mpc.PerTick {
		w.mulS = sized(w.mulS, r, c)
		if err := mp.S.DecodeInto(w.prm.Field, w.mulS); err != nil {
			return in, err
		}
		in.msg.S = w.mulS
	}
	return in, nil
}

// sized returns m if it is rows x cols, else a new matrix of that shape
// (the first time, or after a set-up changed the shapes).
func sized(m mpc.Matrix, rows, cols int) mpc.Matrix {
	if m.Rows == rows && m.Cols == cols && len(m.Data) == rows*cols {
		return m
	}
	return mpc.NewMatrix(rows, cols)
}

var errNoItem = errors.New("party: no offline item available")

// rawItem is an offline item as the consumer queued it: only this party's
// part of the stream message (its sealed envelope, or with seed compression
// P0's nonce alone), since a loop buffers up to about three pulls of these
// and they are most of what a party holds per loop. The envelope is opened
// and decoded later, one item per tick (decode).
type rawItem struct {
	seq   uint64
	env   []byte   // this party's sealed material (nil: P0 expands its seed)
	nonce [16]byte // the item's nonce, as the dealer published it
	err   error
}

// item is an item being used: staged (decoded ahead) or taken by a tick.
// decode replaces the envelope by the material (or sets err).
type item struct {
	rawItem
	decoded bool
	mat     mpc.TickMaterial
}

// trimItems checks a stream message's items (loop, epoch, shape, at most
// the set-up's items per message) and keeps this party's part of each: its
// envelopes are copied out of the message unless they are most of it, so
// that the other party's shares are not kept alive with them. Each item's id
// is seq<<8 | its index in the message (itemID); an error is one rawItem
// that carries it.
func (w *worker) trimItems(data []byte, seq uint64) []rawItem {
	its, err := codec.PeekItemsAppend(w.peeked[:0], data, w.perMsg, w.loop)
	w.peeked = its
	defer clear(its) // keeps nothing of data alive
	if err != nil {
		return []rawItem{{seq: itemID(seq, 0), err: err}}
	}
	// PeekItems holds every item of a message to the first one's loop and epoch.
	if it := its[0]; it.Loop != w.loop || it.Epoch != w.epoch {
		return []rawItem{{seq: itemID(seq, 0), err: fmt.Errorf("%w: item for loop %q epoch %d, want %q epoch %d", codec.ErrHeader, it.Loop, it.Epoch, w.loop, w.epoch)}}
	}
	out := make([]rawItem, len(its))
	own := 0
	for i, it := range its {
		out[i] = rawItem{seq: itemID(seq, i), nonce: it.Nonce, env: it.P1}
		if w.id == 0 {
			out[i].env = it.P0 // empty with seed compression: expanded from the seed
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
// tick, else the next from the queue (takeItem), waiting for it.
func (w *worker) nextItem(ctx context.Context) (uint64, mpc.TickMaterial, error) {
	if seq, mat, ok := w.takePre(); ok {
		return seq, mat, nil
	}
	return w.takeItem(ctx, true)
}

// takeItem takes the next usable item from the queue: consumed on delivery,
// never one at or below the high-water mark, never one below minSeq. Without
// wait it does not wait for one (errNoItem).
func (w *worker) takeItem(ctx context.Context, wait bool) (uint64, mpc.TickMaterial, error) {
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
				return 0, mpc.TickMaterial{}, errNoItem
			}
			if timer == nil {
				timer = time.NewTimer(w.s.opt.ItemWait)
			}
			select {
			case w.batch = <-w.items:
				continue
			case <-timer.C:
				return 0, mpc.TickMaterial{}, errNoItem
			case <-ctx.Done():
				return 0, mpc.TickMaterial{}, ctx.Err()
			}
		}
		if w.burn > 0 && it.seq > w.hwm && it.seq >= w.minSeq {
			// An item for a held measurement's tick given up (dropHeld):
			// marked taken, so the ordinary discard below drops it.
			w.burn--
			w.hwm = it.seq
		}
		if it.seq <= w.hwm || it.seq < w.minSeq {
			w.recycle(it.mat) // a staged item's: no one else has it
			w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Inc()
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
			w.reject(it.err)
			w.s.opt.Metrics.ItemsDiscarded.WithLabelValues(w.loop).Inc()
			continue
		}
		w.count(&w.ctrConsumed, w.s.opt.Metrics.ItemsConsumed)
		return it.seq, it.mat, nil
	}
}

// material opens and decodes this party's material of an item into m.
func (w *worker) material(r rawItem, m *mpc.TickMaterial) error {
	if len(r.env) == 0 {
		if w.id != 0 {
			return fmt.Errorf("%w: item without party1 material", codec.ErrMalformed)
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

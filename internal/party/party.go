// Package party is the P0/P1 service: each tick it runs Protocol 3 with the
// other party over NATS for every loop it serves.
package party

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
)

// DefaultPersistDelay is Options.PersistDelay's default.
const DefaultPersistDelay = 2 * time.Millisecond

// Options configure a party service.
type Options struct {
	ID       int      // 0 or 1
	Loops    []string // loop ids served
	Prefetch int      // offline items buffered ahead
	// ItemWait is how long a tick waits for an offline item before it is
	// abandoned (counted as a miss and a low-water event).
	ItemWait time.Duration
	Log      *slog.Logger
	Metrics  *metrics.Set
	// StateKey, if set, enables crash recovery: the party persists its state
	// share every tick, sealed under this key (see persist.go).
	StateKey      *[32]byte
	StateStorage  jetstream.StorageType
	StateReplicas int
	// PersistDelay defers each state write after the tick that produced it
	// (default 2 ms; negative: write at once), so that the write's work at
	// the party and the server does not compete with the tick's output
	// messages for the CPU, and so that the writes of the loops whose ticks
	// finish within that window go out together (after.go): a write starts
	// at most PersistDelay after its tick. The next tick still waits for the
	// write's acknowledgement before it starts.
	PersistDelay time.Duration
	// PeerBatch is the most messages to the other party sent together in
	// one NATS message while the dispatcher has more inbound messages
	// waiting (batch.go; default DefaultPeerBatch; 1: never batch). Both
	// parties must run a version that reads batches.
	PeerBatch int
	// PeerBatchAlways sends every message to the other party as a batch,
	// of one when nothing else is waiting (for tests of the batch path).
	PeerBatchAlways bool
	// TwoHop: after each tick, take the next item, open the state part of
	// its Protocol 1 message with the other party (KindPreT) and send the
	// sensor this party's share of its measurement mask (KindMaskY), so
	// that a tick started by a masked measurement (KindMeasureMasked) needs
	// no exchange after it (twohop.go). A masked measurement is handled
	// with or without it. While the sensor sends shares instead, it backs
	// off to pre-opening on probe ticks only (twoHopBackoff).
	TwoHop bool
	// Audit, if set, is called once per completed multiplication with the
	// stream sequence of the item used and its serial (a test hook and
	// audit log).
	Audit func(loop string, tick, item uint64, serial codec.Serial)
	// StateVersion, if set, is called whenever a loop's state takes another
	// version: with updated after tick's update (one higher); without, once
	// as the loop starts (the restored version and the tick its record was
	// written after, or 0 and 0) and after a rollback that gives the last
	// update up (one lower; tick: the tick that found the mismatch). It
	// runs under the loop's lock, maybe on the service's dispatcher: it
	// must be quick and must not call the Service. For internal/demo (its
	// tests and `duet demo`): its plaintext reference follows the updates
	// the parties kept.
	StateVersion func(loop string, tick, version uint64, updated bool)
}

// Service runs one party for many loops.
type Service struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sealer *codec.Sealer
	opt    Options

	mu      sync.Mutex
	workers map[string]*worker
	// inbox receives every loop's messages (one channel subscription per
	// loop, all on this channel); dispatch routes them.
	inbox chan *nats.Msg

	// after runs the ticks' deferred work (after.go); nil: at once, or
	// before Run.
	after *afterQueue

	// out is the batch of messages to the other party (batch.go).
	outMu sync.Mutex
	out   peerOut
	// aout gathers what a batch of deferred work sends (batch.go); only
	// the after queue's goroutine uses it.
	aout afterOut

	// acks routes the state writes' acknowledgements (acks.go), made by
	// the first loop that persists.
	acksMu sync.Mutex
	acks   *stateAcks

	// replicasChecked: the state bucket's replica count is compared with
	// DUET_STATE_REPLICAS once, by the first loop that opens the bucket
	// (bus.WarnReplicaChange), not by each of hundreds.
	replicasChecked sync.Once
}

// stateAcks returns the service's acknowledgement router, subscribing it on
// first use.
func (s *Service) stateAcks() (*stateAcks, error) {
	s.acksMu.Lock()
	defer s.acksMu.Unlock()
	if s.acks == nil {
		a, err := newStateAcks(s.nc, s.opt.Metrics.Reject)
		if err != nil {
			return nil, err
		}
		s.acks = a
	}
	return s.acks, nil
}

// inboxSize bounds the messages waiting for the dispatcher.
const inboxSize = 1 << 16

// New returns a party service; sealer must be the party's own.
func New(nc *nats.Conn, sealer *codec.Sealer, opt Options) (*Service, error) {
	if opt.ID != 0 && opt.ID != 1 {
		return nil, fmt.Errorf("party: id %d, want 0 or 1", opt.ID)
	}
	if sealer.Self() != codec.PartyRole(opt.ID) {
		return nil, fmt.Errorf("party: sealer is for %s, want %s", sealer.Self(), codec.PartyRole(opt.ID))
	}
	if len(opt.Loops) == 0 {
		return nil, errors.New("party: no loops configured")
	}
	// Every id is checked before any loop starts (Run): a bad one must not
	// leave the others running with no one to dispatch to them.
	if err := checkLoops(opt.Loops); err != nil {
		return nil, fmt.Errorf("party: %w", err)
	}
	if opt.Prefetch <= 0 {
		opt.Prefetch = DefaultPrefetch
	}
	if opt.ItemWait <= 0 {
		opt.ItemWait = 20 * time.Millisecond
	}
	if opt.PersistDelay == 0 {
		opt.PersistDelay = DefaultPersistDelay
	}
	if opt.PeerBatch == 0 {
		opt.PeerBatch = DefaultPeerBatch
	}
	if opt.PeerBatch < 1 || opt.PeerBatch > codec.MaxBatchEnvelopes {
		return nil, fmt.Errorf("party: peer batch %d, want 1..%d", opt.PeerBatch, codec.MaxBatchEnvelopes)
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New(codec.PartyRole(opt.ID).String())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Service{nc: nc, js: js, sealer: sealer, opt: opt, workers: map[string]*worker{}, inbox: make(chan *nats.Msg, inboxSize),
		out: peerOut{subject: bus.BatchSubject(1 - opt.ID)}}, nil
}

// Run serves every configured loop until ctx ends, then drains.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(s.opt.Loops))
	actx, stopAfter := context.WithCancel(ctx)
	defer stopAfter()
	if s.opt.PersistDelay > 0 {
		s.after = newAfterQueue(s.opt.PersistDelay)
		go s.after.run(actx, func(w *worker) bool { return w.deferred(actx) }, func() { _ = s.flushAfter() })
	}
	// The loops run until ctx ends, or until Run fails to start: Run
	// returns only once they have ended.
	wctx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	for _, loop := range s.opt.Loops { // checked by New (checkLoops)
		w := newWorker(s, loop)
		s.mu.Lock()
		s.workers[loop] = w
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(wctx); err != nil && wctx.Err() == nil {
				// The other loops go on; Run returns this when they end.
				s.opt.Log.Error("loop stopped", "party", s.opt.ID, "loop", loop, "err", err)
				errc <- fmt.Errorf("party%d loop %s: %w", s.opt.ID, loop, err)
			}
		}()
	}
	// Batches from the other party arrive on one subject for all loops.
	bsub, err := s.nc.ChanSubscribe(bus.BatchSubject(s.opt.ID), s.inbox)
	if err != nil {
		stopLoops()
		wg.Wait()
		return fmt.Errorf("party%d: batch subscription: %w", s.opt.ID, err)
	}
	defer bsub.Unsubscribe()
	dctx, cancel := context.WithCancel(ctx)
	go s.housekeep(dctx)
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		s.dispatch(dctx, bsub)
	}()
	wg.Wait()
	cancel()
	<-dispatched
	s.acksMu.Lock()
	if s.acks != nil { // the loops are done with it
		s.acks.close()
		s.acks = nil
	}
	s.acksMu.Unlock()
	close(errc)
	return <-errc
}

// countDropped counts as "overload" rejects the messages sub dropped since
// *counted of them were counted.
func (s *Service) countDropped(sub *nats.Subscription, counted *int) {
	if d, err := sub.Dropped(); err == nil && d > *counted {
		s.opt.Metrics.Rejects.WithLabelValues("overload").Add(float64(d - *counted))
		*counted = d
	}
}

// dispatch routes each inbound message to its loop's worker (deliver). The
// workers map is complete before dispatch starts and not changed after.
// While more messages are waiting, messages to the other party are held
// and batched (batch.go).
// Batches the shared channel had no room for are counted as "overload"
// rejects, as each loop's worker counts its own subscription's.
func (s *Service) dispatch(ctx context.Context, bsub *nats.Subscription) {
	holding := false
	defer s.flushAll()
	drops := time.NewTicker(200 * time.Millisecond)
	defer drops.Stop()
	dropped := 0
	for {
		select {
		case <-ctx.Done():
			s.countDropped(bsub, &dropped) // the last ones too
			return
		case <-drops.C:
			s.countDropped(bsub, &dropped)
		case m := <-s.inbox:
			if more := len(s.inbox) > 0; more != holding {
				holding = more
				s.hold(more)
			}
			if loop := bus.SubjectLoop(m.Subject); loop == bus.BatchToken {
				s.dispatchBatch(ctx, m, holding)
			} else if w := s.workers[loop]; w != nil {
				if holding {
					s.before(loop)
				}
				w.deliver(ctx, m)
			}
			if holding && len(s.inbox) == 0 {
				holding = false
				s.hold(false)
			}
		}
	}
}

// housekeepEvery is the period of every loop's housekeeping.
const housekeepEvery = 200 * time.Millisecond

// housekeep runs every loop's periodic work (worker.housekeep) on one
// ticker for the service, until ctx ends: a ticker per loop would wake a
// goroutine per loop five times a second.
func (s *Service) housekeep(ctx context.Context) {
	t := time.NewTicker(housekeepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, w := range s.workers {
				w.housekeep()
			}
		}
	}
}

// Ready reports whether every loop has completed its set-up.
func (s *Service) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.workers) < len(s.opt.Loops) {
		return false
	}
	for _, w := range s.workers {
		if !w.ready.Load() {
			return false
		}
	}
	return true
}

// LoopStatus is what a party reports about one loop.
type LoopStatus struct {
	Ready    bool
	Restored bool   // the state share came from the persisted record
	Version  uint64 // state updates kept (a rollback takes one back)
	// Instance is this instance's number in the messages it sends the other
	// party (codec.MulPayload.Inc; 0 without persisted state), and Peer
	// that of the other party's instance the loop works with.
	Instance, Peer uint64
}

// Status reports on a loop (false if the loop is not served).
func (s *Service) Status(loop string) (LoopStatus, bool) {
	s.mu.Lock()
	w := s.workers[loop]
	s.mu.Unlock()
	if w == nil {
		return LoopStatus{}, false
	}
	return LoopStatus{Ready: w.ready.Load(), Restored: w.restoredPub.Load(), Version: w.versionPub.Load(),
		Instance: w.incPub.Load(), Peer: w.peerIncPub.Load()}, true
}

// checkLoops refuses an invalid loop id, and one listed twice (two workers
// would share its consumer and its state record).
func checkLoops(loops []string) error {
	seen := make(map[string]bool, len(loops))
	for _, loop := range loops {
		if err := codec.ValidLoopID(loop); err != nil {
			return err
		}
		if seen[loop] {
			return fmt.Errorf("loop %q is listed twice", loop)
		}
		seen[loop] = true
	}
	return nil
}

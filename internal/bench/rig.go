package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// rig runs the real duet services (internal/sensor, party, actuator, dealer,
// plantsvc) against any NATS server, for any number of loops served by one
// P0/P1 pair. It is internal/demo's Cluster without the embedded server
// (demo.Start always starts its own, and serves one loop): `duet bench`
// takes --nats, and the scale test needs many loops per party pair.
//
// Everything a rig creates on the server (offline streams, set-up and state
// records) is removed by close, so it can run against a shared server.
type rig struct {
	url    string
	ids    *identities
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	js     jetstream.JetStream
	admin  *nats.Conn

	mu      sync.Mutex
	wg      sync.WaitGroup
	conns   []*nats.Conn
	loops   []string
	parties [2]*party.Service
	pm      [2]*metrics.Set
	// peerBatch is the parties' Options.PeerBatch (0: the default).
	peerBatch int
	// prefetch is the parties' Options.Prefetch (0: the default).
	prefetch int
	// writeCoalesce is the parties' DUET_WRITE_COALESCE (0: the default,
	// party.DefaultWriteCoalesce; negative: off).
	writeCoalesce time.Duration
	// stateFile puts the parties' state buckets in JetStream file storage
	// (DUET_STATE_FILE_STORE, the services' default); false: memory.
	stateFile bool
	// twoHop: the parties' DUET_TWO_HOP.
	twoHop  bool
	dealers []func()
	// partyBin, if set, runs each party as this binary in its own process
	// (partyproc.go); procs are those processes, keysDir their keys.
	partyBin string
	// inProc, if set, connects the rig's services to the embedded server
	// in process (inproc.go) from then on; nil: over TCP to url.
	inProc  nats.InProcessConnProvider
	procs   []*partyProc
	keysDir string
}

func newRig(ctx context.Context, url string, log *slog.Logger) (*rig, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ids, err := newIdentities()
	if err != nil {
		return nil, err
	}
	r := &rig{url: url, ids: ids, log: log}
	r.ctx, r.cancel = context.WithCancel(ctx)
	if r.admin, err = r.connect("admin"); err != nil {
		r.cancel()
		return nil, err
	}
	if r.js, err = jetstream.New(r.admin); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *rig) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := bus.Connect(r.url, "duet-bench-"+name, r.log, nil, append(opts, dialOptions(r.ctx, r.inProc)...)...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns = append(r.conns, nc)
	r.mu.Unlock()
	return nc, nil
}

func (r *rig) run(name string, ctx context.Context, f func(context.Context) error) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("service stopped", "service", name, "err", err)
		}
	}()
}

// loopSpec is one loop to set up.
type loopSpec struct {
	Loop       string
	Controller mpc.ControllerSpec
	Variant    mpc.Variant
	Compress   bool
	QueueMax   int64
	// ItemsPerMsg is the sensor's items per stream message (0: its default).
	ItemsPerMsg int
	Fast        bool
	OnTick      func(tick uint64, y, uplain []float64)
	TwoHop      bool // the sensor's DUET_TWO_HOP
	// NoticeDelay is the sensor's Options.NoticeDelay.
	NoticeDelay time.Duration
	// Metrics is the sensor's metric set (nil: a new one).
	Metrics *metrics.Set
}

// setupLoop creates a sensor on nc and runs its set-up (queue, consumers,
// sealed records); the sensor can then run ticks if a plant serves the loop.
func (r *rig) setupLoop(nc *nats.Conn, ls loopSpec) (*sensor.Sensor, error) {
	s, err := r.ids.sealer(codec.RoleSensor)
	if err != nil {
		return nil, err
	}
	m := ls.Metrics
	if m == nil {
		m = metrics.New("sensor")
	}
	sn, err := sensor.New(nc, s, sensor.Options{Loop: ls.Loop, Controller: ls.Controller, Variant: ls.Variant, Compress: ls.Compress,
		Fast: ls.Fast, QueueMax: ls.QueueMax, ItemsPerMsg: ls.ItemsPerMsg, Log: r.log, Metrics: m, OnTick: ls.OnTick, TwoHop: ls.TwoHop, NoticeDelay: ls.NoticeDelay})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.loops = append(r.loops, ls.Loop)
	r.mu.Unlock()
	if err := sn.Setup(r.ctx); err != nil {
		return nil, err
	}
	return sn, nil
}

// startParties starts one P0 and one P1 service serving every loop; with
// persist, each persists its state share every tick (crash recovery, as
// `duet demo` runs them).
func (r *rig) startParties(loops []string, persist bool, audit func(id int, loop string, tick, item uint64)) error {
	for i := 0; i < 2; i++ {
		// The party's goroutines, its connection's among them, carry its
		// label (roles.go).
		var err error
		withRole(r.ctx, []string{RoleParty0, RoleParty1}[i], func(context.Context) { err = r.startParty(i, loops, persist, audit) })
		if err != nil {
			return err
		}
	}
	return nil
}

// startParty starts party i.
func (r *rig) startParty(i int, loops []string, persist bool, audit func(id int, loop string, tick, item uint64)) error {
	if r.partyBin != "" {
		if audit != nil {
			return fmt.Errorf("bench: a party process cannot report the items it uses (audit)")
		}
		return r.startPartyProc(i, loops, persist)
	}
	nc, err := r.connect(fmt.Sprintf("party%d", i), bus.CoalesceWrites(party.WriteCoalesceFor(r.writeCoalesce)))
	if err != nil {
		return err
	}
	s, err := r.ids.sealer(codec.PartyRole(i))
	if err != nil {
		return err
	}
	m := metrics.New(fmt.Sprintf("party%d", i))
	opt := party.Options{ID: i, Loops: loops, Log: r.log, Metrics: m, PeerBatch: r.peerBatch, Prefetch: r.prefetch, TwoHop: r.twoHop}
	if audit != nil {
		id := i
		opt.Audit = func(loop string, tick, item uint64, _ codec.Serial) { audit(id, loop, tick, item) }
	}
	if persist {
		if err := opt.Persist(r.ids.ids[codec.PartyRole(i)], r.stateFile); err != nil {
			return err
		}
	}
	p, err := party.New(nc, s, opt)
	if err != nil {
		return err
	}
	r.parties[i], r.pm[i] = p, m
	r.run(fmt.Sprintf("party%d", i), r.ctx, p.Run)
	return nil
}

// startDealers starts k dealer replicas with opt's low-water mark and
// check intervals (its name, log and metrics are each replica's own); the
// returned function stops them.
func (r *rig) startDealers(k int, opt dealer.Options) (func(), error) {
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("dealer%d", i+1)
		nc, err := r.connect(name)
		if err != nil {
			stopAll()
			return nil, err
		}
		s, err := r.ids.sealer(codec.RoleDealer)
		if err != nil {
			stopAll()
			return nil, err
		}
		opt.Name, opt.Log, opt.Metrics = name, r.log, metrics.New(name)
		d, err := dealer.New(nc, s, opt)
		if err != nil {
			stopAll()
			return nil, err
		}
		ctx, cancel := context.WithCancel(r.ctx)
		stops = append(stops, func() { cancel(); nc.Close() })
		withRole(ctx, RoleDealer, func(ctx context.Context) { r.run(name, ctx, d.Run) })
	}
	r.mu.Lock()
	r.dealers = append(r.dealers, stopAll)
	r.mu.Unlock()
	return stopAll, nil
}

// partiesReady reports whether both parties finished every loop's set-up.
func (r *rig) partiesReady() bool {
	if r.partyBin != "" {
		return r.procsReady()
	}
	return r.parties[0] != nil && r.parties[1] != nil && r.parties[0].Ready() && r.parties[1].Ready()
}

// queueItems reads a loop's offline queue depth in items: its stream
// messages times the items each holds.
func (r *rig) queueItems(ctx context.Context, loop string) (int, error) {
	msgs, _, err := r.queueDepth(ctx, loop)
	if err != nil || msgs == 0 {
		return 0, err
	}
	k, err := storedPerMsg(ctx, r, loop)
	return int(msgs) * k, err
}

// queueDepth reads a loop's offline queue depth (stream messages) and bytes.
func (r *rig) queueDepth(ctx context.Context, loop string) (msgs, bytes uint64, err error) {
	st, err := r.js.Stream(ctx, bus.OfflineStream(loop))
	if err != nil {
		return 0, 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return info.State.Msgs, info.State.Bytes, nil
}

// waitFor polls cond every 20 ms until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: waiting for %s: %w", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitQueues waits until every loop's queue holds at least min items.
func (r *rig) waitQueues(ctx context.Context, loops []string, min int, timeout time.Duration) error {
	pending := append([]string(nil), loops...)
	return waitFor(ctx, timeout, fmt.Sprintf("%d offline queues to hold %d items", len(loops), min), func() bool {
		for len(pending) > 0 {
			n, err := r.queueItems(ctx, pending[0])
			if err != nil || n < min {
				return false
			}
			pending = pending[1:]
		}
		return true
	})
}

// close stops every service and removes what the rig created on the server.
func (r *rig) close() {
	r.mu.Lock()
	for _, stop := range r.dealers {
		stop()
	}
	r.mu.Unlock()
	r.cancel()
	r.stopProcs()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	if r.js != nil {
		r.cleanup()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, nc := range r.conns {
		nc.Close()
	}
}

func (r *rig) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setup, _ := r.js.KeyValue(ctx, bus.SetupBucket)
	var state [2]jetstream.KeyValue
	for i := range state {
		state[i], _ = r.js.KeyValue(ctx, party.StateBucket(i))
	}
	// A few workers: a scale step leaves hundreds of loops behind.
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loop := range work {
				if err := r.js.DeleteStream(ctx, bus.OfflineStream(loop)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					r.log.Warn("deleting stream", "loop", loop, "err", err)
				}
				if setup != nil {
					for _, role := range []codec.Role{codec.RoleParty0, codec.RoleParty1, codec.RoleActuator, codec.RoleDealer} {
						_ = setup.Purge(ctx, bus.SetupKey(loop, role))
					}
				}
				for _, kv := range state {
					if kv != nil {
						_ = kv.Purge(ctx, loop)
					}
				}
			}
		}()
	}
	for _, loop := range r.loops {
		work <- loop
	}
	close(work)
	wg.Wait()
}

// prefetchOrDefault is the offline items per pull and loop the parties use.
func (r *rig) prefetchOrDefault() int { return party.PrefetchFor(r.prefetch) }

// Package demo runs the whole secure control pipeline in one process: an
// embedded NATS server with JetStream, dealer replicas, P0, P1, the sensor,
// the actuator and the simulated plant, each on its own NATS connection and
// talking exactly as the separate binaries do. `duet demo` and the pipeline
// tests use it.
package demo

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Options configure a cluster.
type Options struct {
	Loop       string
	Controller mpc.ControllerSpec
	Plant      plant.Spec
	Variant    mpc.Variant
	Compress   bool
	Fast       bool
	Period     time.Duration
	Deadline   time.Duration
	Dealers    int
	LowWater   int
	QueueMax   int64
	// ItemsPerMsg is the sensor's items per stream message (0: its default).
	ItemsPerMsg int
	FailSafe    actuator.FailSafe
	FileStore   bool // JetStream file storage (queue, set-up, party state)
	NoPersist   bool // disable the parties' crash-recovery persistence
	// PeerBatchAlways makes the parties send every exchange message as a
	// batch (party.Options.PeerBatchAlways), so the batch path carries the
	// whole run.
	PeerBatchAlways bool
	// AfterMultiply, if set, is called on a party's goroutine after each of
	// its multiplications (party.Options.Audit), with the party's lock
	// held: a test hook that can stall a party mid-tick.
	AfterMultiply func(party int, tick uint64)
	// ACL runs the server with one nkey user per role and the permissions
	// of internal/acl; every service connects as its role's user.
	ACL bool
	// TLS, if set, makes the server require TLS with this configuration;
	// ClientTLS is what the services use to verify it.
	TLS       *tls.Config
	ClientTLS *tls.Config
	// WriteCoalesce is the parties' DUET_WRITE_COALESCE (0: the party
	// service's default; negative: off).
	WriteCoalesce time.Duration
	Log           *slog.Logger
	// Sink, if set, receives every tick's record in tick order once the
	// tick is settleLag ticks behind the newest tick applied, and settles
	// its item audit then too; the cluster then forgets the tick, so a run
	// of any length holds a bounded window of records. Records returns only
	// the ticks not yet handed over, and Settle hands over the rest. Nil
	// (the tests): every record is kept until Close. The records handed
	// over have as UPlain the float64 controller stepped on P0's kept
	// updates (as Followed gives them), as far as Following allows.
	Sink func(TickRecord)
	// TwoHop runs the sensor and both parties with the two-hop tick
	// (DUET_TWO_HOP).
	TwoHop bool
	// PlantLate leaves the plant to StartPlant, as when a deployment's
	// sensor starts before its plant.
	PlantLate bool
	// Dial, if set, gives the URL a service (by name: "party1", "sensor",
	// ...) connects to instead of the server's own, url: a test hook that
	// puts a proxy playing a malicious broker in front of one service.
	Dial func(name, url string) string
}

// TickRecord is everything observed about one tick.
type TickRecord struct {
	Tick uint64
	// Y is the measurement; UPlain the float64 controller's output on it,
	// stepped on every measurement as the sensor sends it (but see
	// Followed and Options.Sink).
	Y, UPlain    []float64
	U            []float64
	Latency      time.Duration
	Miss         bool
	Item0, Item1 uint64
	Applied      bool
}

// Cluster is a running in-process deployment.
type Cluster struct {
	opt    Options
	ns     *server.Server
	url    string
	store  string
	ids    map[codec.Role]*codec.Identity
	pubs   map[codec.Role]string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*nats.Conn
	// plantFailed is closed when the plant service stopped with an error
	// (plantErr), under mu.
	plantFailed chan struct{}
	plantErr    error

	Sensor   *sensor.Sensor
	Actuator *actuator.Actuator
	Parties  [2]*party.Service
	Metrics  map[string]*metrics.Set

	mu        sync.Mutex
	records   map[uint64]*TickRecord
	audit     [2]map[uint64]auditItem    // tick -> item, per party
	used      [2]map[codec.Serial]uint64 // item serial -> tick, per party (reuse detection)
	reuse     int
	versions  stateVersions // what P0's Options.StateVersion reported (Followed, followSettled)
	p0Starts  int           // StartParty(0) calls: the instance the hook belongs to
	plantUp   bool          // StartPlant ran
	live      liveStats
	settle    settleState
	dealers   map[string]context.CancelFunc
	nDealer   int
	partyStop [2]func()
	port      int
	users     map[codec.Role]*acl.User
}

// StartServer starts an embedded NATS server with JetStream in a temporary
// store on a random loopback port.
//
// Like deploy/nats.conf, it runs without the server's subject-match cache
// (NoSublistCache): the cache holds 1,024 subjects, a loop uses about ten
// (and every JetStream acknowledgement a new one), so with a few hundred loops
// nearly every message missed it and then took the subject tree's write lock
// to insert its entry; without the cache a match takes the read lock only.
// Each connection's own 512-entry cache in the server is unaffected.
func StartServer() (*server.Server, string, error) {
	dir, err := os.MkdirTemp("", "duet-js-")
	if err != nil {
		return nil, "", err
	}
	ns, err := StartServerWith(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSublistCache: true})
	return ns, dir, err
}

// StartServerWith starts an embedded server with the given options.
func StartServerWith(o *server.Options) (*server.Server, error) {
	o.NoSigs, o.NoLog = true, true
	ns, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("demo: embedded NATS server did not start")
	}
	return ns, nil
}

// RestartServer shuts the NATS server down, waits down, and starts it again
// on the same port and store (file storage keeps the streams and KV).
func (c *Cluster) RestartServer(down time.Duration) error {
	c.ns.Shutdown()
	c.ns.WaitForShutdown()
	time.Sleep(down)
	ns, err := StartServerWith(c.serverOptions(c.port))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.ns = ns
	c.mu.Unlock()
	return nil
}

// Start brings up every service and performs the set-up.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if opt.Loop == "" {
		opt.Loop = "pendulum"
	}
	if opt.Dealers <= 0 {
		opt.Dealers = 2
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opt.LowWater <= 0 {
		opt.LowWater = 750
	}
	if opt.ItemsPerMsg <= 0 {
		opt.ItemsPerMsg = sensor.DefaultItemsPerMsg
	}
	if opt.QueueMax <= 0 {
		opt.QueueMax = int64(2*opt.LowWater + 256)
	}
	dir, err := os.MkdirTemp("", "duet-js-")
	if err != nil {
		return nil, err
	}
	c0 := &Cluster{opt: opt, store: dir}
	if opt.ACL {
		if c0.users, err = acl.NewUsers(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	ns, err := StartServerWith(c0.serverOptions(-1))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{users: c0.users, opt: opt, ns: ns, url: ns.ClientURL(), port: ns.Addr().(*net.TCPAddr).Port, store: dir, ids: map[codec.Role]*codec.Identity{}, pubs: map[codec.Role]string{},
		Metrics: map[string]*metrics.Set{}, records: map[uint64]*TickRecord{}, dealers: map[string]context.CancelFunc{}, versions: stateVersions{by: map[uint64]uint64{}},
		settle: settleState{follow: newFollower(opt.Controller)}}
	for i := range c.audit {
		c.audit[i], c.used[i] = map[uint64]auditItem{}, map[codec.Serial]uint64{}
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	for _, r := range codec.AllRoles {
		id, err := codec.GenerateIdentity()
		if err != nil {
			c.Close()
			return nil, err
		}
		c.ids[r], c.pubs[r] = id, id.PublicKey()
	}
	if err := c.startAll(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) conn(name string) (*nats.Conn, *codec.Sealer, *metrics.Set, error) {
	return c.connAs(name, roleOf(name))
}

func roleOf(name string) codec.Role {
	switch name {
	case "party0":
		return codec.RoleParty0
	case "party1":
		return codec.RoleParty1
	case "sensor":
		return codec.RoleSensor
	case "actuator":
		return codec.RoleActuator
	case "plant":
		return codec.RolePlant
	}
	return codec.RoleDealer
}

func (c *Cluster) connAs(name string, role codec.Role) (*nats.Conn, *codec.Sealer, *metrics.Set, error) {
	m := metrics.New(name)
	opts := []nats.Option{nats.CustomInboxPrefix(acl.Inbox(role))}
	if c.users != nil {
		opts = append(opts, c.users[role].Options()...)
	}
	if c.opt.ClientTLS != nil {
		opts = append(opts, nats.Secure(c.opt.ClientTLS))
	}
	if _, ok := role.PartyID(); ok {
		opts = append(opts, bus.CoalesceWrites(party.WriteCoalesceFor(c.opt.WriteCoalesce)))
	}
	url := c.url
	if c.opt.Dial != nil {
		url = c.opt.Dial(name, url)
	}
	opts = append(opts, bus.CountAsyncErrors(m.CountNATSError))
	nc, err := bus.Connect(url, "duet-"+name, c.opt.Log, func() { m.Reconnects.Inc() }, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := codec.NewSealer(role, c.ids[role], c.pubs)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, nc)
	c.Metrics[name] = m
	c.mu.Unlock()
	return nc, s, m, nil
}

func (c *Cluster) goRun(name string, run func(context.Context) error) {
	c.goRunCtx(c.ctx, name, run)
}

func (c *Cluster) goRunCtx(ctx context.Context, name string, run func(context.Context) error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := run(ctx); err != nil && ctx.Err() == nil {
			c.opt.Log.Error("service stopped", "service", name, "err", err)
		}
	}()
}

func (c *Cluster) startAll() error {
	o := c.opt
	// Sensor first: its set-up creates the queue and the consumers before any
	// dealer can publish.
	if err := c.startSensor(); err != nil {
		return err
	}
	if err := c.Sensor.Setup(c.ctx); err != nil {
		return err
	}
	if !o.PlantLate {
		if err := c.StartPlant(); err != nil {
			return err
		}
	}
	nc, s, m, err := c.conn("actuator")
	if err != nil {
		return err
	}
	c.Actuator, err = actuator.New(nc, s, actuator.Options{Loop: o.Loop, Deadline: o.Deadline, FailSafe: o.FailSafe, Log: o.Log, Metrics: m, OnApply: c.onApply})
	if err != nil {
		return err
	}
	c.goRun("actuator", c.Actuator.Run)
	for i := 0; i < 2; i++ {
		if err := c.StartParty(i); err != nil {
			return err
		}
	}
	for i := 0; i < o.Dealers; i++ {
		if _, err := c.StartDealer(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) serverOptions(port int) *server.Options {
	o := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: c.store, NoSublistCache: true} // see StartServer
	if c.users != nil {
		o.Nkeys = acl.NkeyUsers(acl.Publics(c.users))
	}
	if c.opt.TLS != nil {
		o.TLSConfig, o.TLS, o.TLSVerify = c.opt.TLS, true, false
	}
	return o
}

// User returns a role's NATS user (ACL clusters only).
func (c *Cluster) User(r codec.Role) *acl.User { return c.users[r] }

func (c *Cluster) startSensor() error {
	o := c.opt
	nc, s, m, err := c.conn("sensor")
	if err != nil {
		return err
	}
	key, err := sensor.StateKey(c.ids[codec.RoleSensor])
	if err != nil {
		return err
	}
	c.Sensor, err = sensor.New(nc, s, sensor.Options{Loop: o.Loop, Controller: o.Controller, Variant: o.Variant, Compress: o.Compress,
		Period: o.Period, Fast: o.Fast, QueueMax: o.QueueMax, ItemsPerMsg: o.ItemsPerMsg, FileStore: o.FileStore, Log: o.Log, Metrics: m, OnTick: c.onTick,
		StateKey: &key, TwoHop: o.TwoHop})
	return err
}

// StartPlant starts the simulated plant (Start does it unless
// Options.PlantLate); a second call is an error.
func (c *Cluster) StartPlant() error {
	o := c.opt
	c.mu.Lock()
	started := c.plantUp
	c.plantUp = true
	c.mu.Unlock()
	if started {
		return errors.New("demo: the plant is already started")
	}
	pl, err := plant.New(o.Plant)
	if err != nil {
		return err
	}
	if pl.Outputs() != c.Sensor.Resolved().Params.P || pl.Inputs() != c.Sensor.Resolved().Params.M {
		return fmt.Errorf("demo: plant has %d outputs and %d inputs, the controller expects p=%d, m=%d",
			pl.Outputs(), pl.Inputs(), c.Sensor.Resolved().Params.P, c.Sensor.Resolved().Params.M)
	}
	nc, s, m, err := c.conn("plant")
	if err != nil {
		return err
	}
	wait := 2 * o.Deadline
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	ps, err := plantsvc.New(nc, s, plantsvc.Options{Loop: o.Loop, Plant: pl, Wait: wait, Log: o.Log, Metrics: m})
	if err != nil {
		return err
	}
	// A plant that stops (its simulation diverged) ends the ticks run
	// (RunTicks) with its error: a Fast sensor asks a plant that does not
	// answer for the same tick again, for ever.
	failed := make(chan struct{})
	c.mu.Lock()
	c.plantFailed = failed
	c.mu.Unlock()
	c.goRun("plant", func(ctx context.Context) error {
		err := ps.Run(ctx)
		if err != nil && ctx.Err() == nil {
			c.mu.Lock()
			c.plantErr = err
			c.mu.Unlock()
			close(failed)
		}
		return err
	})
	return nil
}

// RestartSensor replaces the sensor with a new instance, as after a crash;
// it resumes the existing set-up.
func (c *Cluster) RestartSensor(ctx context.Context) error {
	if err := c.startSensor(); err != nil {
		return err
	}
	return c.Sensor.Setup(ctx)
}

// StartParty starts party i (again, after StopParty).
func (c *Cluster) StartParty(i int) error {
	nc, s, m, err := c.conn(fmt.Sprintf("party%d", i))
	if err != nil {
		return err
	}
	opt := party.Options{ID: i, Loops: []string{c.opt.Loop}, Log: c.opt.Log, Metrics: m, PeerBatchAlways: c.opt.PeerBatchAlways, TwoHop: c.opt.TwoHop,
		Audit: func(_ string, tick, item uint64, serial codec.Serial) {
			c.onAudit(i, tick, auditItem{item, serial})
			if c.opt.AfterMultiply != nil {
				c.opt.AfterMultiply(i, tick)
			}
		}}
	if i == 0 { // Followed's data, and with a Sink its streamed reference (which drops each version's entry as its tick settles)
		c.mu.Lock()
		c.p0Starts++
		instance := c.p0Starts
		c.mu.Unlock()
		opt.StateVersion = func(_ string, tick, version uint64, updated bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if instance != c.p0Starts {
				c.versions.fail(fmt.Sprintf("party0's instance %d reported version %d at tick %d after instance %d started", instance, version, tick, c.p0Starts))
				return
			}
			c.versions.on(tick, version, updated)
		}
	}
	if !c.opt.NoPersist {
		if err := opt.Persist(c.ids[codec.PartyRole(i)], c.opt.FileStore); err != nil {
			return err
		}
	}
	p, err := party.New(nc, s, opt)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	ended := make(chan struct{})
	c.mu.Lock()
	c.Parties[i] = p
	c.partyStop[i] = func() {
		nc.Close()
		cancel()
		select {
		case <-ended:
		case <-time.After(killWait):
			c.opt.Log.Error("demo: a killed party still runs", "party", i, "after", killWait)
		}
	}
	c.mu.Unlock()
	c.goRunCtx(ctx, fmt.Sprintf("party%d", i), func(ctx context.Context) error {
		defer close(ended)
		return p.Run(ctx)
	})
	return nil
}

// killWait is how long KillParty waits for the killed party's goroutines
// to end.
const killWait = 5 * time.Second

// KillParty stops party i abruptly, as kill -9 would: its connection closes
// at once, nothing is drained or flushed. It returns once the party's
// goroutines have ended (what they still do cannot reach the server), or
// after killWait, logging it, so that nothing of the killed instance, such
// as a state version it reports (Options.StateVersion), comes after the
// next instance starts.
func (c *Cluster) KillParty(i int) {
	c.mu.Lock()
	stop := c.partyStop[i]
	c.partyStop[i] = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// fastDealerPollMax is the dealers' DUET_POLL_MAX with Options.Fast
// (StartDealer): their default DUET_POLL, so that they check every 50 ms.
const fastDealerPollMax = 50 * time.Millisecond

// StartDealer starts one more dealer replica and returns its name.
func (c *Cluster) StartDealer() (string, error) {
	c.mu.Lock()
	c.nDealer++
	name := fmt.Sprintf("dealer%d", c.nDealer)
	c.mu.Unlock()
	nc, s, m, err := c.connAs(name, codec.RoleDealer)
	if err != nil {
		return "", err
	}
	// Back-to-back ticks (Fast) take hundreds of items a second from their
	// first tick, faster than a paced replica learns (its rate comes over
	// windows of PollMax, a second by default, and a queue of the tests'
	// 100-item mark lasts a tenth of that): there the replicas check every
	// 50 ms, as all did before the checks were paced.
	var pollMax time.Duration // the dealer's default
	if c.opt.Fast {
		pollMax = fastDealerPollMax
	}
	d, err := dealer.New(nc, s, dealer.Options{Name: name, LowWater: c.opt.LowWater, PollMax: pollMax, Log: c.opt.Log, Metrics: m})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.dealers[name] = func() { cancel(); nc.Close() }
	c.mu.Unlock()
	c.goRunCtx(ctx, name, d.Run)
	return name, nil
}

// StopDealer stops a dealer replica (its connection closes at once).
func (c *Cluster) StopDealer(name string) {
	c.mu.Lock()
	stop := c.dealers[name]
	delete(c.dealers, name)
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Dealers lists the running dealer replicas.
func (c *Cluster) Dealers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.dealers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// WaitReady waits until both parties and the actuator are set up and the
// offline queue holds at least minItems.
func (c *Cluster) WaitReady(ctx context.Context, minItems int) error {
	for {
		if c.Parties[0].Ready() && c.Parties[1].Ready() && c.Actuator.Ready() && c.QueueDepth() >= minItems {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: not ready (party0 %v, party1 %v, actuator %v, queue %d): %w",
				c.Parties[0].Ready(), c.Parties[1].Ready(), c.Actuator.Ready(), c.QueueDepth(), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// QueueDepth reads the offline queue depth from the server, in items (the
// pendulum's items are small: every message holds ItemsPerMsg).
func (c *Cluster) QueueDepth() int {
	jsz, err := c.ns.Jsz(&server.JSzOptions{Streams: true, Accounts: true})
	if err != nil {
		return 0
	}
	for _, a := range jsz.AccountDetails {
		for _, s := range a.Streams {
			if s.Name == bus.OfflineStream(c.opt.Loop) {
				return int(s.State.Msgs) * c.opt.ItemsPerMsg
			}
		}
	}
	return 0
}

// RunTicks sends n ticks (blocking) through the sensor.
func (c *Cluster) RunTicks(ctx context.Context, n uint64) error {
	c.mu.Lock()
	failed := c.plantFailed
	c.mu.Unlock()
	if failed == nil {
		return c.Sensor.RunN(ctx, n)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-failed:
			c.mu.Lock()
			err := c.plantErr
			c.mu.Unlock()
			cancel(fmt.Errorf("%w: %w", ErrPlantStopped, err))
		case <-ctx.Done():
		}
	}()
	err := c.Sensor.RunN(ctx, n)
	if cause := context.Cause(ctx); err == nil && errors.Is(cause, ErrPlantStopped) {
		return cause
	}
	return err
}

// ErrPlantStopped ends RunTicks when the plant service stopped with an
// error (its simulation diverged).
var ErrPlantStopped = errors.New("demo: the plant stopped")

// URL is the embedded server's client URL.
func (c *Cluster) URL() string { return c.url }

// Server returns the embedded server.
func (c *Cluster) Server() *server.Server { return c.ns }

// Identity returns a role's identity (tests use it to forge and replay).
func (c *Cluster) Identity(r codec.Role) *codec.Identity { return c.ids[r] }

// PublicKeys returns every role's public key.
func (c *Cluster) PublicKeys() map[codec.Role]string { return c.pubs }

// Close stops everything and removes the temporary store.
func (c *Cluster) Close() {
	c.cancel()
	c.mu.Lock()
	for _, stop := range c.dealers {
		stop()
	}
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	for _, nc := range c.conns {
		nc.Close()
	}
	c.ns.Shutdown()
	c.ns.WaitForShutdown()
	os.RemoveAll(c.store)
}

// Package actuator is the client's acting side: it reconstructs u_t from the
// two parties' output shares, decodes it and applies it to the plant. If both
// shares have not arrived by the deadline it applies the fail-safe.
package actuator

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// FailSafe is what the actuator applies when a tick misses its deadline.
type FailSafe string

// Fail-safe policies.
const (
	FailSafeHold FailSafe = "hold" // repeat the last applied input
	FailSafeZero FailSafe = "zero" // apply zero
)

// ParseFailSafe accepts "hold" and "zero".
func ParseFailSafe(s string) (FailSafe, error) {
	switch FailSafe(s) {
	case FailSafeHold, FailSafeZero:
		return FailSafe(s), nil
	}
	return "", fmt.Errorf("actuator: fail-safe %q, want hold or zero", s)
}

// Applied describes one applied input (for hooks and the demo).
type Applied struct {
	Loop    string
	Tick    uint64
	U       []float64
	Latency time.Duration // sensor publish to reconstruction (0 on a miss)
	Miss    bool
	Item0   uint64 // items the parties used (equal unless something is wrong)
	Item1   uint64
}

// Options configure the actuator.
type Options struct {
	Loop     string
	Deadline time.Duration // after the sensor's publish
	FailSafe FailSafe
	// Watchdog, when positive, applies the fail-safe once when nothing has
	// been applied for this long since the last input: nothing at all
	// reached the actuator (the sensor, the broker or the network down), so
	// no tick is there to miss its deadline. It must be longer than
	// Deadline.
	Watchdog time.Duration
	Log      *slog.Logger
	Metrics  *metrics.Set
	OnApply  func(Applied)
}

type pending struct {
	sent  int64     // the earliest stamp seen (the latency's start)
	due   time.Time // its deadline, once dated (timer set)
	have  [2]bool
	item  [2]uint64
	u     [2]mpc.Matrix
	done  bool
	timer *time.Timer
}

// Actuator serves one loop.
type Actuator struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sealer *codec.Sealer
	opt    Options
	prm    mpc.Params
	// epoch: the set-up's (Unix ns, the sensor's clock); a notice or
	// output share stamped earlier is an earlier set-up's (codec.NotBefore),
	// refused: admitted, an earlier notice would take the tick for a
	// fail-safe at once (its stamp long past) and the genuine tick's input
	// be refused as late; an earlier share, the same, or a stale input.
	epoch uint64
	guard *codec.ReplayGuard
	ready atomic.Bool

	mu    sync.Mutex
	ticks map[uint64]*pending
	// pruneAt: the number of pending ticks at which entry next looks for
	// ticks to forget (prune); forgotten: the highest tick it forgot, at or
	// below which no tick is opened again.
	pruneAt   int
	forgotten uint64
	last      []float64
	lastApp   uint64
	// lastFailSafe: the last input applied was a fail-safe (read by
	// shutdown).
	lastFailSafe bool
	// noticed: the highest tick the sensor's notices announced (0: none
	// yet); announced bounds the output shares' ticks by it and lastApp,
	// allowing for the time since either last rose (advanced).
	noticed  uint64
	advanced time.Time
	uBuf     mpc.Matrix
	// The watchdog (Options.Watchdog): on once the actuator is ready; its
	// timer, armed by every input applied, and when the last one was.
	watchOn bool
	watch   *time.Timer
	applied time.Time
	// period is the sensor's tick period as its notices' stamps give it
	// (noticedSent: the stamp of the notice of tick noticed; 0: none yet):
	// the watchdog waits at least two periods and the deadline (quiet).
	period      time.Duration
	noticedSent int64
	// armed: the watchdog's timer runs (an input since it last fired).
	armed bool
	// stopped: Run has returned; no deadline applies anything after it.
	stopped bool
}

// New returns an actuator for one loop.
func New(nc *nats.Conn, sealer *codec.Sealer, opt Options) (*Actuator, error) {
	if err := codec.ValidLoopID(opt.Loop); err != nil {
		return nil, err
	}
	if opt.Deadline <= 0 {
		opt.Deadline = 30 * time.Millisecond
	}
	if opt.Watchdog > 0 && opt.Watchdog <= opt.Deadline {
		return nil, fmt.Errorf("actuator: watchdog %v is not longer than the deadline %v", opt.Watchdog, opt.Deadline)
	}
	if opt.FailSafe == "" {
		opt.FailSafe = FailSafeZero
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New("actuator")
	}
	metrics.Zero([]string{opt.Loop}, opt.Metrics.Ticks, opt.Metrics.Misses) // from the start: metrics.Zero
	metrics.Zero([]string{opt.Loop, metrics.KindItem}, opt.Metrics.Mismatches)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Actuator{nc: nc, js: js, sealer: sealer, opt: opt, guard: codec.NewReplayGuard(), ticks: map[uint64]*pending{}}, nil
}

// Ready reports whether the set-up has been loaded.
func (a *Actuator) Ready() bool { return a.ready.Load() }

// Run loads the set-up and serves until ctx ends.
func (a *Actuator) Run(ctx context.Context) error {
	kv, err := bus.WaitSetupBucket(ctx, a.js, a.opt.Log)
	if err != nil {
		return err
	}
	err = bus.WaitSetupRecord(ctx, kv, bus.SetupKey(a.opt.Loop, codec.RoleActuator), a.opt.Log, a.applySetup, func(rev uint64, err error) {
		a.opt.Metrics.Reject(err)
		a.opt.Log.Error("set-up record rejected; waiting for a new one", "loop", a.opt.Loop, "revision", rev, "err", err)
	})
	if err != nil {
		return nil // ctx ended
	}
	subT, err := a.nc.Subscribe(bus.TickSubject(a.opt.Loop), a.onMsg)
	if err != nil {
		return err
	}
	defer subT.Unsubscribe()
	subO, err := a.nc.Subscribe(bus.OutputSubject(a.opt.Loop), a.onMsg)
	if err != nil {
		return err
	}
	defer subO.Unsubscribe()
	a.ready.Store(true)
	a.startWatchdog()
	<-ctx.Done()
	a.shutdown()
	return nil
}

// startWatchdog turns the watchdog (Options.Watchdog) on, if it is
// configured: the first input applied arms it. Before any, the plant has
// never been driven, and a sensor still waiting for it to answer is no
// failure.
func (a *Actuator) startWatchdog() {
	a.mu.Lock()
	a.watchOn = a.opt.Watchdog > 0
	a.mu.Unlock()
}

// shutdown stops the actuator as Run returns (stopLocked), and first
// applies the fail-safe once if the plant is driven by an input it sent:
// the plant holds the last input it was sent, and an actuator stopped on
// purpose (a restart, an upgrade: k8s/ replaces it, Recreate, before the
// new one runs) would otherwise leave it driven by that input, with no
// watchdog left to take it off, until a new actuator applies one. Nothing
// is sent when the last input applied was already a fail-safe (a miss, the
// watchdog's), or none was. The tick it takes is the next after the last
// applied, or the latest the sensor announced if later (ticks still
// pending: the plant has read that one, and takes an input of a tick it
// has passed for none; in the few milliseconds between a read and its
// notice, DUET_NOTICE_DELAY, the plant may have read the next, and then
// holds the last input instead). Not counted as a miss nor reported to
// Options.OnApply: no tick missed. With the hold fail-safe it sends the
// last input again: the plant holds the same input, but its next read
// finds one and neither waits nor counts a miss. The service's connection
// drains, and so delivers it, after Run returns.
func (a *Actuator) shutdown() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastApp > 0 && !a.lastFailSafe && !a.stopped {
		t, u := max(a.lastApp+1, a.noticed), a.failSafeLocked()
		if err := a.publishLocked(t, u, true); err == nil {
			a.opt.Log.Info("stopping: fail-safe applied", "loop", a.opt.Loop, "tick", t, "failsafe", a.opt.FailSafe)
		}
	}
	a.stopLocked()
}

// stopLocked ends the actuator's timers: the watchdog and every pending
// tick's deadline. A deadline that fires anyway (its timer already running)
// and any share still being delivered find the actuator stopped and apply
// nothing: before, a deadline could publish a fail-safe on the closing
// connection, and report it, after Run had returned.
func (a *Actuator) stopLocked() {
	a.stopped = true
	a.watchOn = false
	if a.watch != nil {
		a.watch.Stop()
	}
	for _, p := range a.ticks {
		if p.timer != nil {
			p.timer.Stop()
		}
	}
}

// bark is the watchdog's timer: nothing has been applied for
// Options.Watchdog, so the fail-safe is applied, as the next tick, once; a
// later input re-arms the watchdog. The plant keeps the fail-safe until
// then. The tick it takes is marked applied, so that a late share of that
// tick cannot follow it.
func (a *Actuator) bark() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.watchOn { // stopped as the timer fired
		return
	}
	if since, quiet := time.Since(a.applied), a.quiet(); since < quiet { // an input came as the timer fired, or the period is longer than was known
		a.watch.Reset(quiet - since)
		return
	}
	t := a.lastApp + 1
	p := a.ticks[t]
	if p == nil {
		p = &pending{}
	}
	u := a.failSafeLocked()
	a.opt.Metrics.Misses.WithLabelValues(a.opt.Loop).Inc()
	a.opt.Log.Warn("watchdog: nothing applied for a while; fail-safe applied", "loop", a.opt.Loop, "quiet", a.quiet(), "tick", t, "failsafe", a.opt.FailSafe)
	a.applyLocked(t, p, u, 0, true)
	a.watch.Stop() // once, until an input re-arms it
	a.armed = false
}

// maxPeriod bounds the period the notices give (the sensor's DUET_PERIOD is
// at most a minute), so that stamps far apart cannot put the watchdog off
// for longer.
const maxPeriod = time.Minute

// notePeriod takes the time between two consecutive notices' stamps as the
// sensor's period (only consecutive ones: a restarted sensor skips tick
// numbers after a downtime). A watchdog armed for a longer period is
// brought forward, so that one long gap (a stalled sensor, its clock
// stepped) does not put it off past the next.
func (a *Actuator) notePeriod(d time.Duration) {
	before := a.quiet()
	a.period = min(d, maxPeriod)
	if q := a.quiet(); q < before && a.watchOn && a.armed {
		a.watch.Reset(max(0, q-time.Since(a.applied)))
	}
}

// quiet is how long the watchdog waits after an input: Options.Watchdog,
// and at least two of the sensor's periods and the deadline once its
// notices have given the period. Before, a sensor period longer than the
// watchdog (DUET_PERIOD=2s against the default 1s) made it fire between
// every two ticks: the fail-safe took the next tick's number, whose input
// was then refused as late, every other tick. (Until two notices have come
// the period is not known: such a loop's first gap still costs a tick.)
func (a *Actuator) quiet() time.Duration {
	return max(a.opt.Watchdog, 2*a.period+a.opt.Deadline)
}

func (a *Actuator) applySetup(data []byte) error {
	sp, prm, err := codec.OpenSetup(a.sealer, data, a.opt.Loop)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.prm, a.epoch = prm, sp.Epoch
	a.last = make([]float64, prm.M)
	a.uBuf = mpc.NewMatrix(prm.M, 1)
	a.mu.Unlock()
	return nil
}

func (a *Actuator) reject(err error) {
	a.opt.Metrics.Reject(err)
	a.opt.Log.Debug("message rejected", "loop", a.opt.Loop, "err", err)
}

func (a *Actuator) onMsg(m *nats.Msg) {
	h, body, err := a.sealer.Open(m.Data)
	if err != nil {
		a.reject(err)
		return
	}
	if h.Loop != a.opt.Loop {
		a.reject(fmt.Errorf("%w: loop %q", codec.ErrHeader, h.Loop))
		return
	}
	switch {
	case h.Kind == codec.KindTick && h.From == codec.RoleSensor:
		var tp codec.TickPayload
		if err := a.accept(h, body, &tp, func() error { return codec.NotBefore("notice", tp.SentUnixNano, a.epoch) }); err != nil {
			return
		}
		a.onTick(h.Tick, tp.SentUnixNano)
	case h.Kind == codec.KindOutput && (h.From == codec.RoleParty0 || h.From == codec.RoleParty1):
		var op codec.OutputPayload
		var u mpc.Matrix
		if err := a.accept(h, body, &op, func() (err error) {
			if err := codec.NotBefore("output share", op.SentUnixNano, a.epoch); err != nil {
				return err
			}
			if err := a.announced(h.Tick); err != nil {
				return err
			}
			u, err = op.U.Decode(a.prm.Field, a.prm.M, 1)
			return
		}); err != nil {
			return
		}
		id := 0
		if h.From == codec.RoleParty1 {
			id = 1
		}
		a.onShare(h.Tick, id, op.Item, op.SentUnixNano, u)
	default:
		a.reject(fmt.Errorf("%w: %s from %s is not accepted by the actuator", codec.ErrKind, h.Kind, h.From))
	}
}

// announced refuses an output share of tick t beyond the reach
// (codec.Reach) of the sensor's latest notice and the last tick applied, as
// only a faulty party sends: admitted, it would take the party's replay
// guard and, at its deadline, the last tick applied there, and every tick
// the sensor sent after it would be refused. The sensor announces every
// tick, measured or lost, right after its measurements. Before the first
// notice nothing is refused.
func (a *Actuator) announced(t uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.noticed == 0 {
		return nil
	}
	reach := codec.Reach(max(a.noticed, a.lastApp), a.advanced)
	if t <= reach {
		return nil
	}
	return fmt.Errorf("%w: an output share of tick %d, beyond tick %d, the sensor's latest notice (tick %d) and the time since allow",
		codec.ErrMalformed, t, reach, a.noticed)
}

// accept checks replay, decodes and validates; only a fully valid message
// advances the replay guard.
func (a *Actuator) accept(h codec.Header, body []byte, v any, validate func() error) error {
	if err := a.guard.Admit(h, body, v, validate); err != nil {
		a.reject(err)
		return err
	}
	return nil
}

// entry returns the tick's pending record; nil for ticks already applied,
// for ticks not pending at or below the highest tick prune forgot (forgotten
// ones, and ones first seen that late), and for every tick once the
// actuator has stopped.
func (a *Actuator) entry(t uint64) *pending {
	if t <= a.lastApp || a.stopped {
		return nil
	}
	if p := a.ticks[t]; p != nil {
		return p
	}
	if t <= a.forgotten {
		return nil // forgotten by prune, and counted: never opened again
	}
	p := &pending{}
	a.ticks[t] = p
	if n := len(a.ticks); n > pruneWindow && (n > a.pruneAt || n > maxPending) {
		a.prune(t)
		if a.ticks[t] != p {
			return nil // ended by prune, as the oldest of too many
		}
	}
	return p
}

// pruneWindow: a pending tick that no stamp has dated is forgotten once it
// is this many ticks behind the newest, when prune next runs.
const pruneWindow = 64

// maxPending bounds the ticks pending at once: above it the oldest quarter
// meets its deadline at once. A minute's deadline (the longest) at the
// sensor's shortest period, 1 ms, stays under it. A variable for the tests.
var maxPending = 1 << 16

// prune forgets the pending ticks that no deadline will end: those no stamp
// dated (a notice or share without one), pruneWindow or more ticks behind
// t, each counted a miss. A dated tick is left to its deadline, however far
// behind: before, every tick more than 64 behind was dropped with its
// deadline timer, so with DUET_DEADLINE longer than 64 sensor periods a
// tick whose shares never came applied no fail-safe and counted no miss.
// Above maxPending pending ticks the oldest quarter meets its deadline now.
// prune runs when the map has grown to twice its size after the last prune,
// so its cost per tick stays constant (and when the map is over
// maxPending).
func (a *Actuator) prune(t uint64) {
	for k, old := range a.ticks {
		if old.timer != nil || k+pruneWindow > t {
			continue
		}
		delete(a.ticks, k)
		a.forgotten = max(a.forgotten, k)
		a.opt.Metrics.Misses.WithLabelValues(a.opt.Loop).Inc()
		a.opt.Log.Debug("undated tick forgotten: counted as a miss", "loop", a.opt.Loop, "tick", k, "newest", t)
	}
	if len(a.ticks) > maxPending {
		keys := slices.Sorted(maps.Keys(a.ticks))
		for _, k := range keys[:len(keys)-maxPending*3/4] {
			a.deadlineLocked(k)
			delete(a.ticks, k) // ended: by the fail-safe, or a miss
		}
	}
	a.pruneAt = 2 * len(a.ticks)
}

// onTick is the sensor's notice of tick t, which it sends after the tick's
// measurements (sensor.Options.NoticeDelay): for a tick already applied it
// does nothing; for one whose output shares have not come (or not both)
// it dates the tick, so that the fail-safe applies at its deadline.
func (a *Actuator) onTick(t uint64, sent int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t > a.noticed {
		if t == a.noticed+1 && a.noticedSent > 0 && sent > a.noticedSent {
			a.notePeriod(time.Duration(sent - a.noticedSent))
		}
		a.noticed, a.noticedSent, a.advanced = t, sent, time.Now()
	}
	if p := a.entry(t); p != nil {
		a.date(t, p, sent)
	}
}

// date dates tick t by the sensor's stamp of its measurement, from the
// sensor's notice or from an output share (each party relays it), and
// starts its deadline: the earliest stamp seen dates the tick, so that a
// party cannot put a tick's deadline later than the sensor's stamp does.
//
// A stamp from the future (the sensor's clock ahead of this one's) gives the
// tick no more than a deadline from when it comes; a deadline only ever
// moves earlier, so no later message, however stamped, can put it off.
func (a *Actuator) date(t uint64, p *pending, sent int64) {
	if sent <= 0 {
		return
	}
	if p.sent == 0 || sent < p.sent {
		p.sent = sent
	}
	now := time.Now()
	due := time.Unix(0, sent).Add(a.opt.Deadline)
	if latest := now.Add(a.opt.Deadline); due.After(latest) {
		due = latest
	}
	if p.timer != nil {
		if !due.Before(p.due) {
			return
		}
		p.timer.Stop() // an earlier deadline replaces it
	}
	p.due = due
	p.timer = time.AfterFunc(due.Sub(now), func() { a.deadline(t) })
}

func (a *Actuator) onShare(t uint64, id int, item uint64, sent int64, share mpc.Matrix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	p := a.entry(t)
	if p == nil || p.done {
		a.opt.Metrics.Rejects.WithLabelValues("late").Inc()
		return
	}
	a.date(t, p, sent)
	if p.timer != nil && !time.Now().Before(p.due) {
		// Past the tick's deadline, whose timer is due: the fail-safe
		// applies, never an input this late. Before, a share that raced the
		// due timer to the lock could complete the tick, so a broker that held
		// a tick's messages back could have a stale u applied periods late.
		a.opt.Metrics.Rejects.WithLabelValues("late").Inc()
		return
	}
	p.have[id], p.item[id], p.u[id] = true, item, share
	if !p.have[0] || !p.have[1] {
		return
	}
	if p.item[0] != p.item[1] {
		a.opt.Metrics.Mismatches.WithLabelValues(a.opt.Loop, metrics.KindItem).Inc()
		a.opt.Log.Error("parties used different items", "tick", t, "p0", p.item[0], "p1", p.item[1])
		return // the deadline applies the fail-safe
	}
	a.prm.Field.Reconst(a.uBuf, p.u[0], p.u[1])
	u := make([]float64, a.prm.M)
	a.prm.Field.DcdInto(u, a.uBuf.Data, 2*a.prm.L)
	var lat time.Duration
	if p.sent != 0 {
		// A stamp ahead of this clock (the sensor's runs ahead) would give a
		// negative latency, which would pull the histogram's sum and
		// quantiles below what the ticks took: it counts as 0.
		lat = max(0, time.Since(time.Unix(0, p.sent)))
		a.opt.Metrics.TickLatency.WithLabelValues(a.opt.Loop).Observe(lat.Seconds())
	}
	a.applyLocked(t, p, u, lat, false)
}

func (a *Actuator) deadline(t uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deadlineLocked(t)
}

// deadlineLocked ends tick t at its deadline: the fail-safe, or a miss only
// when a later tick was applied.
func (a *Actuator) deadlineLocked(t uint64) {
	p := a.ticks[t]
	if p == nil || p.done || a.stopped {
		return
	}
	if t <= a.lastApp {
		// A later tick was applied before this one's deadline (a deadline
		// longer than the period, or simulated time): the plant has a newer
		// input, and this tick can no longer complete (as entry forgets).
		// No fail-safe, but a miss: its own input never came. Before, it
		// was counted nowhere, and the actuator's ticks and misses fell
		// short of the ticks sent.
		if p.timer != nil {
			p.timer.Stop()
		}
		delete(a.ticks, t)
		a.opt.Metrics.Misses.WithLabelValues(a.opt.Loop).Inc()
		a.opt.Log.Debug("deadline of a tick already superseded: counted as a miss", "loop", a.opt.Loop, "tick", t, "applied", a.lastApp)
		return
	}
	u := a.failSafeLocked()
	a.opt.Metrics.Misses.WithLabelValues(a.opt.Loop).Inc()
	a.opt.Log.Debug("deadline missed: fail-safe applied", "loop", a.opt.Loop, "tick", t, "failsafe", a.opt.FailSafe)
	a.applyLocked(t, p, u, 0, true)
}

// failSafeLocked returns the fail-safe input (Options.FailSafe).
func (a *Actuator) failSafeLocked() []float64 {
	u := make([]float64, a.prm.M)
	if a.opt.FailSafe == FailSafeHold {
		copy(u, a.last)
	}
	return u
}

func (a *Actuator) applyLocked(t uint64, p *pending, u []float64, lat time.Duration, miss bool) {
	p.done = true
	if p.timer != nil {
		p.timer.Stop()
	}
	delete(a.ticks, t)
	now := time.Now() // one clock reading for the far-tick bound and the watchdog
	if t > a.lastApp {
		a.lastApp, a.advanced = t, now
	}
	copy(a.last, u)
	a.lastFailSafe = miss
	if a.watchOn {
		a.applied = now
		if a.watch == nil {
			a.watch = time.AfterFunc(a.quiet(), a.bark)
		} else {
			a.watch.Reset(a.quiet())
		}
		a.armed = true
	}
	_ = a.publishLocked(t, u, miss) // logged
	if !miss {
		a.opt.Metrics.Ticks.WithLabelValues(a.opt.Loop).Inc()
	}
	if a.opt.OnApply != nil {
		a.opt.OnApply(Applied{Loop: a.opt.Loop, Tick: t, U: u, Latency: lat, Miss: miss, Item0: p.item[0], Item1: p.item[1]})
	}
}

// publishLocked sends the plant input u as tick t's (failSafe: the
// fail-safe, not a reconstructed input), and logs a failure.
func (a *Actuator) publishLocked(t uint64, u []float64, failSafe bool) error {
	body, err := codec.Marshal(codec.PlantUPayload{U: u, FailSafe: failSafe, Epoch: a.epoch})
	if err == nil {
		var env []byte
		env, err = a.sealer.Seal(codec.Header{Kind: codec.KindPlantU, Loop: a.opt.Loop, Tick: t, From: codec.RoleActuator, To: codec.RolePlant}, body)
		if err == nil {
			err = a.nc.Publish(bus.PlantUSubject(a.opt.Loop), env)
		}
	}
	if err != nil {
		a.opt.Log.Warn("apply", "loop", a.opt.Loop, "tick", t, "err", err)
	}
	return err
}

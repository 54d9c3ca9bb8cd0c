// Package plantsvc serves a simulated plant (pkg/plant) over NATS, the way a
// device driver would: the sensor reads y_t by request, the actuator applies
// u_t by message. A read first advances the plant one period with the input
// applied for the last tick read; if that input has not arrived the read
// waits for it, up to Wait from when the first read began waiting for it,
// then advances with the last input held (counted). A read that comes
// meanwhile takes over from the waiting one, which goes unanswered: the
// plant advances once per tick answered.
package plantsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Options configure the plant service.
type Options struct {
	Loop  string
	Plant plant.Plant
	Wait  time.Duration // how long a read waits for the previous tick's input
	// HoldReads, when positive, bounds the reads in a row that hold the
	// last input (none came): from the next on the plant is advanced with
	// zero input, until an input comes (DUET_HOLD_READS).
	HoldReads int
	Log       *slog.Logger
	Metrics   *metrics.Set
	// OnStep, if set, is called after each read answered with the tick, the
	// input that advanced the plant to it and the measurement returned.
	OnStep func(tick uint64, u, y []float64)
}

// Service serves one simulated plant.
type Service struct {
	nc     *nats.Conn
	sealer *codec.Sealer
	opt    Options
	guard  *codec.ReplayGuard

	mu     sync.Mutex
	cond   *sync.Cond
	inputs map[uint64][]float64
	lastU  []float64
	lastT  uint64 // last tick read
	// held: the reads in a row that found no input (Options.HoldReads).
	held    int
	reading uint64 // the latest read started: an earlier one still waiting gives way
	// waitUntil is when the input for lastT is given up and the last one
	// held: set by the first read that waits for it and kept by the reads
	// that take over, so that a lost input holds the plant up once, for Wait.
	waitUntil time.Time
	// epoch is the set-up epoch of the reads (codec.PlantReadPayload):
	// a read of a later one starts the tick numbers afresh (newSetup), one
	// of an earlier one is refused, and inputs are taken of this epoch
	// only. epochKnown: a read has been admitted (before it, no epoch is
	// known and inputs are dropped).
	epoch      uint64
	epochKnown bool
	closed     bool // Run has ended: waiting reads return
	// diverged is closed when the plant's measurement is first found not
	// finite (once): Run then ends with errDiverged.
	diverged     chan struct{}
	divergedOnce sync.Once
	// ready: Run has subscribed to the plant's subjects and not ended.
	ready atomic.Bool

	logs *bus.LogLimit // refused messages' warnings (reject)
}

// New returns the plant service.
func New(nc *nats.Conn, sealer *codec.Sealer, opt Options) (*Service, error) {
	if err := codec.ValidLoopID(opt.Loop); err != nil {
		return nil, err
	}
	if opt.Wait <= 0 {
		opt.Wait = 60 * time.Millisecond // as DUET_WAIT's default
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Metrics == nil {
		opt.Metrics = metrics.New("plant")
	}
	metrics.Zero([]string{opt.Loop}, opt.Metrics.Misses) // from the start: metrics.Zero
	s := &Service{nc: nc, sealer: sealer, opt: opt, guard: codec.NewReplayGuard(),
		inputs: map[uint64][]float64{}, lastU: make([]float64, opt.Plant.Inputs()), logs: bus.NewLogLimit(), diverged: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	subU, err := s.nc.Subscribe(bus.PlantUSubject(s.opt.Loop), s.onInput)
	if err != nil {
		return err
	}
	defer subU.Unsubscribe()
	subY, err := s.nc.Subscribe(bus.PlantYSubject(s.opt.Loop), s.onRead)
	if err != nil {
		return err
	}
	defer subY.Unsubscribe()
	s.ready.Store(true)
	defer s.ready.Store(false)
	err = nil
	select {
	case <-ctx.Done():
	case <-s.diverged:
		err = errDiverged
	}
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	return err
}

// Ready reports whether the plant serves its reads and inputs: Run has
// subscribed to them (/readyz).
func (s *Service) Ready() bool { return s.ready.Load() }

// errDiverged ends Run when the simulated plant has diverged: it never
// comes back (no fail-safe undoes a measurement past float64), and the
// service's health and readiness said nothing of it while every tick was
// lost; exiting, it is restarted from its initial state.
var errDiverged = errors.New("plant: the simulated plant diverged (its measurement is not a finite number): exiting, so that it is restarted from its initial state; check its spec: a plant with no saturation and an unstable A diverges when the loop does not stabilize it")

func (s *Service) onInput(m *nats.Msg) {
	h, body, err := s.sealer.Open(m.Data)
	if err == nil {
		err = s.admitHeader(h, codec.KindPlantU, codec.RoleActuator)
	}
	var up codec.PlantUPayload
	if err == nil {
		err = codec.Unmarshal(body, &up)
	}
	if err == nil && len(up.U) != s.opt.Plant.Inputs() {
		err = fmt.Errorf("%w: %d inputs, want %d", codec.ErrDimension, len(up.U), s.opt.Plant.Inputs())
	}
	if err != nil {
		s.reject("input", err)
		return
	}
	if err := s.admitInput(h, up); err != nil {
		s.reject("input", err)
	}
}

// admitInput stores an opened input, or drops it (nil: counted nowhere),
// or returns why it is refused (reject, which the caller makes without mu).
func (s *Service) admitInput(h codec.Header, up codec.PlantUPayload) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.epochKnown:
		// No read has told the plant the set-up yet (restarted): an input
		// before its tick's read, a fail-safe, which no read would use.
		s.opt.Log.Debug("plant: input before the first read: dropped", "loop", s.opt.Loop, "tick", h.Tick, "epoch", up.Epoch)
		return nil
	case up.Epoch > s.epoch && s.epoch != 0:
		// The actuator's set-up is newer than the reads' (authentic: its
		// epoch came from its set-up record): the sensor's next read
		// brings it. Dropped, counted nowhere; said if it lasts.
		if ok, notLogged := s.logs.Allow("later epoch"); ok {
			s.opt.Log.Warn("plant: input of a later set-up than the sensor's reads: dropped until a read of that set-up comes (is the sensor running the new set-up?)", "loop", s.opt.Loop, "tick", h.Tick, "epoch", up.Epoch, "read_epoch", s.epoch, "repeats_not_logged", notLogged)
		}
		return nil
	case up.Epoch != s.epoch && s.epoch == 0:
		return fmt.Errorf("%w: the reads carry no set-up epoch: a sensor of an earlier release; upgrade it with the plant and the actuator", codec.ErrVersion)
	}
	if err := codec.SameEpoch("an input", up.Epoch, s.epoch, "an actuator of an earlier release; upgrade it with the plant and the sensor"); err != nil {
		return err
	}
	if err := s.guard.Accept(h); err != nil { // only a valid input advances the guard
		return err
	}
	s.inputs[h.Tick] = up.U
	if len(s.inputs) > maxInputs {
		s.pruneInputs(h.Tick)
	}
	s.cond.Broadcast()
	return nil
}

// maxInputs bounds the inputs held (40 s of the pendulum's ticks). A read
// deletes the inputs before its tick, but when reads stop reaching the
// plant (refused, or not routed to it) while the actuator goes on applying
// its fail-safe, the inputs would pile up without end.
const maxInputs = 1024

// pruneInputs deletes, under mu, the inputs more than maxInputs/2 ticks
// before the newest of tick and those held: a read needs only the newest
// input before its tick, and reads follow the ticks the actuator applies.
// At most maxInputs/2 ticks are left, so the next prune is that many
// inputs away.
func (s *Service) pruneInputs(tick uint64) {
	newest := tick
	for k := range s.inputs {
		newest = max(newest, k)
	}
	for k := range s.inputs {
		if k+maxInputs/2 <= newest {
			delete(s.inputs, k)
		}
	}
}

func (s *Service) onRead(m *nats.Msg) {
	h, body, err := s.sealer.Open(m.Data)
	if err == nil {
		err = s.admitHeader(h, codec.KindPlantY, codec.RoleSensor)
	}
	var rp codec.PlantReadPayload
	if err == nil && len(body) > 0 { // empty: a sensor of an earlier release, epoch 0
		err = codec.Unmarshal(body, &rp)
	}
	if err != nil {
		s.reject("read", err)
		return
	}
	// The read claims its tick here, in the subscription's order, and is
	// then handled off the subscription's goroutine, since it may wait.
	// Claimed on that goroutine, two reads queued together could take the
	// lock in either order, and the earlier would be refused as a replay.
	s.mu.Lock()
	if s.epochKnown && rp.Epoch < s.epoch {
		at := s.epoch
		s.mu.Unlock()
		err := codec.SameEpoch("a read", rp.Epoch, at, "a sensor of an earlier release (rolled back: restart the plant too)")
		if errors.Is(err, codec.ErrReplay) {
			err = fmt.Errorf("%w; or a new set-up made on a clock behind the earlier one's: restart the plant", err)
		}
		s.reject("read", err)
		return
	}
	if !s.epochKnown || rp.Epoch > s.epoch {
		s.newSetup(rp.Epoch)
	}
	if at := s.reading; h.Tick <= at { // reading >= lastT: a tick read or being read
		s.mu.Unlock()
		// Not answered: the sensor's read times out (DUET_PLANT_WAIT).
		s.reject("read", fmt.Errorf("%w: a read of tick %d, the plant has read tick %d or is reading it (a replay; or a sensor of an earlier release, whose reads carry no epoch, that made a new set-up: restart the plant)", codec.ErrReplay, h.Tick, at))
		return
	}
	// One read at a time advances the plant: a read that comes while an
	// earlier one waits for its input (the sensor gave the earlier one up:
	// its read timeout, DUET_PLANT_WAIT, is shorter than Wait) takes over,
	// with the earlier one's deadline, and the earlier one returns
	// unanswered. Two reads waiting together would each advance the plant,
	// two periods for one input; a deadline of its own for each read would,
	// with every read given up, never hold the last input.
	s.reading = h.Tick
	s.cond.Broadcast()
	s.mu.Unlock()
	go s.read(m, h.Tick, rp.Epoch)
}

// newSetup (under mu) takes epoch as the set-up the plant is read for: the
// first read since the plant started, or one of a later set-up, whose tick
// numbers start from 1 again. The tick bookkeeping starts afresh, as at a
// restart (the plant itself goes on from where it is): the replay guard,
// the reads' ticks (a read still waiting gives way) and the inputs held,
// which are the earlier set-up's. Before, a new set-up's reads were refused
// as replays until the plant was restarted.
func (s *Service) newSetup(epoch uint64) {
	if s.epochKnown {
		s.opt.Log.Info("plant: read for a new set-up: tick numbers start afresh", "loop", s.opt.Loop, "epoch", epoch, "earlier_epoch", s.epoch)
	}
	s.epoch, s.epochKnown = epoch, true
	s.guard.Reset(s.opt.Loop)
	s.reading, s.lastT, s.waitUntil, s.held = 0, 0, time.Time{}, 0
	clear(s.inputs)
	s.cond.Broadcast()
}

// admitHeader checks an opened message's kind, sender and loop.
func (s *Service) admitHeader(h codec.Header, kind codec.Kind, from codec.Role) error {
	if h.Kind != kind || h.From != from {
		return fmt.Errorf("%w: %s from %s, want %s from %s", codec.ErrKind, h.Kind, h.From, kind, from)
	}
	if h.Loop != s.opt.Loop {
		return fmt.Errorf("%w: loop %q, this plant serves %q", codec.ErrHeader, h.Loop, s.opt.Loop)
	}
	return nil
}

// reject counts a refused message and logs it at warning level, each
// reason the first time and then at most once a minute: a plant whose inputs
// are all refused (a plant spec with another number of inputs than the
// controller's) runs on the input it holds, and the log says why.
func (s *Service) reject(what string, err error) {
	s.opt.Metrics.Reject(err)
	reason := codec.Reason(err)
	if ok, notLogged := s.logs.Allow(what + "\x00" + reason); ok {
		s.opt.Log.Warn("plant: message refused", "loop", s.opt.Loop, "message", what, "reason", reason, "err", err, "repeats_not_logged", notLogged)
	}
}

// inputFor returns the input to advance the plant with before read t
// answers (under mu): the one applied for the highest tick from the last
// tick read up to t, as a device holds the input applied last. That is the
// last tick read's, unless a later one came: the actuator's watchdog
// applies its fail-safe as the tick after the last it applied, while the
// sensor is silent, and the plant holds that until the next input. Before,
// a read waited for the last tick read's input only, so the fail-safe was
// never applied: the first advance after the silence used the last input
// instead.
func (s *Service) inputFor(t uint64) (u []float64, ok bool) {
	var at uint64
	for k, v := range s.inputs {
		if k >= s.lastT && k < t && (!ok || k > at) {
			u, at, ok = v, k, true
		}
	}
	return u, ok
}

// givenUp unlocks mu and reports true if read t of epoch is not to be
// answered: a later read took over (of a later set-up too), or the service
// stopped.
func (s *Service) givenUp(t, epoch uint64) bool {
	later := s.reading
	if s.current(t, epoch) {
		return false
	}
	s.mu.Unlock()
	s.opt.Log.Debug("plant read not answered: a later one took over, or the service stopped", "loop", s.opt.Loop, "tick", t, "later", later)
	return true
}

// current reports (under mu) whether read t of epoch is still the one to
// answer: no later read took over, and the service runs.
func (s *Service) current(t, epoch uint64) bool {
	return s.reading == t && s.epoch == epoch && !s.closed
}

// read answers read t of set-up epoch, which onRead claimed.
func (s *Service) read(m *nats.Msg, t, epoch uint64) {
	s.mu.Lock()
	if s.givenUp(t, epoch) {
		return
	}
	var applied []float64
	if s.lastT > 0 {
		// Advance one period with the input the actuator applied last
		// since the last tick read (inputFor). Each read is one sampling
		// instant: a gap in tick numbers (a resumed sensor skips ahead) is
		// not time passing.
		if s.waitUntil.IsZero() {
			s.waitUntil = time.Now().Add(s.opt.Wait)
		}
		deadline := s.waitUntil
		u, ok := s.inputFor(t)
		for !ok && s.current(t, epoch) && time.Now().Before(deadline) {
			waitCond(s.cond, time.Until(deadline))
			u, ok = s.inputFor(t)
		}
		if s.givenUp(t, epoch) {
			return
		}
		if ok {
			s.held = 0
		} else {
			u = s.lastU
			s.opt.Metrics.Misses.WithLabelValues(s.opt.Loop).Inc()
			if s.held++; s.opt.HoldReads > 0 && s.held > s.opt.HoldReads {
				// No input for HoldReads reads: nothing drives the plant
				// (the actuator crashed, or cut off from it), so no
				// fail-safe of the actuator's comes; zero, as a device's
				// own watchdog would, rather than the last input for ever.
				u = make([]float64, len(s.lastU))
				if s.held == s.opt.HoldReads+1 {
					s.opt.Log.Warn("plant: no input for many reads in a row: advancing with zero input until one comes", "loop", s.opt.Loop, "tick", t, "reads", s.opt.HoldReads)
				}
			}
		}
		s.opt.Plant.Step(u)
		applied = append([]float64(nil), u...) // OnStep's, after mu: not lastU, which the next read overwrites
		s.lastU = append(s.lastU[:0], u...)
	}
	for k := range s.inputs {
		if k < t {
			delete(s.inputs, k)
		}
	}
	s.lastT, s.waitUntil = t, time.Time{}
	y := append([]float64(nil), s.opt.Plant.Measure()...)
	s.mu.Unlock()
	if s.opt.OnStep != nil {
		s.opt.OnStep(t, applied, y)
	}
	for i, v := range y {
		// A plant with no saturation (an LTI spec with an unstable A) can
		// diverge past float64: the sensor would refuse the reading as
		// malformed, naming neither the plant nor the cause.
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if ok, notLogged := s.logs.Allow("diverged"); ok {
				s.opt.Log.Error("plant: the simulated plant diverged, its measurement is not a finite number: reads are not answered; the service ends (and check its spec: a plant with no saturation and an unstable A diverges when the loop does not stabilize it)", "loop", s.opt.Loop, "tick", t, "output", i, "y", v, "repeats_not_logged", notLogged)
			}
			s.divergedOnce.Do(func() { close(s.diverged) })
			return
		}
	}
	body, err := codec.Marshal(codec.PlantYPayload{Y: y, Epoch: epoch})
	if err == nil {
		var env []byte
		env, err = s.sealer.Seal(codec.Header{Kind: codec.KindPlantY, Loop: s.opt.Loop, Tick: t, From: codec.RolePlant, To: codec.RoleSensor}, body)
		if err == nil {
			err = m.Respond(env)
		}
	}
	if err != nil {
		s.opt.Log.Warn("plant reply", "err", err)
	}
}

// waitCond waits on c (whose lock is held) for at most d.
func waitCond(c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, func() {
		c.L.Lock()
		c.Broadcast()
		c.L.Unlock()
	})
	c.Wait()
	t.Stop()
}

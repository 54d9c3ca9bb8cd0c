package actuator

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// rig is an actuator on a real (embedded) NATS server, its set-up applied
// directly, and sealers for the roles that send to it.
type rig struct {
	a       *Actuator
	from    map[codec.Role]*codec.Sealer
	plant   *codec.Sealer // opens what the actuator sends the plant
	prm     mpc.Params
	mu      sync.Mutex
	applied map[uint64]Applied
	got     chan uint64
}

func newRig(t *testing.T, deadline time.Duration) *rig {
	t.Helper()
	nc := natstest.Conn(t)
	sealers := testkeys.Sealers(t)
	r := &rig{from: map[codec.Role]*codec.Sealer{}, plant: sealers[codec.RolePlant], applied: map[uint64]Applied{}, got: make(chan uint64, 16)}
	for _, role := range []codec.Role{codec.RoleSensor, codec.RoleParty0, codec.RoleParty1} {
		r.from[role] = sealers[role]
	}
	var err error
	r.a, err = New(nc, sealers[codec.RoleActuator], Options{Loop: "loop1", Deadline: deadline, OnApply: func(ap Applied) {
		r.mu.Lock()
		r.applied[ap.Tick] = ap
		r.mu.Unlock()
		r.got <- ap.Tick
	}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	r.prm = mpc.Params{Field: f, M: 1, K: 24, L: 8}
	r.a.prm, r.a.last, r.a.uBuf = r.prm, make([]float64, 1), mpc.NewMatrix(1, 1)
	return r
}

func (r *rig) send(t *testing.T, from codec.Role, kind codec.Kind, tick uint64, payload any) {
	t.Helper()
	body, err := codec.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	env, err := r.from[from].Seal(codec.Header{Kind: kind, Loop: "loop1", Tick: tick, From: from, To: codec.RoleActuator}, body)
	if err != nil {
		t.Fatal(err)
	}
	r.a.onMsg(&nats.Msg{Data: env})
}

// share sends party id's share of u = 1.5 (P0's 1.5 + r, P1's -r) for tick.
func (r *rig) share(t *testing.T, id int, tick uint64, sent int64) {
	t.Helper()
	f := r.prm.Field
	u := mpc.NewMatrix(1, 1)
	if err := f.EcdInto(u.Data, []float64{1.5}, r.prm.K, 2*r.prm.L); err != nil {
		t.Fatal(err)
	}
	rnd := mpc.NewMatrix(1, 1)
	rnd.Data[0] = f.FromUint64(12345)
	sh := mpc.NewMatrix(1, 1)
	from := codec.RoleParty0
	if id == 0 {
		f.MatAdd(sh, u, rnd)
	} else {
		f.MatSub(sh, mpc.NewMatrix(1, 1), rnd)
		from = codec.RoleParty1
	}
	r.send(t, from, codec.KindOutput, tick, codec.OutputPayload{Item: 7, U: codec.PutMatrix(f, sh), SentUnixNano: sent})
}

// nothingApplied fails the test if a tick is applied within d; what says
// when (after what), as in "tick 3 applied <what>".
func (r *rig) nothingApplied(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case tick := <-r.got:
		t.Fatalf("tick %d %s", tick, what)
	case <-time.After(d):
	}
}

func (r *rig) wait(t *testing.T, within time.Duration) Applied {
	t.Helper()
	select {
	case tick := <-r.got:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.applied[tick]
	case <-time.After(within):
		t.Fatal("nothing applied")
		return Applied{}
	}
}

// The output shares date their tick: without any notice from the sensor a
// tick is applied, its latency taken from the stamp the shares carry, and
// the notice that comes after it changes nothing.
func TestSharesDateTheTick(t *testing.T) {
	r := newRig(t, 30*time.Millisecond)
	sent := time.Now().Add(-3 * time.Millisecond).UnixNano()
	r.share(t, 0, 1, sent)
	r.share(t, 1, 1, sent)
	ap := r.wait(t, time.Second)
	if ap.Tick != 1 || ap.Miss || len(ap.U) != 1 || ap.U[0] != 1.5 {
		t.Fatalf("applied %+v, want tick 1, u = 1.5, no miss", ap)
	}
	if ap.Latency < 3*time.Millisecond || ap.Latency > time.Second {
		t.Errorf("latency %v, want at least the 3 ms since the stamp", ap.Latency)
	}
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: sent})
	r.nothingApplied(t, 60*time.Millisecond, "applied again after its notice")
}

// A tick whose shares never come is known from the sensor's notice, which
// comes after it: the fail-safe applies at the deadline from the notice's
// stamp, not from the notice's arrival.
func TestLateNoticeAppliesFailSafeAtDeadline(t *testing.T) {
	r := newRig(t, 40*time.Millisecond)
	stamp := time.Now()
	time.Sleep(10 * time.Millisecond) // the sensor's notice delay
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: stamp.UnixNano()})
	ap := r.wait(t, time.Second)
	took := time.Since(stamp)
	if ap.Tick != 1 || !ap.Miss || ap.U[0] != 0 {
		t.Fatalf("applied %+v, want tick 1's fail-safe (zero)", ap)
	}
	if took < 40*time.Millisecond || took > 40*time.Millisecond+500*time.Millisecond {
		t.Errorf("fail-safe %v after the stamp, want at the 40 ms deadline", took)
	}
}

// One share only: the tick is dated by the earliest stamp seen. A share
// whose stamp is later than the sensor's cannot put the deadline off: the
// sensor's notice brings it back to the sensor's stamp.
func TestEarliestStampDatesTheTick(t *testing.T) {
	r := newRig(t, 60*time.Millisecond)
	stamp := time.Now()
	r.share(t, 0, 1, stamp.Add(10*time.Second).UnixNano()) // a stamp far too late
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: stamp.UnixNano()})
	ap := r.wait(t, 5*time.Second)
	took := time.Since(stamp)
	if ap.Tick != 1 || !ap.Miss {
		t.Fatalf("applied %+v, want tick 1's fail-safe", ap)
	}
	if took < 60*time.Millisecond || took > 60*time.Millisecond+500*time.Millisecond {
		t.Errorf("fail-safe %v after the sensor's stamp, want at its 60 ms deadline", took)
	}
}

// A tick whose deadline comes after a later tick was applied (the deadline
// longer than the period, or simulated time) can no longer complete: its
// deadline applies nothing and reports nothing, but counts a miss, since its
// input never came. Before, it published the fail-safe for the old tick
// (which the plant refuses as a replay) and reported it after the later
// tick; later, it counted nothing, so a lost tick went unseen in the misses
// whenever the deadline was longer than the period.
func TestSupersededDeadlineAppliesNothing(t *testing.T) {
	r := newRig(t, 80*time.Millisecond)
	m := metrics.New("actuator")
	r.a.opt.Metrics = m
	now := time.Now()
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: now.UnixNano()}) // tick 1: no shares
	sent := now.Add(time.Millisecond).UnixNano()
	r.share(t, 0, 2, sent)
	r.share(t, 1, 2, sent)
	if ap := r.wait(t, time.Second); ap.Tick != 2 || ap.Miss {
		t.Fatalf("applied %+v, want tick 2", ap)
	}
	r.nothingApplied(t, 200*time.Millisecond, "reported after tick 2") // past tick 1's deadline
	if got := testutil.ToFloat64(m.Misses.WithLabelValues("loop1")); got != 1 {
		t.Errorf("%v misses counted for a superseded tick, want 1", got)
	}
}

// Once Run has returned, nothing is applied: a pending tick's deadline does
// not fire, and a share that is still delivered is dropped, not counted.
func TestNothingAppliedAfterStop(t *testing.T) {
	r := newRig(t, 50*time.Millisecond)
	m := metrics.New("actuator")
	r.a.opt.Metrics = m
	now := time.Now().UnixNano()
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: now}) // tick 1 pending, its deadline running
	r.a.stop()
	r.share(t, 0, 2, now)
	r.share(t, 1, 2, now)
	r.nothingApplied(t, 200*time.Millisecond, "applied after the actuator stopped") // past tick 1's deadline
	if got := metrics.Sum(m.Misses) + metrics.Sum(m.Rejects) + metrics.Sum(m.Ticks); got != 0 {
		t.Errorf("%v misses, rejects and ticks counted after the actuator stopped, want 0", got)
	}
}

// An actuator stopped on purpose (Run returning: a restart, an upgrade)
// applies the fail-safe once, so that the plant is not left driven by the
// last input with no watchdog left; not counted as a miss, nor reported as
// an applied tick. It takes the next tick, or the latest the sensor
// announced if later (the plant has read that one). One that never drove
// the plant, or whose last input was already a fail-safe, sends nothing;
// with the hold fail-safe it sends the last input again.
func TestShutdownAppliesFailSafe(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   FailSafe
		// then runs after tick 1's u = 1.5 is applied (drive).
		drive    bool
		then     func(t *testing.T, r *rig)
		wantTick uint64 // 0: nothing sent at the stop
		want     float64
	}{
		{name: "zero", fs: FailSafeZero, drive: true, wantTick: 2, want: 0},
		{name: "hold", fs: FailSafeHold, drive: true, wantTick: 2, want: 1.5},
		{name: "never drove the plant", fs: FailSafeZero},
		{name: "ticks pending", fs: FailSafeZero, drive: true, wantTick: 4, then: func(t *testing.T, r *rig) {
			now := time.Now().UnixNano()
			r.send(t, codec.RoleSensor, codec.KindTick, 3, codec.TickPayload{SentUnixNano: now})
			r.send(t, codec.RoleSensor, codec.KindTick, 4, codec.TickPayload{SentUnixNano: now})
		}},
		{name: "last input a fail-safe", fs: FailSafeZero, drive: true, then: func(t *testing.T, r *rig) {
			// Tick 2's notice stamped past its deadline: the fail-safe at once.
			r.send(t, codec.RoleSensor, codec.KindTick, 2, codec.TickPayload{SentUnixNano: time.Now().Add(-2 * time.Second).UnixNano()})
			if ap := r.wait(t, time.Second); ap.Tick != 2 || !ap.Miss {
				t.Fatalf("tick 2: %+v, want its fail-safe", ap)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, time.Second) // no tick's deadline passes unless stamped so
			r.a.opt.FailSafe = tc.fs
			r.a.epoch = 7 // the set-up's, which every plant input carries
			inputs := make(chan *nats.Msg, 8)
			sub, err := r.a.nc.ChanSubscribe(bus.PlantUSubject("loop1"), inputs)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := r.a.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if tc.drive {
				now := time.Now().UnixNano()
				r.share(t, 0, 1, now)
				r.share(t, 1, 1, now)
				if ap := r.wait(t, time.Second); ap.Tick != 1 || ap.U[0] != 1.5 {
					t.Fatalf("tick 1: %+v, want u = 1.5 applied", ap)
				}
				if h, u := r.plantInput(t, inputs); h.Tick != 1 || u.FailSafe || u.U[0] != 1.5 || u.Epoch != 7 {
					t.Fatalf("plant got tick %d %+v, want tick 1's u = 1.5 of epoch 7", h.Tick, u)
				}
			}
			if tc.then != nil {
				tc.then(t, r)
			}
			if err := r.a.nc.Flush(); err != nil { // what was sent is in inputs
				t.Fatal(err)
			}
			for len(inputs) > 0 { // tick 2's fail-safe, in the case that applies one
				<-inputs
			}
			misses := metrics.Sum(r.a.opt.Metrics.Misses)
			r.a.shutdown()
			if tc.wantTick == 0 {
				select {
				case m := <-inputs:
					t.Fatalf("sent the plant %d bytes at the stop, want nothing", len(m.Data))
				case <-time.After(200 * time.Millisecond):
				}
				return
			}
			h, u := r.plantInput(t, inputs)
			if h.Tick != tc.wantTick || !u.FailSafe || len(u.U) != 1 || u.U[0] != tc.want || u.Epoch != 7 {
				t.Fatalf("at the stop the plant got tick %d %+v, want tick %d's fail-safe u = %v of epoch 7", h.Tick, u, tc.wantTick, tc.want)
			}
			// Nothing more: a share of the tick it took, or of a later
			// one, applies nothing after the stop.
			now := time.Now().UnixNano()
			for _, tick := range []uint64{tc.wantTick, tc.wantTick + 1} {
				r.share(t, 0, tick, now)
				r.share(t, 1, tick, now)
			}
			r.nothingApplied(t, 100*time.Millisecond, "applied after the actuator stopped")
			select {
			case m := <-inputs:
				t.Fatalf("the plant got %d more bytes after the stop", len(m.Data))
			case <-time.After(100 * time.Millisecond):
			}
			if got := metrics.Sum(r.a.opt.Metrics.Misses) - misses; got != 0 {
				t.Errorf("the stop counted %v misses, want 0", got)
			}
		})
	}
}

// stop ends the actuator's timers (stopLocked) without the fail-safe that
// shutdown applies as Run returns.
func (a *Actuator) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopLocked()
}

// plantInput waits for the next input sent to the plant and opens it.
func (r *rig) plantInput(t *testing.T, inputs chan *nats.Msg) (codec.Header, codec.PlantUPayload) {
	t.Helper()
	select {
	case m := <-inputs:
		h, body, err := r.plant.Open(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var u codec.PlantUPayload
		if err := codec.Unmarshal(body, &u); err != nil {
			t.Fatal(err)
		}
		return h, u
	case <-time.After(time.Second):
		t.Fatal("nothing sent to the plant")
		return codec.Header{}, codec.PlantUPayload{}
	}
}

// Both shares of a tick held back past its deadline (by a broker, or a
// stalled network) and then delivered together: the tick's deadline has
// passed, so the fail-safe applies, never the stale u, whichever of the
// shares and the due deadline takes the lock first.
func TestSharesPastDeadlineApplyFailSafe(t *testing.T) {
	for i := range 20 {
		r := newRig(t, 30*time.Millisecond)
		m := metrics.New("actuator")
		r.a.opt.Metrics = m
		sent := time.Now().Add(-100 * time.Millisecond).UnixNano()
		tick := uint64(i + 1)
		r.share(t, 0, tick, sent)
		r.share(t, 1, tick, sent)
		ap := r.wait(t, time.Second)
		if ap.Tick != tick || !ap.Miss || ap.U[0] != 0 {
			t.Fatalf("run %d: applied %+v, want tick %d's fail-safe (zero), not u = 1.5 from shares past the deadline", i, ap, tick)
		}
		if got := testutil.ToFloat64(m.Rejects.WithLabelValues("late")); got != 2 {
			t.Errorf("run %d: %v shares counted late, want 2", i, got)
		}
	}
}

// Nothing reaches the actuator (the sensor, the broker or the network
// down), so no tick is there to miss its deadline: the watchdog applies the
// fail-safe once, as the next tick, and the next input re-arms it. A late
// share of the tick the watchdog took is refused. Before the first input it
// does not fire.
func TestWatchdogAppliesFailSafeOnce(t *testing.T) {
	r := newRig(t, 30*time.Millisecond)
	const watchdog = 100 * time.Millisecond
	r.a.opt.Watchdog = watchdog
	r.a.startWatchdog()
	defer r.a.stop()
	misses := func() float64 { return testutil.ToFloat64(r.a.opt.Metrics.Misses.WithLabelValues("loop1")) }
	// Before the first input (the sensor waiting for the plant, say) it
	// does not fire.
	r.nothingApplied(t, 2*watchdog, "applied before any input")

	r.share(t, 0, 1, time.Now().UnixNano())
	r.share(t, 1, 1, time.Now().UnixNano())
	if ap := r.wait(t, time.Second); ap.Tick != 1 || ap.Miss || ap.U[0] != 1.5 {
		t.Fatalf("tick 1: %+v, want u = 1.5 applied", ap)
	}
	at := time.Now()
	ap := r.wait(t, 2*time.Second)
	if quiet := time.Since(at); ap.Tick != 2 || !ap.Miss || ap.U[0] != 0 || quiet < watchdog-10*time.Millisecond {
		t.Fatalf("after %v of silence: %+v; want the zero fail-safe as tick 2, after %v", quiet, ap, watchdog)
	}
	r.nothingApplied(t, 3*watchdog, "applied after the watchdog's; want the fail-safe once")
	if m := misses(); m != 1 {
		t.Fatalf("%v misses counted, want 1", m)
	}
	late := testutil.ToFloat64(r.a.opt.Metrics.Rejects.WithLabelValues("late"))
	r.share(t, 0, 2, time.Now().UnixNano())
	if got := testutil.ToFloat64(r.a.opt.Metrics.Rejects.WithLabelValues("late")) - late; got != 1 {
		t.Errorf("a share of the watchdog's tick: %v late rejects, want 1", got)
	}

	// An input re-arms it.
	r.share(t, 0, 3, time.Now().UnixNano())
	r.share(t, 1, 3, time.Now().UnixNano())
	if ap := r.wait(t, time.Second); ap.Tick != 3 || ap.Miss {
		t.Fatalf("tick 3: %+v, want applied", ap)
	}
	if ap := r.wait(t, 2*time.Second); ap.Tick != 4 || !ap.Miss {
		t.Fatalf("after tick 3: %+v, want the fail-safe as tick 4", ap)
	}
	if m := misses(); m != 2 {
		t.Fatalf("%v misses counted, want 2", m)
	}
}

// A sensor whose period is longer than the watchdog (DUET_PERIOD=2s against
// the default 1s, here 250 ms against 100 ms) does not lose every other tick
// to it: once two notices have given the period, the watchdog waits two
// periods and the deadline. Before, it fired between every two ticks, and
// the fail-safe took the next tick, whose input was refused as late. (The
// first gap, before the period is known, still costs one tick.) A sensor
// that then stops still gets the fail-safe, after the longer wait.
func TestWatchdogWaitsForASlowSensor(t *testing.T) {
	const deadline, watchdog, period = 30 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond
	r := newRig(t, deadline)
	r.a.opt.Watchdog = watchdog
	r.a.startWatchdog()
	defer r.a.stop()
	tick := func(n uint64) {
		now := time.Now().UnixNano()
		r.share(t, 0, n, now)
		r.share(t, 1, n, now)
		r.send(t, codec.RoleSensor, codec.KindTick, n, codec.TickPayload{SentUnixNano: now})
	}
	start := time.Now()
	var failSafes []uint64
	for n := uint64(1); n <= 8; n++ {
		time.Sleep(time.Until(start.Add(time.Duration(n-1) * period)))
		tick(n)
		// Everything applied up to this tick: its own input, or the
		// watchdog's fail-safe that took its number.
		for done := false; !done; {
			ap := r.wait(t, time.Second)
			if ap.Miss {
				failSafes = append(failSafes, ap.Tick)
			}
			done = ap.Tick >= n
		}
	}
	if len(failSafes) > 1 || len(failSafes) == 1 && failSafes[0] != 2 {
		t.Fatalf("the watchdog applied the fail-safe as ticks %v with a %v period; want at most tick 2's, before the period was known", failSafes, period)
	}
	at := time.Now()
	ap := r.wait(t, 3*time.Second)
	if quiet := time.Since(at); ap.Tick != 9 || !ap.Miss || quiet < 2*period {
		t.Fatalf("the sensor stopped: %+v after %v; want the fail-safe as tick 9 after 2 periods and the deadline (%v)", ap, quiet, 2*period+deadline)
	}
}

// One long gap between two notices (a stalled sensor, or its clock stepped)
// gives a long period for one tick only: the next notice, at the usual
// cadence, brings the watchdog forward again, also when its tick's input
// was applied (and the watchdog armed) before the notice came, as the
// shares usually come before it. The sensor then stopping gets the
// fail-safe after two periods and the deadline, not after the long gap's.
func TestWatchdogBroughtForward(t *testing.T) {
	const deadline, watchdog, period, gap = 30 * time.Millisecond, 100 * time.Millisecond, 50 * time.Millisecond, 600 * time.Millisecond
	r := newRig(t, deadline)
	r.a.opt.Watchdog = watchdog
	r.a.startWatchdog()
	defer r.a.stop()
	tick := func(n uint64, stamp time.Time) {
		r.share(t, 0, n, stamp.UnixNano())
		r.share(t, 1, n, stamp.UnixNano())
		r.send(t, codec.RoleSensor, codec.KindTick, n, codec.TickPayload{SentUnixNano: stamp.UnixNano()})
	}
	drain := func() {
		for {
			select {
			case <-r.got:
			default:
				return
			}
		}
	}
	start := time.Now()
	tick(1, start)
	time.Sleep(period)
	tick(2, start.Add(period))
	time.Sleep(gap) // the watchdog fires once meanwhile, as tick 3
	tick(3, start.Add(period+gap))
	time.Sleep(period)
	drain()
	tick(4, start.Add(2*period+gap))
	if ap := r.wait(t, time.Second); ap.Tick != 4 || ap.Miss {
		t.Fatalf("tick 4: %+v, want its input applied", ap)
	}
	at := time.Now()
	ap := r.wait(t, 3*time.Second)
	if quiet := time.Since(at); ap.Tick != 5 || !ap.Miss || quiet > gap {
		t.Fatalf("the sensor stopped after tick 4: %+v after %v; want the fail-safe as tick 5 after about %v, well before the gap's %v",
			ap, quiet, 2*period+deadline, 2*gap+deadline)
	}
}

// A watchdog no longer than the deadline would fire between a tick and its
// deadline: refused, by the options and by the service's configuration.
func TestWatchdogLongerThanDeadline(t *testing.T) {
	if _, err := New(natstest.Conn(t), testkeys.Sealers(t)[codec.RoleActuator], Options{Loop: "loop1", Deadline: 30 * time.Millisecond, Watchdog: 30 * time.Millisecond}); err == nil {
		t.Error("New accepted a watchdog equal to the deadline")
	}
	for _, wd := range []time.Duration{-time.Second, 20 * time.Millisecond, 2 * time.Hour} {
		c := Config{Loop: "loop1", Deadline: 30 * time.Millisecond, FailSafe: "zero", Watchdog: wd}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "DUET_WATCHDOG") {
			t.Errorf("DUET_WATCHDOG=%v: %v, want an error naming DUET_WATCHDOG", wd, err)
		}
	}
	for _, wd := range []time.Duration{0, time.Second} {
		c := Config{Loop: "loop1", Deadline: 30 * time.Millisecond, FailSafe: "zero", Watchdog: wd}
		if err := c.Validate(); err != nil {
			t.Errorf("DUET_WATCHDOG=%v: %v", wd, err)
		}
	}
}

// A deadline longer than 64 sensor periods: every tick the sensor dated is
// still ended by its own deadline, however many later ticks came meanwhile.
// Before, a tick more than 64 behind the newest was dropped with its
// deadline timer, so ticks whose shares never came applied no fail-safe
// and counted no miss (here ticks 1 to 135 of 200).
func TestLongDeadlineEndsEveryDatedTick(t *testing.T) {
	const ticks, step = 200, 2 * time.Millisecond
	r := newRig(t, time.Second)
	m := metrics.New("actuator")
	r.a.opt.Metrics = m
	now := time.Now()
	for k := uint64(1); k <= ticks; k++ { // the notices of ticks 2 ms apart, no shares
		r.send(t, codec.RoleSensor, codec.KindTick, k, codec.TickPayload{SentUnixNano: now.Add(-time.Duration(ticks-k) * step).UnixNano()})
	}
	first := r.wait(t, 5*time.Second)
	if !first.Miss || first.Tick > 20 {
		t.Errorf("first applied %+v, want the fail-safe of one of the oldest ticks, whose deadlines come first", first)
	}
	go func() { // later fail-safes: keep OnApply from blocking
		for range r.got {
		}
	}()
	misses := func() float64 { return testutil.ToFloat64(m.Misses.WithLabelValues("loop1")) }
	deadline := time.Now().Add(5 * time.Second)
	for misses() < ticks && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // nothing counted twice
	if got := misses(); got != ticks {
		t.Errorf("%v misses counted, want %d: one for every tick", got, ticks)
	}
}

// A tick no stamp dates (its shares and notice carry none) has no deadline:
// once it is more than 64 ticks behind the newest it is forgotten, counted
// as a miss, so the ticks pending stay bounded and every tick is either
// pending or counted.
func TestUndatedTickForgottenAsMiss(t *testing.T) {
	const ticks = 200
	r := newRig(t, 50*time.Millisecond)
	m := metrics.New("actuator")
	r.a.opt.Metrics = m
	for k := uint64(1); k <= ticks; k++ {
		r.share(t, 0, k, 0) // P0's share alone, undated
	}
	misses := int(testutil.ToFloat64(m.Misses.WithLabelValues("loop1")))
	r.a.mu.Lock()
	pending, oldest := len(r.a.ticks), uint64(ticks)
	for k := range r.a.ticks {
		oldest = min(oldest, k)
	}
	r.a.mu.Unlock()
	if misses == 0 || misses+pending != ticks || pending > 2*pruneWindow+2 {
		t.Errorf("%d misses and %d ticks pending after %d undated ticks, want some forgotten as misses, the two adding up, at most %d pending", misses, pending, ticks, 2*pruneWindow+2)
	}
	if uint64(misses)+1 != oldest {
		t.Errorf("oldest pending tick %d after %d forgotten, want the oldest forgotten first", oldest, misses)
	}
	// The other share of a forgotten tick is late: it opens nothing again
	// and counts no second miss.
	r.share(t, 1, 1, 0)
	r.a.mu.Lock()
	_, reopened := r.a.ticks[1]
	r.a.mu.Unlock()
	if reopened {
		t.Error("a forgotten tick was opened again by its other share")
	}
	if got := int(testutil.ToFloat64(m.Misses.WithLabelValues("loop1"))); got != misses {
		t.Errorf("%d misses after a forgotten tick's other share, want %d", got, misses)
	}
	if got := testutil.ToFloat64(m.Rejects.WithLabelValues("late")); got != 1 {
		t.Errorf("%v late rejects, want 1: the forgotten tick's share", got)
	}
}

// A stamp from the future (the sensor's clock ahead of the actuator's)
// gives its tick no more than one deadline from when it is dated, and a
// later message with an earlier stamp, still from the future, cannot put
// that deadline off. Before, a stamp 10 s ahead put the fail-safe 10 s off.
func TestFutureStampWaitsOneDeadline(t *testing.T) {
	const deadline = 500 * time.Millisecond // ample for the steps below on a loaded machine
	r := newRig(t, deadline)
	began := time.Now()
	ahead := began.Add(10 * time.Second)
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: ahead.UnixNano()})
	due := func() time.Time {
		r.a.mu.Lock()
		defer r.a.mu.Unlock()
		if p := r.a.ticks[1]; p != nil {
			return p.due
		}
		return time.Time{}
	}
	first := due()
	if first.IsZero() || first.After(time.Now().Add(deadline)) {
		t.Fatalf("tick 1 due at %v, want within the deadline of now", first)
	}
	time.Sleep(10 * time.Millisecond)
	r.share(t, 0, 1, ahead.Add(-time.Nanosecond).UnixNano()) // earlier, still ahead: later than the deadline set
	if got := due(); !got.Equal(first) {
		t.Errorf("tick 1 due at %v after an earlier stamp from the future, want unchanged %v", got, first)
	}
	ap := r.wait(t, 5*time.Second)
	if ap.Tick != 1 || !ap.Miss {
		t.Fatalf("applied %+v, want tick 1's fail-safe", ap)
	}
	if took := time.Since(began); took < deadline {
		t.Errorf("fail-safe after %v, want at least the deadline, %v", took, deadline)
	}
}

// A tick stamped ahead of the actuator's clock and applied in time has a
// latency of 0, not a negative one that would pull duet_tick_latency_seconds'
// sum and quantiles below what the ticks took.
func TestFutureStampLatencyNotNegative(t *testing.T) {
	r := newRig(t, 500*time.Millisecond)
	ahead := time.Now().Add(100 * time.Millisecond).UnixNano()
	r.share(t, 0, 1, ahead)
	r.share(t, 1, 1, ahead)
	ap := r.wait(t, 5*time.Second)
	if ap.Tick != 1 || ap.Miss {
		t.Fatalf("applied %+v, want tick 1 in time", ap)
	}
	if ap.Latency < 0 {
		t.Errorf("latency %v, want at least 0", ap.Latency)
	}
	var d dto.Metric
	if err := r.a.opt.Metrics.TickLatency.WithLabelValues("loop1").(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	if h := d.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 0 {
		t.Errorf("latency histogram: %d samples summing to %v s, want 1 of at least 0", h.GetSampleCount(), h.GetSampleSum())
	}
}

// Above maxPending ticks pending at once (here 100; the code's limit is
// 65,536) the oldest quarter meets its deadline at once, in order, so a
// flood of dated ticks cannot grow the actuator's memory without bound: 150
// ticks end ticks 1 to 26 at tick 101 and 27 to 52 at tick 127, leaving 98
// pending. A new tick older than every pending one, coming when they are
// too many, is among those ended, and refused.
func TestPendingTicksBounded(t *testing.T) {
	defer func(n int) { maxPending = n }(maxPending)
	maxPending = 100
	// run sends the sensor's notices of ticks, then, if late is not 0, P0's
	// share of tick late (the sensor's notices must rise: its replay guard).
	run := func(ticks []uint64, late uint64) ([]uint64, int) {
		r := newRig(t, 10*time.Second)
		defer r.a.stop()
		var (
			mu      sync.Mutex
			applied []uint64
		)
		go func() {
			for tick := range r.got {
				mu.Lock()
				applied = append(applied, tick)
				mu.Unlock()
			}
		}()
		sent := len(ticks)
		now := time.Now().UnixNano()
		for _, k := range ticks {
			r.send(t, codec.RoleSensor, codec.KindTick, k, codec.TickPayload{SentUnixNano: now})
		}
		if late != 0 {
			r.share(t, 0, late, now)
			sent++
		}
		r.a.mu.Lock()
		pending := len(r.a.ticks)
		r.a.mu.Unlock()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			n := len(applied)
			mu.Unlock()
			if n >= sent-pending || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(applied), pending
	}
	var ticks []uint64
	for k := uint64(1); k <= 150; k++ {
		ticks = append(ticks, k)
	}
	applied, pending := run(ticks, 0)
	if pending != 98 || len(applied) != 52 {
		t.Errorf("%d ticks pending and %d ended after 150, want 98 and 52 (a quarter at a time)", pending, len(applied))
	}
	for i, tick := range applied {
		if tick != uint64(i+1) {
			t.Fatalf("fail-safes applied to ticks %v, want the oldest first, in order", applied)
		}
	}
	// Ticks 1000 to 1099 pending, then P0's share of tick 500: it is the
	// oldest of 101, and ends with 1000 to 1024.
	ticks = ticks[:0]
	for k := uint64(1000); k < 1100; k++ {
		ticks = append(ticks, k)
	}
	applied, pending = run(ticks, 500)
	if pending != 75 || len(applied) != 26 || applied[0] != 500 || applied[25] != 1024 {
		t.Errorf("after ticks 1000 to 1099 and then 500: %d pending, ended %v; want 75 pending, ended 500 and 1000 to 1024", pending, applied)
	}
}

// Both parties' shares of tick 2^64-1, which no loop reaches, are refused
// as malformed: before, they were applied, the last applied tick stayed
// there, every later tick was refused as late, and the watchdog's next tick
// (lastApp+1) wrapped to 0.
func TestTickBeyondMaxTickRefused(t *testing.T) {
	r := newRig(t, 30*time.Millisecond)
	malformed := func() float64 { return testutil.ToFloat64(r.a.opt.Metrics.Rejects.WithLabelValues("malformed")) }
	before := malformed()
	now := time.Now().UnixNano()
	r.share(t, 0, 1<<64-1, now)
	r.share(t, 1, 1<<64-1, now)
	if got := malformed() - before; got != 2 {
		t.Fatalf("shares of tick 2^64-1: %v malformed rejects, want 2", got)
	}
	r.nothingApplied(t, 60*time.Millisecond, "applied")
	r.share(t, 0, 1, time.Now().UnixNano())
	r.share(t, 1, 1, time.Now().UnixNano())
	if ap := r.wait(t, time.Second); ap.Tick != 1 || ap.Miss || ap.U[0] != 1.5 {
		t.Fatalf("tick 1 after the refusals: %+v, want u = 1.5 applied", ap)
	}
}

// One party's share of a tick far beyond the sensor's latest notice (a
// faulty party's tick number) is refused as malformed: before, it took the
// party's replay guard, so that the party's shares of every later tick the
// sensor sent were refused as replays, and its fail-safe at the deadline
// made it the last tick applied. A share near the notices is taken as
// before, and so is a tick further ahead after a silence, which the sensor
// could have reached meanwhile.
func TestUnannouncedTickRefused(t *testing.T) {
	r := newRig(t, 30*time.Millisecond)
	malformed := func() float64 { return testutil.ToFloat64(r.a.opt.Metrics.Rejects.WithLabelValues("malformed")) }
	now := func() int64 { return time.Now().UnixNano() }
	r.share(t, 0, 1, now())
	r.share(t, 1, 1, now())
	if ap := r.wait(t, time.Second); ap.Tick != 1 || ap.Miss {
		t.Fatalf("tick 1: %+v, want applied", ap)
	}
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: now()})
	before := malformed()
	r.share(t, 0, 1<<40, now())
	if got := malformed() - before; got != 1 {
		t.Fatalf("one party's share of tick 2^40: %v malformed rejects, want 1", got)
	}
	r.nothingApplied(t, 100*time.Millisecond, "applied after one party's share of tick 2^40")
	r.share(t, 0, 2, now())
	r.share(t, 1, 2, now())
	if ap := r.wait(t, time.Second); ap.Tick != 2 || ap.Miss || ap.U[0] != 1.5 {
		t.Fatalf("tick 2 after the refusal: %+v, want u = 1.5 applied", ap)
	}
	// At the bound (the notice at 1, tick 2 applied): taken, and one share
	// alone gets the fail-safe at its deadline, as before.
	r.share(t, 0, 2+codec.ReachAhead, now())
	if ap := r.wait(t, time.Second); ap.Tick != 2+codec.ReachAhead || !ap.Miss {
		t.Fatalf("one share of tick %d: %+v, want the fail-safe", 2+codec.ReachAhead, ap)
	}
	if got := malformed() - before; got != 1 {
		t.Fatalf("%v malformed rejects in all, want 1", got)
	}
	// After 2 s with nothing (a partition, a server restart), a tick up to
	// 2,000 further is taken: at the sensor's shortest period, 1 ms, it
	// could have counted that many meanwhile. 2^40 is still refused.
	r.a.mu.Lock()
	far := r.a.lastApp + codec.ReachAhead + 1900
	r.a.advanced = r.a.advanced.Add(-2 * time.Second)
	r.a.mu.Unlock()
	r.share(t, 0, far, now())
	r.share(t, 1, far, now())
	if ap := r.wait(t, time.Second); ap.Tick != far || ap.Miss {
		t.Fatalf("tick %d after 2 s of silence: %+v, want applied", far, ap)
	}
	r.share(t, 0, 1<<40, now())
	if got := malformed() - before; got != 2 {
		t.Fatalf("tick 2^40 after the silence: %v malformed rejects in all, want 2", got)
	}
}

// TestEarlierSetupRefused: a notice or an output share stamped before the
// set-up's epoch, as every one of an earlier set-up of the loop is, is
// refused as a replay and applies nothing; the genuine shares of the same
// tick are then applied. A new set-up numbers its ticks from 1 again and the
// actuator's replay guard starts empty: before, an earlier set-up's notice
// replayed by the broker applied the fail-safe at once (its stamp long
// past), and the genuine tick's shares came too late.
func TestEarlierSetupRefused(t *testing.T) {
	r := newRig(t, 30*time.Millisecond)
	m := metrics.New("actuator")
	r.a.opt.Metrics = m
	epoch := time.Now().Add(-time.Second).UnixNano()
	r.a.epoch = uint64(epoch)
	old := epoch - int64(time.Minute)
	r.send(t, codec.RoleSensor, codec.KindTick, 1, codec.TickPayload{SentUnixNano: old})
	r.share(t, 0, 1, old)
	r.share(t, 1, 1, old)
	r.nothingApplied(t, 100*time.Millisecond, "applied on an earlier set-up's notice and shares")
	if got := testutil.ToFloat64(m.Rejects.WithLabelValues("replay")); got != 3 {
		t.Errorf("%v replay rejects for an earlier set-up's notice and two shares, want 3", got)
	}
	sent := time.Now().UnixNano()
	r.share(t, 0, 1, sent)
	r.share(t, 1, 1, sent)
	if ap := r.wait(t, time.Second); ap.Tick != 1 || ap.Miss || len(ap.U) != 1 || ap.U[0] != 1.5 {
		t.Fatalf("applied %+v, want tick 1, u = 1.5, no miss", ap)
	}
}

package plantsvc

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
)

// countingPlant measures how many periods it has been advanced.
type countingPlant struct {
	mu    sync.Mutex
	steps int
}

func (p *countingPlant) Outputs() int { return 1 }
func (p *countingPlant) Inputs() int  { return 1 }
func (p *countingPlant) Measure() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return []float64{float64(p.steps)}
}
func (p *countingPlant) Step([]float64) {
	p.mu.Lock()
	p.steps++
	p.mu.Unlock()
}

// rig is the plant service on an embedded NATS server, with the sensor's
// and the actuator's sealers.
type rig struct {
	t       *testing.T
	nc      *nats.Conn
	svc     *Service
	pl      *countingPlant
	m       *metrics.Set
	sensor  *codec.Sealer
	act     *codec.Sealer
	mu      sync.Mutex
	stepped []uint64  // the ticks answered after an advance
	with    []float64 // the input of each advance
}

func newRig(t *testing.T, wait time.Duration) *rig {
	nc := natstest.Conn(t)
	sealers := testkeys.Sealers(t)
	r := &rig{t: t, nc: nc, pl: &countingPlant{}, m: metrics.New("plant"), sensor: sealers[codec.RoleSensor], act: sealers[codec.RoleActuator]}
	var err error
	r.svc, err = New(nc, sealers[codec.RolePlant], Options{Loop: "loop1", Plant: r.pl, Wait: wait, Metrics: r.m,
		OnStep: func(tick uint64, u, _ []float64) {
			if u != nil {
				r.mu.Lock()
				r.stepped = append(r.stepped, tick)
				r.with = append(r.with, u[0])
				r.mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// read asks for tick's measurement as a sensor of an earlier release does
// (no set-up epoch: readAt's epoch 0).
func (r *rig) read(tick uint64, timeout time.Duration) (float64, error) {
	y, _, err := r.readAt(tick, 0, timeout)
	return y, err
}

// readAt asks for tick's measurement as the sensor does, its read carrying
// the set-up epoch (none for 0), waiting up to timeout, and returns y and
// the epoch the answer echoed; while the service has not yet subscribed (no
// responders), it asks again.
func (r *rig) readAt(tick, epoch uint64, timeout time.Duration) (float64, uint64, error) {
	env := r.sealedReadAt(tick, epoch).Data
	msg, err := r.nc.Request(bus.PlantYSubject("loop1"), env, timeout)
	for end := time.Now().Add(5 * time.Second); errors.Is(err, nats.ErrNoResponders) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		msg, err = r.nc.Request(bus.PlantYSubject("loop1"), env, timeout)
	}
	if err != nil {
		return math.NaN(), 0, err
	}
	_, reply, err := r.sensor.Open(msg.Data)
	if err != nil {
		r.t.Fatal(err)
	}
	var yp codec.PlantYPayload
	if err := codec.Unmarshal(reply, &yp); err != nil {
		r.t.Fatal(err)
	}
	return yp.Y[0], yp.Epoch, nil
}

// reading waits until the service has started reading tick.
func (r *rig) reading(tick uint64) {
	r.t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.svc.mu.Lock()
		at := r.svc.reading
		r.svc.mu.Unlock()
		if at == tick {
			return
		}
		if time.Now().After(end) {
			r.t.Fatalf("the plant is reading tick %d, want %d", at, tick)
		}
	}
}

// input sends the actuator's input for tick, as an actuator of an earlier
// release does (no set-up epoch: inputAt's epoch 0).
func (r *rig) input(tick uint64, u float64) { r.inputAt(tick, u, 0) }

// inputAt sends the actuator's input for tick of set-up epoch.
func (r *rig) inputAt(tick uint64, u float64, epoch uint64) {
	if err := r.nc.Publish(bus.PlantUSubject("loop1"), r.sealedInput(tick, u, epoch).Data); err != nil {
		r.t.Fatal(err)
	}
}

// sealedInput is the actuator's input for tick of set-up epoch as the
// plant's subscription delivers it.
func (r *rig) sealedInput(tick uint64, u float64, epoch uint64) *nats.Msg {
	body, err := codec.Marshal(codec.PlantUPayload{U: []float64{u}, Epoch: epoch})
	if err != nil {
		r.t.Fatal(err)
	}
	env, err := r.act.Seal(codec.Header{Kind: codec.KindPlantU, Loop: "loop1", Tick: tick, From: codec.RoleActuator, To: codec.RolePlant}, body)
	if err != nil {
		r.t.Fatal(err)
	}
	return &nats.Msg{Subject: bus.PlantUSubject("loop1"), Data: env}
}

// check fails unless the plant advanced once, answering tick, with misses
// inputs held.
func (r *rig) check(tick uint64, misses float64) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if steps := r.pl.Measure()[0]; steps != 1 || len(r.stepped) != 1 || r.stepped[0] != tick {
		r.t.Fatalf("the plant advanced %v periods, reads answered after an advance: %v; want 1, [%d]", steps, r.stepped, tick)
	}
	if n := metrics.Sum(r.m.Misses); n != misses {
		r.t.Fatalf("%v inputs held, want %v", n, misses)
	}
}

// TestLaterReadTakesOverAWaitingOne: a read waits for the previous tick's
// input up to Wait. When the sensor gives a read up first (its read timeout
// shorter than Wait) and reads the next tick, the later read takes over:
// the plant advances one period when the input comes, and answers the
// later read only. Before, the earlier read went on waiting and, the input
// taken by the later one, advanced the plant again with the last input held
// when its Wait ended, setting the last tick read back: two periods for one
// input (the test fails so: [3 2]).
func TestLaterReadTakesOverAWaitingOne(t *testing.T) {
	r := newRig(t, time.Second)
	if y, err := r.read(1, time.Second); err != nil || y != 0 {
		t.Fatalf("the first read: y = %v, %v", y, err)
	}
	// Tick 1's input does not come: the sensor gives tick 2's read up after
	// 100 ms, and reads tick 3 while tick 2's read still waits.
	waitEnds := time.Now().Add(time.Second) // tick 2's read's Wait
	if _, err := r.read(2, 100*time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("tick 2's read: %v, want a timeout", err)
	}
	type result struct {
		y   float64
		err error
	}
	third := make(chan result, 1)
	go func() {
		y, err := r.read(3, 800*time.Millisecond)
		third <- result{y, err}
	}()
	r.reading(3)
	r.input(1, 0.5)
	if res := <-third; res.err != nil || res.y != 1 {
		t.Errorf("tick 3's read: y = %v, %v; want 1 (one period advanced)", res.y, res.err)
	}
	// Tick 2's read, had it gone on waiting, would advance the plant again
	// with the last input held when its Wait ends.
	time.Sleep(time.Until(waitEnds) + 300*time.Millisecond)
	r.check(3, 0)
}

// TestLostInputHeldAfterWait: with an input lost and the sensor giving
// every read up before Wait ends, the reads that take over keep the first
// one's deadline, so the plant still advances with the last input held
// once Wait has passed, and answers the read of that moment. With a
// deadline of its own for each read, no read ever reached it and the plant
// stopped answering for good. (A read answered just as the sensor gave it
// up leaves one more advance, also with the input held.)
func TestLostInputHeldAfterWait(t *testing.T) {
	r := newRig(t, 250*time.Millisecond)
	if y, err := r.read(1, time.Second); err != nil || y != 0 {
		t.Fatalf("the first read: y = %v, %v", y, err)
	}
	var y float64
	tick, end := uint64(2), time.Now().Add(2*time.Second)
	for ; ; tick++ {
		var err error
		if y, err = r.read(tick, 100*time.Millisecond); err == nil {
			break
		}
		if err != nats.ErrTimeout || time.Now().After(end) {
			t.Fatalf("tick %d's read: %v; no read answered in 2 s with Wait 250 ms", tick, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	held := metrics.Sum(r.m.Misses)
	if tick < 4 || y < 1 || held != y || len(r.stepped) != int(y) || r.stepped[len(r.stepped)-1] != tick {
		t.Fatalf("tick %d's read answered with y = %v after %v inputs held, reads answered after an advance %v; want tick >= 4 and y advances, each with the input held, the last answering tick %d",
			tick, y, held, r.stepped, tick)
	}
	t.Logf("tick %d's read answered, y = %v", tick, y)
}

// TestWatchdogFailSafeHeld: the actuator's watchdog applies its fail-safe as
// the tick after the last it applied, while the sensor is silent; the plant
// holds it, so the first advance after the silence uses the fail-safe, not
// the last input before it (nor, had the read waited out Wait, the last
// input held and counted). Before, a read used only the last tick
// read's input, and the fail-safe was never applied (the test fails so:
// advanced with 0.7).
func TestWatchdogFailSafeHeld(t *testing.T) {
	r := newRig(t, time.Second)
	if _, err := r.read(1, time.Second); err != nil {
		t.Fatal(err)
	}
	r.input(1, 0.5)
	if y, err := r.read(2, time.Second); err != nil || y != 1 {
		t.Fatalf("tick 2's read: y = %v, %v; want 1", y, err)
	}
	r.input(2, 0.7)
	r.input(3, 0) // the watchdog's zero fail-safe; then the sensor resumes at 100
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r.svc.mu.Lock()
		_, in := r.svc.inputs[3]
		r.svc.mu.Unlock()
		if in {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the fail-safe input never reached the plant")
		}
	}
	if y, err := r.read(100, 2*time.Second); err != nil || y != 2 {
		t.Fatalf("tick 100's read: y = %v, %v; want 2", y, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.with) != 2 || r.with[0] != 0.5 || r.with[1] != 0 {
		t.Fatalf("the plant advanced with %v, want [0.5 0]: the fail-safe held after the silence", r.with)
	}
	if n := metrics.Sum(r.m.Misses); n != 0 {
		t.Errorf("%v inputs held, want 0", n)
	}
}

// TestSetupEpochs: the reads carry the set-up epoch and the answers echo
// it; the plant takes inputs of the epoch it is read for only, so that a
// broker that kept an earlier set-up's inputs or reads cannot replay them
// (tick numbers start from 1 again in a new set-up). A read of a later
// epoch starts the ticks afresh, without a restart: before, the plant
// refused a new set-up's reads as replays until it was restarted. Inputs
// before the plant's first read are dropped: a restarted plant knows no
// set-up yet.
func TestSetupEpochs(t *testing.T) {
	const e1, e2 = 1_800_000_000_000_000_000, 1_800_000_100_000_000_000
	r := newRig(t, time.Second)
	rejects := func(reason string) float64 { return testutil.ToFloat64(r.m.Rejects.WithLabelValues(reason)) }
	inputs := func() int {
		r.svc.mu.Lock()
		defer r.svc.mu.Unlock()
		return len(r.svc.inputs)
	}
	// Before any read: dropped, counted nowhere.
	r.svc.onInput(r.sealedInput(1, 0.9, e1))
	if n := inputs(); n != 0 || rejects("replay") != 0 {
		t.Fatalf("an input before the first read: %d held, %v refused; want dropped", n, rejects("replay"))
	}
	if y, echo, err := r.readAt(1, e1, time.Second); err != nil || y != 0 || echo != e1 {
		t.Fatalf("tick 1's read: y = %v, epoch %d, %v; want 0, %d", y, echo, err, uint64(e1))
	}
	// Refused, before the genuine input, which the read waits for.
	r.inputAt(1, 0.6, e1-1) // an earlier set-up's, replayed
	r.inputAt(1, 0.7, 0)    // an actuator of an earlier release
	r.inputAt(1, 0.5, e1)
	if y, echo, err := r.readAt(2, e1, time.Second); err != nil || y != 1 || echo != e1 {
		t.Fatalf("tick 2's read: y = %v, epoch %d, %v; want 1, %d", y, echo, err, uint64(e1))
	}
	r.mu.Lock()
	with := append([]float64(nil), r.with...)
	r.mu.Unlock()
	if len(with) != 1 || with[0] != 0.5 {
		t.Fatalf("the plant advanced with %v, want [0.5]: the set-up's input only", with)
	}
	if rejects("replay") != 1 || rejects("version") != 1 {
		t.Errorf("refused: %v replay, %v version; want 1 and 1", rejects("replay"), rejects("version"))
	}
	// An earlier set-up's read, replayed: not answered.
	if _, _, err := r.readAt(3, e1-1, 200*time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("a read of an earlier set-up: %v, want no answer", err)
	}
	if rejects("replay") != 2 {
		t.Errorf("%v replays refused, want 2", rejects("replay"))
	}
	// A later set-up's input before its first read: dropped, not refused.
	r.svc.onInput(r.sealedInput(5, 0.8, e2))
	if n := inputs(); n != 0 || rejects("replay") != 2 {
		t.Fatalf("a later set-up's input before its read: %d held, %v replays refused; want dropped", n, rejects("replay"))
	}
	// A new set-up: its ticks from 1 again, answered at once.
	if y, echo, err := r.readAt(1, e2, time.Second); err != nil || y != 1 || echo != e2 {
		t.Fatalf("the new set-up's tick 1: y = %v, epoch %d, %v; want 1 (not advanced), %d", y, echo, err, uint64(e2))
	}
	if n := inputs(); n != 0 {
		t.Errorf("%d inputs held after the new set-up's first read, want 0", n)
	}
	r.inputAt(1, 0.3, e1) // the earlier set-up's tick 1, replayed
	r.inputAt(1, 0.25, e2)
	if y, _, err := r.readAt(2, e2, time.Second); err != nil || y != 2 {
		t.Fatalf("the new set-up's tick 2: y = %v, %v; want 2", y, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.with) != 2 || r.with[1] != 0.25 {
		t.Fatalf("the plant advanced with %v, want [0.5 0.25]", r.with)
	}
	if rejects("replay") != 3 || metrics.Sum(r.m.Misses) != 0 {
		t.Errorf("%v replays refused, %v misses (inputs held); want 3 and 0", rejects("replay"), metrics.Sum(r.m.Misses))
	}
}

// TestEarlierReleasesRefusedAsVersion: a sensor of an earlier release reads
// without the set-up epoch (epoch 0). Such reads are served, but an input
// of a set-up epoch then is refused as the wire version, not a replay, and
// so is a read without the epoch once the plant is read for one (a sensor
// rolled back), and an input without one (an actuator of an earlier
// release).
func TestEarlierReleasesRefusedAsVersion(t *testing.T) {
	const e1 = 1_800_000_000_000_000_000
	r := newRig(t, time.Second)
	version := func() float64 { return testutil.ToFloat64(r.m.Rejects.WithLabelValues("version")) }
	if y, echo, err := r.readAt(1, 0, time.Second); err != nil || y != 0 || echo != 0 {
		t.Fatalf("an earlier sensor's read: y = %v, epoch %d, %v; want 0, none", y, echo, err)
	}
	r.svc.onInput(r.sealedInput(1, 0.5, e1))
	if version() != 1 {
		t.Fatalf("an input of a set-up epoch to a plant read without one: %v version rejects, want 1", version())
	}
	if _, echo, err := r.readAt(2, e1, 2*time.Second); err != nil || echo != e1 { // the set-up's epoch now
		t.Fatalf("a read of epoch %d: %v, echo %d", uint64(e1), err, echo)
	}
	r.svc.onInput(r.sealedInput(2, 0.5, 0))
	r.svc.onRead(r.sealedRead(3)) // without the epoch
	if version() != 3 || testutil.ToFloat64(r.m.Rejects.WithLabelValues("replay")) != 0 {
		t.Errorf("%v version rejects, %v replay; want 3 and 0", version(), testutil.ToFloat64(r.m.Rejects.WithLabelValues("replay")))
	}
}

// TestHoldBounded: with no input for HoldReads advances in a row (the
// actuator crashed, or cut off from the plant, so that no fail-safe of its
// own comes), the plant advances with zero input instead of the last one,
// until an input comes, which it then holds again. Before, it held the last
// input for ever.
func TestHoldBounded(t *testing.T) {
	r := newRig(t, 10*time.Millisecond)
	r.svc.opt.HoldReads = 3
	if _, err := r.read(1, time.Second); err != nil {
		t.Fatal(err)
	}
	r.svc.onInput(r.sealedInput(1, 0.5, 0))    // delivered before the read that uses it
	for tick := uint64(2); tick <= 7; tick++ { // tick 2 with 0.5, then none
		if _, err := r.read(tick, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r.svc.onInput(r.sealedInput(7, 0.9, 0))
	for tick := uint64(8); tick <= 9; tick++ { // tick 8 with 0.9, then none
		if _, err := r.read(tick, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if want := []float64{0.5, 0.5, 0.5, 0.5, 0, 0, 0.9, 0.9}; !slices.Equal(r.with, want) {
		t.Fatalf("the plant advanced with %v, want %v: three advances holding 0.5, then zero until 0.9 came", r.with, want)
	}
	if n := metrics.Sum(r.m.Misses); n != 6 {
		t.Errorf("%v advances without an input counted, want 6", n)
	}
}

// sealedRead is an earlier release's read of tick (sealedReadAt's epoch 0).
func (r *rig) sealedRead(tick uint64) *nats.Msg { return r.sealedReadAt(tick, 0) }

// sealedReadAt is the sensor's read of tick of set-up epoch (none for 0, as
// a sensor of an earlier release reads) as the plant's subscription
// delivers it.
func (r *rig) sealedReadAt(tick, epoch uint64) *nats.Msg {
	var body []byte
	if epoch != 0 {
		var err error
		if body, err = codec.Marshal(codec.PlantReadPayload{Epoch: epoch}); err != nil {
			r.t.Fatal(err)
		}
	}
	env, err := r.sensor.Seal(codec.Header{Kind: codec.KindPlantY, Loop: "loop1", Tick: tick, From: codec.RoleSensor, To: codec.RolePlant}, body)
	if err != nil {
		r.t.Fatal(err)
	}
	return &nats.Msg{Subject: bus.PlantYSubject("loop1"), Data: env}
}

// TestReadsQueuedTogetherNotReplays: reads delivered back to back (a
// backlog: the plant's process stalled, or the sensor gave a read up and
// moved on) are claimed in their order. Each read runs on a goroutine of its
// own; when each claimed its tick there, the later could take the lock
// first (the runtime runs the newest goroutine first), and the earlier was
// refused as a replay: a security alert (DuetForbiddenMessages) and a log
// telling the operator to restart the plant, for a backlog.
func TestReadsQueuedTogetherNotReplays(t *testing.T) {
	r := newRig(t, time.Millisecond)
	for tick := uint64(1); tick <= 400; tick += 2 {
		r.svc.onRead(r.sealedRead(tick))
		r.svc.onRead(r.sealedRead(tick + 1))
	}
	// The reads not taken over wait for their input up to Wait.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.svc.mu.Lock()
		last := r.svc.lastT
		r.svc.mu.Unlock()
		if last == 400 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the last tick read is %d, want 400", last)
		}
	}
	if n := metrics.SumBy(r.m.Rejects, "reason")["replay"]; n != 0 {
		t.Fatalf("%v reads refused as replays, of 400 reads in tick order", n)
	}
	// A read of a tick already claimed is a replay still.
	r.svc.onRead(r.sealedRead(400))
	if n := metrics.SumBy(r.m.Rejects, "reason")["replay"]; n != 1 {
		t.Fatalf("a read of tick 400 again: %v replays counted, want 1", n)
	}
}

// TestInputsBounded: with reads not reaching the plant (refused, or not
// routed to it) while the actuator goes on applying its fail-safe, the
// inputs held stay bounded, and the read that comes at last still advances
// with the newest input before its tick. Before, every input was kept
// until a read.
func TestInputsBounded(t *testing.T) {
	r := newRig(t, time.Second)
	if _, err := r.read(1, time.Second); err != nil {
		t.Fatal(err)
	}
	const last = 3 * maxInputs
	for k := uint64(2); k <= last; k++ {
		r.input(k, float64(k))
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.svc.mu.Lock()
		_, in := r.svc.inputs[last]
		n := len(r.svc.inputs)
		r.svc.mu.Unlock()
		if n > maxInputs {
			t.Fatalf("%d inputs held, want at most %d", n, maxInputs)
		}
		if in {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("input %d never reached the plant", last)
		}
	}
	if _, err := r.read(last+1, time.Second); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.with) != 1 || r.with[0] != last {
		t.Fatalf("the plant advanced with %v, want [%d]: the newest input before the read", r.with, last)
	}
}

// divergedPlant measures a value that is not a finite number, as an LTI
// plant with an unstable A reaches.
type divergedPlant struct{ countingPlant }

func (p *divergedPlant) Measure() []float64 { return []float64{math.Inf(1)} }

// TestDivergedPlantNotAnswered: a plant whose measurement is not finite is
// not answered, says why, once, and its Run ends with errDiverged, so that
// the service exits and is restarted from its initial state. Before the
// first, it sent the value, which the sensor refused as a malformed
// message, naming neither the plant nor the cause; before the last, it ran
// on, healthy and ready, answering no read again.
func TestDivergedPlantNotAnswered(t *testing.T) {
	nc := natstest.Conn(t)
	sealers := testkeys.Sealers(t)
	var logged testlog.Buffer
	svc, err := New(nc, sealers[codec.RolePlant], Options{Loop: "loop1", Plant: &divergedPlant{}, Wait: time.Millisecond,
		Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if svc.Ready() {
		t.Fatal("ready before Run subscribed")
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	r := &rig{t: t, nc: nc, sensor: sealers[codec.RoleSensor]}
	// Ready (/readyz) once subscribed; before, the command reported it
	// ready from the start.
	for deadline := time.Now().Add(5 * time.Second); !svc.Ready() || nc.NumSubscriptions() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the plant not ready and subscribed within 5 s")
		}
	}
	if y, err := r.read(1, 200*time.Millisecond); err == nil {
		t.Fatalf("tick 1's read: y = %v; want no answer", y)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errDiverged) {
			t.Fatalf("Run ended with %v, want errDiverged", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still runs 5 s after the plant diverged")
	}
	if svc.Ready() {
		t.Error("ready after Run ended")
	}
	if got := strings.Count(logged.String(), "the simulated plant diverged"); got != 1 {
		t.Fatalf("logged %d times, want once:\n%s", got, logged.String())
	}
}

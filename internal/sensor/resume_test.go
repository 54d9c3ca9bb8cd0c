package sensor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestResumable: a record of this wire version and digest resumes; one of
// another wire version (or of a release that did not record it), another
// digest or other resolved parameters starts a new set-up, saying why.
func TestResumable(t *testing.T) {
	d, k := [32]byte{1}, [32]byte{3}
	prm := codec.ParamsWire{Modulus: "2^127-1", N: 3, M: 1, P: 2, K: 16, L: 20, Lambda: 40, Variant: 1}
	other := prm
	other.Modulus = "2^255-19"
	for _, c := range []struct {
		name string
		rec  record
		ok   bool
		why  string
	}{
		{"same", record{Digest: d, Wire: codec.Version}, true, ""},
		{"wire version 1 (not recorded)", record{Digest: d}, false, "wire version 0 (0: version 1), this build speaks"},
		{"another wire version", record{Digest: d, Wire: codec.Version + 1}, false, "wire version"},
		{"other controller", record{Digest: [32]byte{2}, Wire: codec.Version}, false, "DUET_SETUP_GENERATION changed"},
		{"same keys", record{Digest: d, Wire: codec.Version, Keys: k[:]}, true, ""},
		{"no keys recorded (an earlier release)", record{Digest: d, Wire: codec.Version}, true, ""},
		{"a recipient's key changed", record{Digest: d, Wire: codec.Version, Keys: []byte{9}}, false, "public key of a role the set-up is sealed to"},
		{"most items per message", record{Digest: d, Wire: codec.Version, ItemsPerMsg: codec.MaxItemsPerMsg}, true, ""},
		{"too many items per message", record{Digest: d, Wire: codec.Version, ItemsPerMsg: codec.MaxItemsPerMsg + 1}, false, "items per stream message"},
		{"negative items per message", record{Digest: d, Wire: codec.Version, ItemsPerMsg: -1}, false, "items per stream message"},
		{"last next tick", record{Digest: d, Wire: codec.Version, NextTick: codec.MaxTick - resumeMargin}, true, ""},
		{"next tick past the receivers' bound", record{Digest: d, Wire: codec.Version, NextTick: codec.MaxTick - resumeMargin + 1}, false, "next tick"},
		{"same parameters", record{Digest: d, Wire: codec.Version, Params: &prm}, true, ""},
		{"no parameters recorded (an earlier release)", record{Digest: d, Wire: codec.Version}, true, ""},
		{"another modulus resolved", record{Digest: d, Wire: codec.Version, Params: &other}, false, "parameters resolved from the controller"},
	} {
		ok, why := resumable(c.rec, d, k, &prm)
		if ok != c.ok || !strings.Contains(why, c.why) || (!ok && why == "") {
			t.Errorf("%s: resumable = %v, %q; want %v, %q", c.name, ok, why, c.ok, c.why)
		}
	}
}

// TestRecordCarriesWire: the record a sensor writes round-trips the wire
// version it was sealed with.
func TestRecordCarriesWire(t *testing.T) {
	var k [32]byte
	data, err := codec.SealRecord(&k, "loop/sensor", record{Epoch: 3, Digest: [32]byte{1}, NextTick: 9, Wire: codec.Version})
	if err != nil {
		t.Fatal(err)
	}
	var got record
	if err := codec.OpenRecord(&k, "loop/sensor", data, &got); err != nil || got.Wire != codec.Version || got.Epoch != 3 {
		t.Fatalf("record %+v, %v", got, err)
	}
}

// The resume record's writer takes the newest next tick: one waiting is
// replaced, never queued behind (an older number written after a newer one
// would send a resumed sensor back over tick numbers already used).
func TestLatestReplaces(t *testing.T) {
	ch := make(chan uint64, 1)
	latest(ch, 25)
	latest(ch, 50)
	latest(ch, 75)
	if got := <-ch; got != 75 {
		t.Fatalf("got %d, want the newest, 75", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("%d still queued", v)
	default:
	}
}

// No tick at or above the stored record's next tick plus resumeMargin is
// sent: a sensor restarted from that record starts there, so it can never
// send a tick number again (with the broker replaying the parties' old mask
// shares to it, one item's mask would pad two measurements). Without a
// record (no StateKey) there is no restart to guard against.
func TestResumeCovers(t *testing.T) {
	var key [32]byte
	s := &Sensor{opt: Options{StateKey: &key}}
	s.savedNext.Store(50)
	if !s.resumeCovers(50+resumeMargin-1) || s.resumeCovers(50+resumeMargin) {
		t.Errorf("stored next tick 50: covers %d %v, %d %v; want true, false", 50+resumeMargin-1, s.resumeCovers(50+resumeMargin-1), 50+resumeMargin, s.resumeCovers(50+resumeMargin))
	}
	s.opt.StateKey = nil
	if !s.resumeCovers(1 << 40) {
		t.Error("without a resume record, a tick was held back")
	}
}

// TestResumeRecordBoundToItsLoop: the sensor's resume record, on a real
// JetStream KV bucket, resumes its own loop's set-up only: moved to another
// loop's key it does not open, and one sealed under another key of the
// sensor's (a rotation) is reported as such.
func TestResumeRecordBoundToItsLoop(t *testing.T) {
	ctx := context.Background()
	kv := setupBucket(t)
	sealer := testkeys.Sealers(t)[codec.RoleSensor]
	var logs bytes.Buffer
	m := metrics.New("sensor")
	sensorOf := func(loop string, key [32]byte) *Sensor {
		return &Sensor{opt: Options{Loop: loop, StateKey: &key, ItemsPerMsg: 1, Log: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: m},
			kv: kv, sealer: sealer}
	}
	rejects := func(reason string) float64 { return testutil.ToFloat64(m.Rejects.WithLabelValues(reason)) }
	key := [32]byte{4}
	first := sensorOf("a", key)
	first.epoch = 5
	if err := first.saveRecord(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := sensorOf("a", key); !resumed(t, s) || s.epoch != 5 {
		t.Fatalf("its own loop's record: epoch %d, want resumed at 5\n%s", s.epoch, logs.String())
	}
	e, err := kv.Get(ctx, first.recordKey())
	if err != nil {
		t.Fatal(err)
	}
	moved := sensorOf("b", key)
	if _, err := kv.Put(ctx, moved.recordKey(), e.Value()); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	if resumed(t, moved) || !strings.Contains(logs.String(), "does not open") {
		t.Fatalf("loop a's record under loop b's key resumed, or not reported:\n%s", logs.String())
	}
	if got := rejects("auth"); got != 1 {
		t.Errorf("%v auth rejects after a record that does not open, want 1", got)
	}
	logs.Reset()
	if resumed(t, sensorOf("a", [32]byte{5})) || !strings.Contains(logs.String(), "key rotation") {
		t.Fatalf("a record of another key resumed, or not reported as a rotation:\n%s", logs.String())
	}
	if got := rejects("other_key"); got != 1 {
		t.Errorf("%v other_key rejects after a record of another key, want 1", got)
	}
}

// resumed is s.resume's verdict; an error fails the test.
func resumed(t *testing.T, s *Sensor) bool {
	t.Helper()
	ok, err := s.resume(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// A second RunN keeps the resume record's next tick as stored, not the
// sensor's own next tick: before, each RunN took s.next as stored, so after
// a first RunN (whose last writes may have failed) the second could send
// ticks at or past the stored next tick plus resumeMargin, which a sensor
// resumed from that record sends again.
func TestRunNKeepsTheStoredNextTick(t *testing.T) {
	ctx := context.Background()
	kv := setupBucket(t)
	key := [32]byte{6}
	s := &Sensor{opt: Options{Loop: "a", StateKey: &key, ItemsPerMsg: 1, Fast: true, Log: slog.New(slog.DiscardHandler)},
		kv: kv, sealer: testkeys.Sealers(t)[codec.RoleSensor]}
	if err := s.saveRecord(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if got := s.savedNext.Load(); got != 10 {
		t.Fatalf("saved next tick %d after storing 10", got)
	}
	s.next = 500 // ticks 10..499 sent, their record writes failed
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.RunN(stopped, 1); err != nil {
		t.Fatal(err)
	}
	if got := s.savedNext.Load(); got != 10 {
		t.Errorf("saved next tick %d after a second RunN, want the stored 10", got)
	}
	if s.resumeCovers(10 + resumeMargin) {
		t.Errorf("tick %d may be sent with the record at 10", 10+resumeMargin)
	}
}

// A real-time tick the stored resume record does not cover sends nothing,
// not even the actuator's notice, and spends no tick number: it is tried
// again the next period, with the record's write asked for again. Before, its
// notice went out, and a sensor restarted from the stored record (which
// starts below it) had its notices refused by the actuator as replays and
// its outputs as late, for as long as the writes had failed.
func TestLaggingRecordSpendsNoTick(t *testing.T) {
	key := [32]byte{11}
	s, _ := setUpPendulum(t, Options{Loop: "lag", StateKey: &key, Period: time.Millisecond})
	notices, err := s.nc.SubscribeSync(bus.TickSubject("lag"))
	if err != nil {
		t.Fatal(err)
	}
	first := s.savedNext.Load() + resumeMargin // not covered: its writes failed, say
	s.next = first
	if err := s.RunN(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := notices.Pending(); n != 0 {
		t.Errorf("%d tick notices sent for a tick the resume record does not cover, want none", n)
	}
	if s.next != first {
		t.Errorf("next tick %d after the period, want %d again (no number spent)", s.next, first)
	}
	if m := testutil.ToFloat64(s.opt.Metrics.Misses.WithLabelValues("lag")); m != 1 {
		t.Errorf("%v misses, want 1", m)
	}
	if got := s.savedNext.Load(); got != first {
		t.Errorf("stored next tick %d, want %d (the write asked for again)", got, first)
	}
}

// setupBucket is the set-up KV bucket, the resume record's, on a real
// JetStream server.
func setupBucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(natstest.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureSetupBucket(context.Background(), js, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// A stored set-up made with other parameters than this build resolves from
// the same controller (another build's modulus sizing, with "modulus":
// "auto") is not resumed: a new set-up starts, saying why. Before, the
// digest of the controller as written matched, and the sensor shared the
// measurements in a field the parties did not compute in. The same
// parameters resume.
func TestResumeChecksResolvedParams(t *testing.T) {
	var logs bytes.Buffer
	setUp := resumeRig(t, "p", &logs)
	first := setUp(0, "")
	if s := setUp(0, ""); s.epoch != first.epoch {
		t.Fatalf("the same parameters: epoch %d, want the stored set-up's %d resumed\n%s", s.epoch, first.epoch, logs.String())
	}
	other := "2^255-19"
	if first.rz.Params.Field.Name() == other {
		other = "2^127-1"
	}
	logs.Reset()
	if s := setUp(0, other); s.epoch == first.epoch || !strings.Contains(logs.String(), "parameters resolved from the controller") {
		t.Fatalf("modulus %s against the stored %s: epoch %d (stored %d), want a new set-up, saying why\n%s",
			other, first.rz.Params.Field.Name(), s.epoch, first.epoch, logs.String())
	}
}

// resumeRig returns a function that sets loop up with the pendulum
// controller, one sensor identity and record key for every call (so that
// each call after the first finds the stored set-up), of generation gen and,
// unless "", another modulus than the one resolved; it logs into logs.
func resumeRig(t *testing.T, loop string, logs *bytes.Buffer) func(gen uint64, modulus string) *Sensor {
	cs := pendulumController(t)
	nc := natstest.Conn(t)
	sealer := testkeys.Sealers(t)[codec.RoleSensor]
	key := [32]byte{8}
	return func(gen uint64, modulus string) *Sensor {
		t.Helper()
		s, err := New(nc, sealer, Options{Loop: loop, Controller: cs, Variant: mpc.PerTick, Compress: true, StateKey: &key, Generation: gen,
			Log: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if modulus != "" {
			if s.rz.Params.Field, err = mpc.ParseModulus(modulus); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Setup(t.Context()); err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// DUET_SETUP_GENERATION forces a new set-up: a sensor of another
// generation than the stored set-up's starts a new one (a new epoch),
// saying why, and one of the same generation resumes it. Generation 0
// digests as before the generation existed, so that upgrading a sensor
// resumes its stored set-up.
func TestSetupGenerationStartsANewSetup(t *testing.T) {
	var logs bytes.Buffer
	setUp := resumeRig(t, "g", &logs)
	cs := pendulumController(t)
	first := setUp(0, "")
	old, _ := json.Marshal(struct {
		C any
		V string
		Z bool
	}{cs, mpc.PerTick.String(), true})
	if first.digest() != sha256.Sum256(old) {
		t.Error("generation 0 changes the digest: an upgraded sensor would not resume its stored set-up")
	}
	if s := setUp(0, ""); s.epoch != first.epoch {
		t.Fatalf("the same generation: epoch %d, want the stored set-up's %d resumed\n%s", s.epoch, first.epoch, logs.String())
	}
	logs.Reset()
	second := setUp(1, "")
	if second.epoch == first.epoch || !strings.Contains(logs.String(), "DUET_SETUP_GENERATION changed") {
		t.Fatalf("generation 1 against the stored 0: epoch %d (stored %d), want a new set-up, saying why\n%s", second.epoch, first.epoch, logs.String())
	}
	if s := setUp(1, ""); s.epoch != second.epoch {
		t.Fatalf("generation 1 again: epoch %d, want generation 1's set-up %d resumed\n%s", s.epoch, second.epoch, logs.String())
	}
	if s := setUp(0, ""); s.epoch == second.epoch {
		t.Fatalf("generation 0 against the stored 1: epoch %d, the stored one resumed; want a new set-up", s.epoch)
	}
}

// The plant's answer must echo the set-up epoch the read carries: a new
// set-up numbers its ticks from 1 again, and an earlier set-up's answer of
// the same tick, replayed, would be taken for the plant's. One of another
// epoch is refused as a replay, one without (a plant of an earlier
// release) as the wire version, each counted.
func TestPlantAnswerOfAnotherSetupRefused(t *testing.T) {
	sealers := testkeys.Sealers(t)
	m := metrics.New("sensor")
	nc := natstest.Conn(t)
	s, err := New(nc, sealers[codec.RoleSensor], Options{Loop: "p", Controller: pendulumController(t), Variant: mpc.PerTick,
		Compress: true, Metrics: m, Log: slog.New(slog.DiscardHandler), PlantWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.epoch = 1_800_000_000_000_000_000
	var answer atomic.Uint64 // the epoch the plant answers with
	var asked atomic.Uint64  // the epoch the last read carried
	if _, err := nc.Subscribe(bus.PlantYSubject("p"), func(msg *nats.Msg) {
		h, body, err := sealers[codec.RolePlant].Open(msg.Data)
		var rp codec.PlantReadPayload
		if err == nil {
			err = codec.Unmarshal(body, &rp)
		}
		if err != nil {
			t.Error(err)
			return
		}
		asked.Store(rp.Epoch)
		b, _ := codec.Marshal(codec.PlantYPayload{Y: make([]float64, s.rz.Params.P), Epoch: answer.Load()})
		env, _ := sealers[codec.RolePlant].Seal(codec.Header{Kind: codec.KindPlantY, Loop: "p", Tick: h.Tick, From: codec.RolePlant, To: codec.RoleSensor}, b)
		msg.Respond(env)
	}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		epoch  uint64
		reason string // "": answered
	}{{s.epoch, ""}, {s.epoch - 1, "replay"}, {0, "version"}, {s.epoch + 1, "replay"}, {s.epoch, ""}} {
		answer.Store(c.epoch)
		tick := uint64(i + 1)
		_, err := s.readPlant(t.Context(), tick)
		if asked.Load() != s.epoch {
			t.Errorf("tick %d: the read carried epoch %d, want the set-up's %d", tick, asked.Load(), s.epoch)
		}
		if c.reason == "" {
			if err != nil {
				t.Errorf("tick %d: an answer of the set-up's epoch refused: %v", tick, err)
			}
			continue
		}
		if err == nil || codec.Reason(err) != c.reason {
			t.Errorf("tick %d: an answer of epoch %d (the set-up's %d): %v, want refused as %s", tick, c.epoch, s.epoch, err, c.reason)
		}
	}
	if r, v := testutil.ToFloat64(m.Rejects.WithLabelValues("replay")), testutil.ToFloat64(m.Rejects.WithLabelValues("version")); r != 2 || v != 1 {
		t.Errorf("rejects: %v replay, %v version; want 2 and 1", r, v)
	}
}

// A sensor whose set-up bucket is gone (a NATS server restarted on memory
// storage, or the bucket deleted) ends Run with an error saying so once its
// resume record has failed for the resume margin, so that it is restarted
// and sets the loop up again: it sets a loop up only at start. Before, it
// ran on sending nothing, ready, and the loop stood until someone restarted
// it.
func TestRunEndsWhenSetupBucketGone(t *testing.T) {
	key := [32]byte{9}
	s, js := setUpPendulum(t, Options{Loop: "gone", StateKey: &key, Period: time.Millisecond})
	if err := js.DeleteKeyValue(t.Context(), bus.SetupBucket); err != nil {
		t.Fatal(err)
	}
	s.plantUp = true // no plant: each tick is lost, its number spent
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := s.Run(ctx)
	if !errors.Is(err, errSetupGone) || !strings.Contains(err.Error(), "DUET_FILE_STORE") {
		t.Fatalf("Run with the set-up bucket gone: %v (context %v), want errSetupGone naming DUET_FILE_STORE", err, ctx.Err())
	}
}

// After a resume record write has failed, a set-up bucket or loop queue made
// again since the set-up (another loop's sensor, restarted first, made the
// bucket again; the record's writes then succeed) is found out too; both as
// the set-up left them, nothing is, and the sensor stops looking.
func TestSetupGoneFindsRecreatedStreams(t *testing.T) {
	key := [32]byte{10}
	s, js := setUpPendulum(t, Options{Loop: "again", StateKey: &key})
	ctx := t.Context()
	look := func() error {
		s.recordFailed.Store(true)
		s.setupLooked = time.Time{}
		return s.setupGone(ctx)
	}
	if err := look(); err != nil || s.recordFailed.Load() {
		t.Fatalf("the set-up intact: %v, still looking %v; want nothing, and no more looks", err, s.recordFailed.Load())
	}
	if err := js.DeleteStream(ctx, bus.OfflineStream("again")); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureOfflineQueue(ctx, js, bus.OfflineQueue{Loop: "again", MaxMsgs: 100}, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := look(); !errors.Is(err, errSetupGone) || !strings.Contains(err.Error(), "offline queue DUET_OFFLINE_again was created again") {
		t.Fatalf("the queue made again: %v, want errSetupGone naming it", err)
	}
	s.queueCreated = time.Time{} // not compared: the bucket's turn
	if err := js.DeleteKeyValue(ctx, bus.SetupBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureSetupBucket(ctx, js, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := look(); !errors.Is(err, errSetupGone) || !strings.Contains(err.Error(), "set-up bucket duet-setup was created again") {
		t.Fatalf("the bucket made again: %v, want errSetupGone naming it", err)
	}
}

// setUpPendulum is a sensor of the pendulum's controller (per-tick,
// compressed, logging nowhere; opt gives the rest) on an embedded server,
// set up, and a JetStream context on its connection.
func setUpPendulum(t *testing.T, opt Options) (*Sensor, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Conn(t)
	opt.Controller, opt.Variant, opt.Compress, opt.Log = pendulumController(t), mpc.PerTick, true, slog.New(slog.DiscardHandler)
	s, err := New(nc, testkeys.Sealers(t)[codec.RoleSensor], opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return s, js
}

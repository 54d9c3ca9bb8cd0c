package sensor

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A sensor whose connection refuses its messages (closed here; in a long
// outage, its reconnect buffer full) logs the notices it cannot send as it
// logs the ticks lost, the first and then once a minute with a count: before,
// every refused message was a warning of its own, 25 a second at 40 ms. The
// ticks count as misses, none as sent.
func TestUnpublishedNoticesLoggedOnce(t *testing.T) {
	cs := pendulumController(t)
	nc := natstest.Conn(t)
	var logs testlog.Buffer
	m := metrics.New("sensor")
	s, err := New(nc, testkeys.Sealers(t)[codec.RoleSensor], Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: true,
		Fast: true, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.plantUp = true // the plant had answered: its reads failing cost ticks
	const ticks = 100
	if err := s.RunN(t.Context(), ticks); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "tick notice not published"); n != 1 {
		t.Errorf("%d warnings of a notice not published over %d ticks, want 1:\n%s", n, ticks, out)
	}
	if n := strings.Count(out, "\n"); n > 3 {
		t.Errorf("%d log lines over %d ticks lost, want at most 3:\n%s", n, ticks, out)
	}
	if got := testutil.ToFloat64(m.Misses.WithLabelValues("pendulum")); got != ticks {
		t.Errorf("%v misses, want %d", got, ticks)
	}
	if got := testutil.ToFloat64(m.Ticks.WithLabelValues("pendulum")); got != 0 {
		t.Errorf("%v ticks counted as sent, want 0", got)
	}
}

// A tick whose measurements the connection refuses (here: larger than the
// server's max_payload, which the plant's reads, its answers and the
// notices are not) counts as a miss, not as a tick sent, and is logged
// once; the notice still goes. Before, each refused message was a warning
// of its own and the tick counted as sent.
func TestRefusedMeasurementIsAMiss(t *testing.T) {
	sealers := testkeys.Sealers(t)
	m := metrics.New("sensor")
	var logs testlog.Buffer
	const loop = "pendulum"
	s, err := New(natstest.Conn(t), sealers[codec.RoleSensor], Options{Loop: loop, Controller: pendulumController(t), Variant: mpc.PerTick,
		Compress: true, Fast: true, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// The messages' sizes, as the sensor and the plant seal them.
	sealed := func(r codec.Role, h codec.Header, payload any) []byte {
		t.Helper()
		var body []byte
		if payload != nil {
			if body, err = codec.Marshal(payload); err != nil {
				t.Fatal(err)
			}
		}
		env, err := sealers[r].Seal(h, body)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	f, p := s.rz.Params.Field, s.rz.Params.P
	share := mpc.NewMatrix(p, 1)
	for i := range share.Data {
		share.Data[i] = f.FromUint64(^uint64(0))
	}
	const tick = 1 // the run's ticks, 1 to 20, take as many bytes
	now := time.Now().UnixNano()
	measure := len(sealed(codec.RoleSensor, codec.Header{Kind: codec.KindMeasure, Loop: loop, Tick: tick, From: codec.RoleSensor, To: codec.RoleParty0},
		codec.MeasurePayload{Y: codec.PutMatrix(f, share), SentUnixNano: now}))
	s.epoch = uint64(now) // as Setup sets it: the reads carry it, the answers echo it
	reply := func(tick uint64) []byte {
		return sealed(codec.RolePlant, codec.Header{Kind: codec.KindPlantY, Loop: loop, Tick: tick, From: codec.RolePlant, To: codec.RoleSensor},
			codec.PlantYPayload{Y: make([]float64, p), Epoch: s.epoch})
	}
	others := max(len(reply(tick)),
		len(sealed(codec.RoleSensor, codec.Header{Kind: codec.KindPlantY, Loop: loop, Tick: tick, From: codec.RoleSensor, To: codec.RolePlant}, codec.PlantReadPayload{Epoch: s.epoch})),
		len(sealed(codec.RoleSensor, codec.Header{Kind: codec.KindTick, Loop: loop, Tick: tick, From: codec.RoleSensor, To: codec.RoleActuator}, codec.TickPayload{SentUnixNano: now})))
	if others >= measure-8 {
		t.Fatalf("a measurement share seals to %d bytes, the reads, answers and notices up to %d: no max_payload between", measure, others)
	}
	ns := natstest.Server(t, &server.Options{MaxPayload: int32(measure - 4)})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The plant: answers every read with y = 0.
	if _, err := nc.Subscribe(bus.PlantYSubject(loop), func(msg *nats.Msg) {
		if h, _, err := sealers[codec.RolePlant].Open(msg.Data); err == nil {
			msg.Respond(reply(h.Tick))
		}
	}); err != nil {
		t.Fatal(err)
	}
	notices, err := nc.SubscribeSync(bus.TickSubject(loop))
	if err != nil {
		t.Fatal(err)
	}
	s.nc = nc // the sensor's connection, to the server with the small max_payload
	const ticks = 20
	if err := s.RunN(t.Context(), ticks); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Misses.WithLabelValues(loop)); got != ticks {
		t.Errorf("%v misses, want %d (every tick's measurements refused)", got, ticks)
	}
	if got := testutil.ToFloat64(m.Ticks.WithLabelValues(loop)); got != 0 {
		t.Errorf("%v ticks counted as sent, want 0", got)
	}
	if n := strings.Count(logs.String(), "measurement not published"); n != 1 {
		t.Errorf("%d warnings of a measurement not published over %d ticks, want 1:\n%s", n, ticks, logs.String())
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, _, err := notices.Pending()
		if err == nil && n == ticks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notices came (%v), want %d: the actuator's fail-safe needs them", n, err, ticks)
		}
	}
}

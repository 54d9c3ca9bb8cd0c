package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// totalRejects sums a service's rejections over all reasons.
func totalRejects(m *metrics.Set) float64 {
	mfs, err := m.Reg.Gather()
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "duet_rejects_total" {
			for _, x := range mf.Metric {
				sum += x.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestHostileClient publishes, on every subject a compromised service could
// reach, random bytes, truncated and oversized messages, valid envelopes with
// wrong dimensions or ticks, replays, messages sealed with the wrong key and
// junk offline items. The loop must keep running with every rejection counted
// by reason, and nothing may crash or corrupt state.
func TestHostileClient(t *testing.T) {
	c := startCluster(t, mpc.PerTick, 1)
	loop := "pendulum"
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Capture genuine traffic for replays.
	captured := map[string][]byte{}
	capt := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(bus.Prefix+"."+loop+".>", capt)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunTicks(context.Background(), 40); err != nil {
		t.Fatal(err)
	}
	sub.Unsubscribe()
	close(capt)
	for m := range capt {
		if _, ok := captured[m.Subject]; !ok {
			captured[m.Subject] = m.Data
		}
	}
	subjects := []string{
		bus.MeasureSubject(loop, 0), bus.MeasureSubject(loop, 1), bus.ExchangeSubject(loop, 0), bus.ExchangeSubject(loop, 1),
		bus.OutputSubject(loop), bus.TickSubject(loop), bus.PlantUSubject(loop),
	}
	for _, s := range subjects {
		if captured[s] == nil {
			t.Fatalf("no genuine message captured on %s", s)
		}
	}
	// Legitimate keys used wrongly: a compromised sensor sealing a
	// measurement of the wrong dimension, and a far-past tick.
	pubs := c.PublicKeys()
	sensorSealer, err := codec.NewSealer(codec.RoleSensor, c.Identity(codec.RoleSensor), pubs)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := mpc.ParseModulus(mpc.PresetM127)
	badDims, _ := codec.Marshal(codec.MeasurePayload{Y: codec.PutMatrix(f, mpc.NewMatrix(5, 1)), SentUnixNano: time.Now().UnixNano()})
	wrongDim, err := sensorSealer.Seal(codec.Header{Kind: codec.KindMeasure, Loop: loop, Tick: 1 << 50, From: codec.RoleSensor, To: codec.RoleParty0}, badDims)
	if err != nil {
		t.Fatal(err)
	}
	// An impostor key claiming to be party1.
	imp, _ := codec.GenerateIdentity()
	ipubs := map[codec.Role]string{}
	for r, p := range pubs {
		ipubs[r] = p
	}
	ipubs[codec.RoleParty1] = imp.PublicKey()
	impSealer, err := codec.NewSealer(codec.RoleParty1, imp, ipubs)
	if err != nil {
		t.Fatal(err)
	}
	mul, _ := codec.Marshal(codec.MulPayload{Item: 1})
	wrongKey, err := impSealer.Seal(codec.Header{Kind: codec.KindMul, Loop: loop, Tick: 1 << 50, From: codec.RoleParty1, To: codec.RoleParty0}, mul)
	if err != nil {
		t.Fatal(err)
	}
	random := func(n int) []byte { b := make([]byte, n); rand.Read(b); return b }
	before := map[string]float64{}
	for name, m := range c.Metrics {
		before[name] = totalRejects(m)
	}
	done := make(chan error, 1)
	go func() { done <- c.RunTicks(context.Background(), 300) }()
	for round := 0; round < 20; round++ {
		for _, s := range subjects {
			g := captured[s]
			nc.Publish(s, random(1+round*37))
			nc.Publish(s, g[:len(g)/2])                                       // truncated
			nc.Publish(s, append(append([]byte{}, g...), random(900_000)...)) // oversized
			nc.Publish(s, g)                                                  // replay
		}
		nc.Publish(bus.MeasureSubject(loop, 0), wrongDim)
		nc.Publish(bus.ExchangeSubject(loop, 0), wrongKey)
		// Junk offline items: a compromised dealer's stream messages.
		nc.Publish(bus.OfflineSubject(loop), random(200))
		time.Sleep(5 * time.Millisecond)
	}
	nc.Flush()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	for _, name := range []string{"party0", "party1", "actuator", "plant"} {
		if got := totalRejects(c.Metrics[name]) - before[name]; got < 40 {
			t.Errorf("%s counted %v rejections, want >= 40", name, got)
		}
	}
	reasons := func(service string) string {
		out := ""
		for _, r := range []string{"malformed", "too_large", "replay", "auth", "dimension", "header", "version", "kind", "role", "recipient", "unknown_sender", "range", "instance"} {
			if v := testutil.ToFloat64(c.Metrics[service].Rejects.WithLabelValues(r)); v > 0 {
				out += fmt.Sprintf("%s=%v ", r, v)
			}
		}
		return out
	}
	for _, want := range []struct{ service, reason string }{
		{"party0", "replay"}, {"party0", "auth"}, {"party0", "dimension"}, {"party1", "replay"}, {"actuator", "replay"},
	} {
		if testutil.ToFloat64(c.Metrics[want.service].Rejects.WithLabelValues(want.reason)) == 0 {
			t.Errorf("%s counted no %q rejection (%s)", want.service, want.reason, reasons(want.service))
		}
	}
	recs := followed(t, c)
	var last []TickRecord
	for _, r := range recs {
		if r.Tick > 40 {
			last = append(last, r)
		}
	}
	s := Summarize(last)
	if s.Applied < 290 || s.Misses > 10 {
		t.Fatalf("loop disturbed: %d of 300 applied, %d misses", s.Applied, s.Misses)
	}
	bound := 0.3
	if s.MaxDiff > bound {
		t.Fatalf("state corrupted: max |u - uplain| = %g", s.MaxDiff)
	}
	checkAudit(t, c, 330)
	for _, n := range []string{"party0", "party1", "actuator"} {
		t.Logf("%s rejects: %s", n, reasons(n))
	}
}

package bench

import (
	"bytes"
	"context"
	"math"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/nats-io/nats.go"
)

// A synthetic profile: every role's samples land in its column, the NATS
// server's own JetStream labels in Broker, unlabelled background marking in
// Collector, anything else in Other.
func TestCPUByRole(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	work, mark, sched := fn(1, "github.com/duet-mpc/duet/internal/party.(*worker).handle"), fn(2, "runtime.gcBgMarkWorker"), fn(3, "runtime.schedule")
	sweep, sweepOne := fn(4, "runtime.bgsweep"), fn(5, "runtime.sweepone")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	lw, lm, ls := loc(1, work), loc(2, mark), loc(3, sched)
	// The background sweeper's stack: sweepone called from bgsweep.
	lsw := &profile.Location{ID: 4, Line: []profile.Line{{Function: sweepOne}, {Function: sweep}}}
	ms := int64(time.Millisecond)
	sample := func(ns int64, l *profile.Location, role string) *profile.Sample {
		s := &profile.Sample{Location: []*profile.Location{l}, Value: []int64{ns / (10 * ms), ns}}
		if role != "" {
			s.Label = map[string][]string{roleLabel: {role}}
		}
		return s
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10 * ms,
		Function: []*profile.Function{work, mark, sched, sweep, sweepOne}, Location: []*profile.Location{lw, lm, ls, lsw},
		Sample: []*profile.Sample{
			sample(400*ms, lw, RoleParty0), sample(300*ms, lw, RoleParty1), sample(100*ms, lw, RoleParty1),
			sample(500*ms, lw, RoleBroker), sample(200*ms, lw, RoleHarness), sample(100*ms, lw, RoleDealer), // a dealer: Other
			sample(50*ms, lm, ""), sample(30*ms, ls, ""), serverLabelled(sample(60*ms, lw, ""), "stream", "KV_duet-state-party0"),
			sample(40*ms, lsw, ""),
		},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	c, err := cpuByRole(buf.Bytes(), 2*time.Second) // over 2 s of wall
	if err != nil {
		t.Fatal(err)
	}
	// Collector: 50 ms of marking and 40 of sweeping; Sweep is the 40.
	want := RoleCPU{Party: [2]float64{0.2, 0.2}, Broker: 0.28, Harness: 0.1, Collector: 0.045, Other: 0.065, Sweep: 0.02, Samples: 10}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(c.Party[0], want.Party[0]) || !near(c.Party[1], want.Party[1]) || !near(c.Broker, want.Broker) || !near(c.Harness, want.Harness) ||
		!near(c.Collector, want.Collector) || !near(c.Other, want.Other) || !near(c.Sweep, want.Sweep) || c.Samples != want.Samples {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if !near(c.Total(), 0.89) || !near(c.Pair(), 0.4) { // 1,780 ms over 2 s
		t.Errorf("total %v, pair %v", c.Total(), c.Pair())
	}
	// 0.4 cores for 100 loops at 25 Hz: 160 µs per tick for the pair.
	if got := c.PairPerTick(100, 40*time.Millisecond); !near(got, 160) {
		t.Errorf("pair per tick %v µs, want 160", got)
	}
	if _, err := cpuByRole([]byte("not a profile"), time.Second); err == nil {
		t.Error("a malformed profile was read")
	}
}

// serverLabelled gives s the labels the NATS server sets on its JetStream
// goroutines (no role).
func serverLabelled(s *profile.Sample, k, v string) *profile.Sample {
	s.Label = map[string][]string{"account": {"$G"}, k: {v}}
	return s
}

// A real profile: a goroutine started inside withRole spins, and its CPU
// lands in its role's column (the label is inherited).
func TestRoleProfileInherits(t *testing.T) {
	prof := startRoleProfile()
	if !prof.on {
		t.Skip("another CPU profile is running")
	}
	var wg sync.WaitGroup
	withRole(context.Background(), RoleParty1, func(context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 1.0
			for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
				for i := 0; i < 1000; i++ {
					x = math.Sqrt(x + float64(i))
				}
			}
			_ = x
		}()
	})
	wg.Wait()
	c, raw, err := prof.stop()
	if err != nil || raw == nil {
		t.Fatal(err, raw == nil)
	}
	others := c.Party[0] + c.Broker + c.Harness + c.Collector + c.Other
	if c.Party[1] < 0.1 || c.Party[1] < 3*others {
		t.Errorf("a spinning goroutine labelled party1: %+v", c)
	}
	if c2, _, _ := prof.stop(); !math.IsNaN(c2.Pair()) {
		t.Errorf("stopped twice: %+v", c2)
	}
}

// labelledGoroutines counts the live goroutines by role label whose stacks
// hold a function containing fn (the goroutine profile keeps labels).
func labelledGoroutines(t *testing.T, fn string) map[string]int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, s := range p.Sample {
		role := "none"
		if l := s.Label[roleLabel]; len(l) > 0 {
			role = l[0]
		}
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function != nil && strings.Contains(ln.Function.Name, fn) {
					n[role] += int(s.Value[0])
				}
			}
		}
	}
	return n
}

// The goroutines the bench starts carry the right labels: each party's
// (its service and its NATS connection's reader) and the floor's relays'
// (their subscriptions' deliverers).
func TestRolesLabelGoroutines(t *testing.T) {
	r := startRig(t)
	ctx, url := context.Background(), r.url
	if err := r.startParties([]string{"roles-test"}, false, nil); err != nil {
		t.Fatal(err)
	}
	nc := make([]*nats.Conn, 2)
	for i := range nc {
		var err error
		withRole(ctx, []string{RoleParty0, RoleParty1}[i], func(context.Context) {
			if nc[i], err = nats.Connect(url); err == nil {
				err = floorRelay(nc[i], i, "roles-test-floor", nil, nil, func(string) (string, string, bool) { return "", "", false })
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer nc[i].Close()
	}
	// The services' goroutines start on their own: wait for them (5 s).
	var readers, runs, server map[string]int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		readers = labelledGoroutines(t, ".(*Conn).readLoop") // nats.go
		runs = labelledGoroutines(t, "internal/party.(*Service).Run")
		server = labelledGoroutines(t, "server.(*client).readLoop")
		// Each party's connection and each relay's; each party's
		// service; the server's client read loops.
		ok := readers[RoleParty0] >= 2 && readers[RoleParty1] >= 2 && runs[RoleParty0] >= 1 && runs[RoleParty1] >= 1 && server[RoleBroker] >= 4
		if ok || time.Now().After(end) {
			break
		}
	}
	if readers[RoleParty0] < 2 || readers[RoleParty1] < 2 {
		t.Errorf("NATS connection readers by role: %v", readers)
	}
	if runs[RoleParty0] < 1 || runs[RoleParty1] < 1 || runs["none"] > 0 {
		t.Errorf("party service goroutines by role: %v", runs)
	}
	if server[RoleBroker] < 4 || server["none"] > 0 {
		t.Errorf("NATS server client readers by role: %v", server)
	}
}

// In process (duet bench --in-process) the labels are the same as over
// TCP: a party's connection's reader keeps the party's label, not the
// rig's (the harness's, as in a scale step), and the server's ends of the
// pipes carry the broker's (inproc.go).
func TestRolesLabelInProcess(t *testing.T) {
	ns, url := startServerNS(t)
	var r *rig
	var err error
	withRole(context.Background(), RoleHarness, func(ctx context.Context) { r, err = newRig(ctx, url, nil) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	r.inProc = ns
	if err := r.startParties([]string{"roles-inproc"}, false, nil); err != nil {
		t.Fatal(err)
	}
	var readers, server map[string]int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		readers = labelledGoroutines(t, ".(*Conn).readLoop")
		server = labelledGoroutines(t, "server.(*client).readLoop")
		if readers[RoleParty0] >= 1 && readers[RoleParty1] >= 1 && server[RoleBroker] >= 3 || time.Now().After(end) {
			break
		}
	}
	// The admin's reader is the harness's (over TCP); every other one a
	// party's.
	if readers[RoleParty0] < 1 || readers[RoleParty1] < 1 || readers["none"] > 0 || readers[RoleHarness] > 1 {
		t.Errorf("NATS connection readers by role: %v; want the parties' labelled as the parties", readers)
	}
	if server[RoleBroker] < 3 || server[RoleParty0]+server[RoleParty1]+server[RoleHarness]+server["none"] > 0 {
		t.Errorf("NATS server client readers by role: %v; want all the broker's", server)
	}
}

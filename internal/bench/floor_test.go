package bench

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestFloorRuns(t *testing.T) {
	url := startServer(t)
	// The exchange messages between the floor's parties: none in the
	// two-hop topology, one per party and tick otherwise (one with OneWay).
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var exchanged, plantReads, plantBadSize atomic.Int64
	if _, err := nc.Subscribe("floor.*.*.x.*", func(*nats.Msg) { exchanged.Add(1) }); err != nil {
		t.Fatal(err)
	}
	// The plant reads: one per tick with PlantRequest, of that size.
	if _, err := nc.Subscribe("floor.*.plant", func(m *nats.Msg) {
		plantReads.Add(1)
		if len(m.Data) != 64 {
			plantBadSize.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sz          FloorSizes
		want, reads int64
	}{
		{FloorSizes{}, 100, 0}, {FloorSizes{OneWay: true}, 50, 0}, {FloorSizes{TwoHop: true}, 0, 0},
		{FloorSizes{PlantRequest: 64, PlantReply: 90}, 100, 50}, {FloorSizes{TwoHop: true, PlantRequest: 64, PlantReply: 90}, 0, 50},
	} {
		sz := c.sz
		sz.Measure, sz.Exchange, sz.Output = 200, 700, 150
		exchanged.Store(0)
		plantReads.Store(0)
		lat, err := Floor(context.Background(), url, sz, 50, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if len(lat) != 50 {
			t.Fatalf("%d latencies, want 50", len(lat))
		}
		s := Summarize(lat)
		if s.Min <= 0 || s.Min > s.P50 || s.P50 > s.P99 || s.P99 > s.Max {
			t.Fatalf("stats out of order: %+v", s)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if got := exchanged.Load(); got != c.want {
			t.Errorf("%+v: %d exchange messages, want %d", c.sz, got, c.want)
		}
		if got := plantReads.Load(); got != c.reads || plantBadSize.Load() != 0 {
			t.Errorf("%+v: %d plant reads (%d not of 64 bytes), want %d", c.sz, got, plantBadSize.Load(), c.reads)
		}
	}
}

// The floor with its relays in processes of their own: the ticks go
// through (the exchange messages the topology has, from the relays'
// processes, not from connections of this one), and the processes are gone
// after Close.
func TestFloorRelayProcs(t *testing.T) {
	url := startServer(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var exchanged atomic.Int64
	if _, err := nc.Subscribe("floor.*.*.x.*", func(*nats.Msg) { exchanged.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewFloorRigRelays(url, FloorSizes{Measure: 200, Exchange: 700, Output: 150, PlantRequest: 64, PlantReply: 90})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.relays) != 2 || r.conns[1] != nil || r.conns[2] != nil {
		t.Fatalf("%d relay processes, in-process relay connections %v %v: want the relays in processes", len(r.relays), r.conns[1], r.conns[2])
	}
	procs := append([]*relayProc(nil), r.relays...)
	lat, err := r.Run(context.Background(), 30, time.Millisecond)
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	r.Close()
	if len(lat) != 30 {
		t.Errorf("%d latencies, want 30", len(lat))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := exchanged.Load(); got != 60 {
		t.Errorf("%d exchange messages, want 60", got)
	}
	for i, p := range procs {
		select {
		case <-p.done:
		default:
			t.Errorf("relay %d still runs after Close", i)
		}
	}
}

// A relay process refuses a spec it cannot serve, naming it.
func TestRelaySpecRefused(t *testing.T) {
	for _, spec := range []string{"{", `{"URL":"nats://127.0.0.1:1","ID":2}`} {
		err := runRelay(spec, nil, nil)
		if err == nil || !strings.Contains(err.Error(), relayEnv) {
			t.Errorf("spec %q: err = %v, want one naming %s", spec, err, relayEnv)
		}
	}
}

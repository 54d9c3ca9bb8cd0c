package bench

import (
	"context"
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
	var exchanged atomic.Int64
	if _, err := nc.Subscribe("floor.*.*.x.*", func(*nats.Msg) { exchanged.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sz   FloorSizes
		want int64
	}{{FloorSizes{}, 100}, {FloorSizes{OneWay: true}, 50}, {FloorSizes{TwoHop: true}, 0}} {
		sz := c.sz
		sz.Measure, sz.Exchange, sz.Output = 200, 700, 150
		exchanged.Store(0)
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
	}
}

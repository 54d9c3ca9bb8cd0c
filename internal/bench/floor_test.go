package bench

import (
	"context"
	"testing"
	"time"
)

func TestFloorRuns(t *testing.T) {
	url := startServer(t)
	for _, oneWay := range []bool{false, true} {
		lat, err := Floor(context.Background(), url, FloorSizes{Measure: 200, Exchange: 700, Output: 150, OneWay: oneWay}, 50, time.Millisecond)
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
	}
}

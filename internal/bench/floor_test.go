package bench

import (
	"context"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/demo"
)

func TestFloorRuns(t *testing.T) {
	ns, dir, err := demo.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); _ = dir }()
	lat, err := Floor(context.Background(), ns.ClientURL(), FloorSizes{200, 700, 150}, 300, 40*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 300 {
		t.Fatalf("%d latencies, want 300", len(lat))
	}
	t.Logf("floor p50 %v p99 %v", demo.Percentile(lat, .5), demo.Percentile(lat, .99))
}

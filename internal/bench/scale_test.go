package bench

import (
	"context"
	"testing"
	"time"

	"github.com/duet-mpc/duet/pkg/mpc"
)

func TestScaleQuick(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	rows, err := RunScale(context.Background(), ScaleOptions{URL: url, Loops: []int{4}, Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond,
		Controller: cs, Variant: mpc.PerTick, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	for _, r := range rows {
		if r.Ticks < r.Loops*8 || r.Wrong != 0 {
			t.Errorf("%+v: want about 10 ticks per loop and no wrong result", r)
		}
		t.Logf("%+v", r)
	}
}

func TestScaleFloorQuick(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	rows, err := RunScaleFloor(context.Background(), url, cs, []int{3, 6}, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, r := range rows {
		// 25 Hz for 0.4 s measured: about 10 ticks per loop, each completed.
		if r.Ticks < r.Loops*8 || r.Ticks > r.Loops*12 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("%+v: want about 10 ticks per loop, p50 <= p99", r)
		}
	}
}

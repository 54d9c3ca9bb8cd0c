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

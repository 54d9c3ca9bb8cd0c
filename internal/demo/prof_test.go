package demo

import (
	"context"
	"github.com/duet-mpc/duet/pkg/mpc"
	"testing"
	"time"
)

func TestProfPaced(t *testing.T) {
	cs, ps := pendulum(t)
	c, err := Start(context.Background(), Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true,
		Period: 40 * time.Millisecond, Deadline: 30 * time.Millisecond, Dealers: 1, LowWater: 1500, QueueMax: 3000})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, 1500); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	for i := 0; i < 1000; i++ {
		c.RunTicks(context.Background(), 1)
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	s := Summarize(c.Records())
	t.Logf("ticks %d p50 %v p99 %v misses %d", s.Ticks, s.P50, s.P99, s.Misses)
}

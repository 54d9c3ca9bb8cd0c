package bench

import (
	"context"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

func TestDealerQuick(t *testing.T) {
	url := startServer(t)
	cs, _ := pendulum(t)
	rows, err := RunDealer(context.Background(), DealerOptions{URL: url, Items: 1000, Replicas: []int{1, 3}, Variants: []mpc.Variant{mpc.FixedMask}, Compress: []bool{true}},
		[]DealerCase{{Name: "pendulum", Controller: cs}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	for _, r := range rows {
		if r.Rate <= 0 || r.StreamBytes < float64(r.PayloadBytes) {
			t.Errorf("%+v: want a positive rate and stream bytes >= payload bytes", r)
		}
		t.Logf("%+v", r)
	}
}

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
	// Replicas 1 and 3, each with 8 items per stream message and with 1.
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, r := range rows {
		if want := []int{8, 8, 1, 1}[i]; r.PerMsg != want || r.Items%want != 0 {
			t.Errorf("row %d: %d items per message (%d items), want %d", i, r.PerMsg, r.Items, want)
		}
		if r.Rate <= 0 || r.StreamBytes < float64(r.PayloadBytes) {
			t.Errorf("%+v: want a positive rate and stream bytes >= payload bytes", r)
		}
		t.Logf("%+v", r)
	}
}

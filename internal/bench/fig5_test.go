package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestFig5Quick runs every series at d = 10. RunFig5 reconstructs each
// repetition's output and checks it against the result computed in the
// clear, and fails on the first wrong one.
func TestFig5Quick(t *testing.T) {
	url := startServer(t)
	rows, err := RunFig5(context.Background(), Fig5Options{URL: url, Ds: []int{10}, Reps: 10, Warmup: 2, Gap: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(Fig5Series) {
		t.Fatalf("%d rows, want %d", len(rows), len(Fig5Series))
	}
	for i, r := range rows {
		if r.Series != Fig5Series[i] || r.D != 10 {
			t.Errorf("row %d is %s d=%d, want %s d=10", i, r.Series.Name(), r.D, Fig5Series[i].Name())
		}
		if r.Checked != 12 {
			t.Errorf("%s: %d repetitions checked, want 12", r.Series.Name(), r.Checked)
		}
		if r.Lat.N != 10 || r.Floor.N != 10 {
			t.Errorf("%s: %d latencies and %d floor ticks, want 10 each", r.Series.Name(), r.Lat.N, r.Floor.N)
		}
		if !(0 < r.Lat.Min && r.Lat.Min <= r.Lat.Mean && r.Lat.Mean <= r.Lat.Max && r.Lat.CILo <= r.Lat.Mean && r.Lat.Mean <= r.Lat.CIHi) {
			t.Errorf("%s: stats out of order: %+v", r.Series.Name(), r.Lat)
		}
		if r.BytesPerParty() <= 0 || r.Sizes.Measure <= 0 || r.Sizes.Exchange <= 0 || r.Sizes.Output <= 0 {
			t.Errorf("%s: bytes per party %d, sizes %+v", r.Series.Name(), r.BytesPerParty(), r.Sizes)
		}
	}
	// The fixed-mask parties prepare each next repetition during the pause
	// (every repetition but the first, both parties; a loaded machine may
	// delay a timer past a repetition's start, which then closes unprepared).
	if got := rows[1].Prepared; got < 12 {
		t.Errorf("fixed mask: %d of %d closes prepared", got, 2*11)
	}
	if rows[0].Prepared != 0 {
		t.Errorf("per-tick: %d closes prepared, want 0", rows[0].Prepared)
	}
	// Per-tick sends S (d x d) and T; fixed mask only T: d + 1 times fewer elements.
	if rows[0].BytesPerParty() <= rows[1].BytesPerParty() {
		t.Errorf("per-tick sends %d B per party, fixed mask %d B: want more", rows[0].BytesPerParty(), rows[1].BytesPerParty())
	}
	if !rows[2].Sizes.OneWay || rows[0].Sizes.OneWay {
		t.Errorf("floor topologies: protocol2 one-way %v, protocol1 one-way %v", rows[2].Sizes.OneWay, rows[0].Sizes.OneWay)
	}
}

// TestFig5ChecksCatchWrongResults: the client-side checks are not vacuous.
func TestFig5ChecksCatchWrongResults(t *testing.T) {
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	rng := mpc.NewPRG([32]byte{1}, [16]byte{})
	mp, err := newMulProto(f, mpc.PerTick, 4, 1, rng, 0)
	if err != nil {
		t.Fatal(err)
	}
	z := mpc.NewMatrix(4, 1)
	f.MatMul(z, mp.x, mp.ys[0])
	if err := mp.check(1, z); err != nil {
		t.Fatalf("correct product rejected: %v", err)
	}
	z.Data[3] = f.Add(z.Data[3], f.One())
	if err := mp.check(1, z); !errors.Is(err, ErrWrongResult) {
		t.Fatalf("product off by one accepted: %v", err)
	}
	tp, err := newTruncProto(f, 4, 1, 9, 40, rng)
	if err != nil {
		t.Fatal(err)
	}
	for k := range z.Data {
		z.Data[k] = f.Add(f.RoundShift(tp.xs[0].Data[k], 9), f.FromInt64(int64(k%3)-1)) // W in {-1, 0, 1}
	}
	if err := tp.check(1, z); err != nil {
		t.Fatalf("truncation within {-1,0,1} rejected: %v", err)
	}
	z.Data[2] = f.Add(z.Data[2], f.FromInt64(2)) // W = 1 + 2
	if err := tp.check(1, z); !errors.Is(err, ErrWrongResult) {
		t.Fatalf("truncation off by 2 accepted: %v", err)
	}
}

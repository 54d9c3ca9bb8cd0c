package bench

import (
	"math"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// TestRandomControllers: the bench controllers are deterministic, exact on
// the grid, accepted by the modulus sizing, and keep the bench plant's
// measurement inside Q<18,9> for longer than any run.
func TestRandomControllers(t *testing.T) {
	for _, n := range []int{4, 16, 32, 64, 99} {
		cs := RandomController(n, 1, 1)
		if again := RandomController(n, 1, 1); again.A[n-1][n-1] != cs.A[n-1][n-1] || again.B[0][0] != cs.B[0][0] {
			t.Fatalf("n=%d: not deterministic", n)
		}
		rz, err := cs.Resolve(mpc.FixedMask)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if rz.QuantErr != 0 {
			t.Errorf("n=%d: entries off the grid by %g", n, rz.QuantErr)
		}
		if rz.Sizing.Rho >= 0.5+1e-9 {
			t.Errorf("n=%d: spectral radius %g, want <= 1/2", n, rz.Sizing.Rho)
		}
		p, err := plant.New(BenchPlant())
		if err != nil {
			t.Fatal(err)
		}
		fc := cs.NewFloatController()
		lim := math.Exp2(benchK - 1 - benchL)
		maxY := 0.0
		for k := 0; k < 5000; k++ {
			y := p.Measure()
			maxY = math.Max(maxY, math.Abs(y[0]))
			p.Step(fc.Step(y))
		}
		if maxY >= lim/2 {
			t.Errorf("n=%d: |y| reached %g, want < %g", n, maxY, lim/2)
		}
	}
}

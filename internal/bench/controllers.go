package bench

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Random controllers for the tick-latency cases n = 4, 16, 32, 64.
//
// Entries are integers over 2^l (on the Q<k,l> grid, so nothing is rounded)
// drawn from a PRNG seeded by n, so every run benchmarks the same controller.
// Stability is by construction, not by luck: every row of A has absolute
// sum at most 1/2, so its spectral radius is at most ||A||_∞ <= 1/2. B, C
// and D are small enough that the controller's ℓ∞ gain is at most
// ||D|| + ||C|| ||B|| / (1 - ||A||) <= 1/8 + (1/4)(1/4)/(1/2) = 1/4.
//
// The plant (BenchPlant) is a lightly damped oscillator, y = x1, with
// x_{t+1} = 0.999 R(0.1) x_t + [1e-4; 0] u_t: its ℓ∞ gain (the ℓ1 norm of
// its impulse response) is below 1e-4 / (1 - 0.999) = 0.1, so the loop gain is
// below 0.025 and the closed loop is stable by the small-gain theorem. Started
// at y = 100 it rings down slowly (y is still ~14 after 2,000 ticks), so the
// measurements stay inside Q<18,9> (|y| < 256) and far from zero.

// benchK and benchL are the fixed-point format of the random controllers
// (the pendulum's Q<18,9>).
const benchK, benchL = 18, 9

// RandomController returns the deterministic random controller with n
// states, m inputs and p outputs, in Q<18,9>.
func RandomController(n, m, p int) mpc.ControllerSpec {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(1000*m+p)))
	grid := math.Exp2(benchL)
	// mat draws rows x cols entries in [-a, a] / 2^l, a = floor(rowSum 2^l / cols)
	// so that every row's absolute sum is at most rowSum.
	mat := func(rows, cols int, rowSum float64) [][]float64 {
		a := int(math.Floor(rowSum * grid / float64(cols)))
		x := make([][]float64, rows)
		for i := range x {
			x[i] = make([]float64, cols)
			for j := range x[i] {
				x[i][j] = float64(rng.IntN(2*a+1)-a) / grid
			}
		}
		return x
	}
	return mpc.ControllerSpec{
		A:       mat(n, n, 0.5),
		B:       mat(n, p, 0.25),
		C:       mat(m, n, 0.25),
		D:       mat(m, p, 0.125),
		X0:      make([]float64, n),
		K:       benchK,
		L:       benchL,
		Lambda:  mpc.DefaultLambda,
		Modulus: mpc.ModulusAuto,
	}
}

// BenchPlant is the LTI plant the random controllers run against (m = p = 1).
func BenchPlant() plant.Spec {
	r, th := 0.999, 0.1
	c, s := r*math.Cos(th), r*math.Sin(th)
	return plant.Spec{Kind: plant.KindLTI, A: [][]float64{{c, -s}, {s, c}}, B: [][]float64{{1e-4}, {0}}, C: [][]float64{{1, 0}}, X0: []float64{100, 0}}
}

// caseName is "n<n>".
func caseName(n int) string { return fmt.Sprintf("n%d", n) }

package mpc

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// pendulum returns the controller of protocol.md §8, gains k = [264, -549, 5, -6, -431]/512.
func pendulum() (A, B, C, D [][]float64) {
	k1, k2, k3, k4, k5 := 264.0/512, -549.0/512, 5.0/512, -6.0/512, -431.0/512
	A = [][]float64{{0, 0, 0}, {0, 0, 0}, {k3, k4, k5}}
	B = [][]float64{{-50, 0}, {0, -50}, {k1, k2}}
	C = [][]float64{{k3, k4, k5}}
	D = [][]float64{{k1, k2}}
	return A, B, C, D
}

// powNorms returns ||A^t||_inf for t = 0..T, by plain repeated multiplication.
func powNorms(A [][]float64, T int) []float64 {
	n := len(A)
	p := make([][]float64, n)
	for i := range p {
		p[i] = make([]float64, n)
		p[i][i] = 1
	}
	out := make([]float64, 0, T+1)
	for t := 0; t <= T; t++ {
		norm := 0.0
		for _, row := range p {
			r := 0.0
			for _, v := range row {
				r += math.Abs(v)
			}
			norm = math.Max(norm, r)
		}
		out = append(out, norm)
		q := make([][]float64, n)
		for i := range q {
			q[i] = make([]float64, n)
			for j := range q[i] {
				for h := range n {
					q[i][j] += p[i][h] * A[h][j]
				}
			}
		}
		p = q
	}
	return out
}

// checkCGamma checks ||A^t|| <= c γ^t for t <= T and the series cross-check.
func checkCGamma(t *testing.T, A [][]float64, c, gamma, series float64, T int) {
	t.Helper()
	if c < 1 || !(gamma >= 0 && gamma < 1) || math.IsInf(c, 0) || math.IsNaN(c) {
		t.Fatalf("c, γ = %v, %v: want c >= 1 finite and 0 <= γ < 1", c, gamma)
	}
	for i, v := range powNorms(A, T) {
		// The absolute slack covers subnormal powers, where relative rounding is coarse.
		if bound := c * math.Pow(gamma, float64(i)); v > bound*(1+1e-9)+1e-300 {
			t.Fatalf("||A^%d|| = %v > c γ^t = %v", i, v, bound)
		}
	}
	if lim := c / (1 - gamma); series > lim*(1+1e-9) {
		t.Errorf("SeriesSum = %v > c/(1-γ) = %v", series, lim)
	}
}

func TestSizeModulusPendulum(t *testing.T) {
	A, B, C, D := pendulum()
	for _, tc := range []struct{ lambda, theorem int }{{40, 93}, {64, 117}} {
		s, err := SizeModulus(A, B, C, D, 18, 9, tc.lambda)
		if err != nil {
			t.Fatalf("lambda %d: %v", tc.lambda, err)
		}
		rho := 431.0 / 512
		if math.Abs(s.Rho-rho) > 1e-9 {
			t.Errorf("Rho = %v, want %v", s.Rho, rho)
		}
		if s.C < 1 || s.C > 1.1 {
			t.Errorf("C = %v, want in [1, 1.1]", s.C)
		}
		// Any γ just above ρ is optimal here (A^t = k5^(t-1) A), so Gamma hugs ρ = 0.84180.
		if !(s.Gamma > rho && s.Gamma < 0.9) {
			t.Errorf("Gamma = %v, want in (%v, 0.9)", s.Gamma, rho)
		}
		// inf_γ c/(1-γ) = ||A|| / (ρ (1-ρ)) = 442·512 / (431·81), reached as γ -> ρ.
		if got, want := s.C/(1-s.Gamma), 442.0*512/(431*81); math.Abs(got-want) > 1e-4*want {
			t.Errorf("c/(1-γ) = %v, want %v", got, want)
		}
		F := math.Max(3, 2*(1+2)*3*s.C/(1-s.Gamma))
		if s.F != F {
			t.Errorf("F = %v, want %v", s.F, F)
		}
		theorem := 3*18 - 9 + tc.lambda + 2 + int(math.Floor(math.Log2(F)))
		if s.TheoremBits != theorem || theorem != tc.theorem {
			t.Errorf("TheoremBits = %d, want %d (by hand %d)", s.TheoremBits, theorem, tc.theorem)
		}
		// Σ ||A^t|| = 1 + ||A|| / (1 - |k5|) = 1 + 442/81.
		if want := 1 + 442.0/81; math.Abs(s.SeriesSum-want) > 1e-12 || s.SeriesSum > s.C/(1-s.Gamma) {
			t.Errorf("SeriesSum = %v, want %v <= %v", s.SeriesSum, want, s.C/(1-s.Gamma))
		}
		if s.MaxPower != 1 {
			t.Errorf("MaxPower = %v, want 1", s.MaxPower)
		}
		// X_max = 2^17 + S (50·2^17 + 3/2); Z_max from row 3: 442 X_max + 813·2^17.
		X := math.Ldexp(1, 17) + s.SeriesSum*(50*math.Ldexp(1, 17)+1.5)
		Z := 442*X + 813*math.Ldexp(1, 17)
		if math.Abs(s.StateBound-X) > 1e-9*X || math.Abs(s.ProductBound-Z) > 1e-9*Z {
			t.Errorf("StateBound, ProductBound = %v, %v, want %v, %v", s.StateBound, s.ProductBound, X, Z)
		}
		if want := int(math.Floor(math.Log2(Z))) + tc.lambda + 3; s.NumericBits != want {
			t.Errorf("NumericBits = %d, want %d", s.NumericBits, want)
		}
		if want := max(s.TheoremBits, s.NumericBits); s.RequiredBits != want {
			t.Errorf("RequiredBits = %d, want %d", s.RequiredBits, want)
		}
		checkCGamma(t, A, s.C, s.Gamma, s.SeriesSum, 20000)
		t.Logf("lambda %d: Rho %.9f C %.6f Gamma %.9f F %.4f theorem %d numeric %d required %d",
			tc.lambda, s.Rho, s.C, s.Gamma, s.F, s.TheoremBits, s.NumericBits, s.RequiredBits)
	}
}

func TestSizeModulusUnstable(t *testing.T) {
	for _, tc := range []struct {
		A    [][]float64
		rho  string
		want float64
	}{
		{[][]float64{{0.5, 1}, {0, 1.25}}, "1.2500", 1.25},
		{[][]float64{{1}}, "1.0000", 1},
		{[][]float64{{0, -1}, {1, 0}}, "1.0000", 1}, // rotation: |λ| = 1, complex pair
	} {
		n := len(tc.A)
		B := make([][]float64, n)
		for i := range B {
			B[i] = []float64{1}
		}
		C := [][]float64{make([]float64, n)}
		s, err := SizeModulus(tc.A, B, C, [][]float64{{0}}, 18, 9, 40)
		if !errors.Is(err, ErrUnstable) {
			t.Fatalf("A = %v: err = %v, want ErrUnstable", tc.A, err)
		}
		for _, sub := range []string{"spectral radius " + tc.rho + " >= 1", `explicit "modulus"`} {
			if !strings.Contains(err.Error(), sub) {
				t.Errorf("error %q does not contain %q", err, sub)
			}
		}
		if math.Abs(s.Rho-tc.want) > 1e-12 {
			t.Errorf("Rho = %v, want %v", s.Rho, tc.want)
		}
	}
}

func TestStateBoundJordan(t *testing.T) {
	A := [][]float64{{0.9, 1}, {0, 0.9}}
	st, err := stateBound(A)
	if err != nil {
		t.Fatal(err)
	}
	if st.c <= 2 {
		t.Errorf("c = %v, want a large c for a Jordan block", st.c)
	}
	// Σ_t (0.9^t + t 0.9^(t-1)) = 1/0.1 + 1/0.1^2.
	if math.Abs(st.series-110) > 1e-9 {
		t.Errorf("series = %v, want 110", st.series)
	}
	checkCGamma(t, A, st.c, st.gamma, st.series, 5000)
	// c/(1-γ) is minimal: nearby γ do no better (c(γ) computed by brute force).
	norms := powNorms(A, 5000)
	cOf := func(g float64) float64 {
		c := 0.0
		for i, v := range norms {
			c = math.Max(c, v/math.Pow(g, float64(i)))
		}
		return c
	}
	best := st.c / (1 - st.gamma)
	for _, g := range []float64{st.gamma - 0.01, st.gamma - 0.001, st.gamma + 0.001, st.gamma + 0.01} {
		if v := cOf(g) / (1 - g); v < best*(1-1e-6) {
			t.Errorf("γ = %v gives c/(1-γ) = %v < chosen %v", g, v, best)
		}
	}
	t.Logf("Jordan 0.9: c %.6f γ %.6f c/(1-γ) %.4f", st.c, st.gamma, best)

	// The same through SizeModulus with dyadic entries.
	a := 461.0 / 512
	A = [][]float64{{a, 1}, {0, a}}
	s, err := SizeModulus(A, [][]float64{{1}, {0.5}}, [][]float64{{1, 0}}, [][]float64{{0}}, 20, 9, 40)
	if err != nil {
		t.Fatal(err)
	}
	checkCGamma(t, A, s.C, s.Gamma, s.SeriesSum, 5000)
}

func TestStateBoundNilpotent(t *testing.T) {
	for _, tc := range []struct {
		name          string
		A             [][]float64
		c, gamma, sum float64
	}{
		{"zero", [][]float64{{0, 0}, {0, 0}}, 1, 0, 1},
		// ||A^t|| = 1, 1, 0, ...: c(γ) = 1/γ, c/(1-γ) minimal at γ = 1/2.
		{"shift2", [][]float64{{0, 1}, {0, 0}}, 2, 0.5, 2},
		{"upper3", [][]float64{{0, 1, 1}, {0, 0, 1}, {0, 0, 0}}, math.NaN(), math.NaN(), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := stateBound(tc.A)
			if err != nil {
				t.Fatal(err)
			}
			if st.rho > 1e-6 {
				t.Errorf("rho = %v, want 0", st.rho)
			}
			if !math.IsNaN(tc.c) && (math.Abs(st.c-tc.c) > 1e-6 || math.Abs(st.gamma-tc.gamma) > 1e-6) {
				t.Errorf("c, γ = %v, %v, want %v, %v", st.c, st.gamma, tc.c, tc.gamma)
			}
			if st.series != tc.sum {
				t.Errorf("series = %v, want %v", st.series, tc.sum)
			}
			checkCGamma(t, tc.A, st.c, st.gamma, st.series, 50)
		})
	}

	// A = 0 through SizeModulus: F = max{n, p(1+p) n}.
	s, err := SizeModulus([][]float64{{0, 0}, {0, 0}}, [][]float64{{1}, {1}}, [][]float64{{1, 1}}, [][]float64{{0}}, 16, 8, 40)
	if err != nil {
		t.Fatal(err)
	}
	if s.Rho != 0 || s.C != 1 || s.Gamma != 0 || s.F != 4 || s.TheoremBits != 3*16-8+40+2+2 {
		t.Errorf("zero A: Rho %v C %v Gamma %v F %v TheoremBits %d", s.Rho, s.C, s.Gamma, s.F, s.TheoremBits)
	}
}

func TestStateBoundRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for trial := range 50 {
		n := 1 + rng.Intn(4)
		A := make([][]float64, n)
		for i := range A {
			A[i] = make([]float64, n)
			for j := range A[i] {
				A[i][j] = float64(rng.Intn(257)-128) / 128
			}
		}
		st, err := stateBound(A)
		if errors.Is(err, ErrUnstable) {
			continue
		}
		if err != nil {
			t.Fatalf("trial %d, A = %v: %v", trial, A, err)
		}
		checkCGamma(t, A, st.c, st.gamma, st.series, 3000)
		if direct := powNorms(A, 3000); st.maxPow < direct[0] {
			t.Errorf("maxPow = %v < 1", st.maxPow)
		}
	}
}

func TestSizeModulusParams(t *testing.T) {
	A, B, C, D := pendulum()
	for _, tc := range []struct {
		name       string
		A, B, C, D [][]float64
		k, l, lam  int
		want       string
	}{
		{"k small", A, B, C, D, 1, 0, 40, "k = 1"},
		{"k large", A, B, C, D, 63, 9, 40, "k = 63"},
		{"l zero", A, B, C, D, 18, 0, 40, "l = 0"},
		{"l = k", A, B, C, D, 18, 18, 40, "l = 18"},
		{"lambda zero", A, B, C, D, 18, 9, 0, "lambda = 0"},
		{"lambda large", A, B, C, D, 18, 9, 201, "lambda = 201"},
		{"A empty", nil, B, C, D, 18, 9, 40, "A is empty"},
		{"B empty", A, nil, C, D, 18, 9, 40, "B is empty"},
		{"C empty", A, B, nil, D, 18, 9, 40, "C is empty"},
		{"A not square", [][]float64{{0, 0}, {0, 0}, {0, 0}}, B, C, D, 18, 9, 40, "A row 0 has 2 columns, want 3"},
		{"B rows", A, B[:2], C, D, 18, 9, 40, "B has 2 rows, want 3"},
		{"B ragged", A, [][]float64{{-50, 0}, {0, -50}, {0}}, C, D, 18, 9, 40, "B row 2 has 1 columns, want 2"},
		{"C cols", A, B, [][]float64{{0, 0}}, D, 18, 9, 40, "C row 0 has 2 columns, want 3"},
		{"D rows", A, B, C, [][]float64{{0, 0}, {0, 0}}, 18, 9, 40, "D has 2 rows, want 1"},
		{"D cols", A, B, C, [][]float64{{0}}, 18, 9, 40, "D row 0 has 1 columns, want 2"},
		{"NaN", A, B, C, [][]float64{{0, math.NaN()}}, 18, 9, 40, "D[0][1] = NaN is not finite"},
		{"Inf", [][]float64{{0, 0, 0}, {0, math.Inf(1), 0}, {0, 0, 0}}, B, C, D, 18, 9, 40, "A[1][1] = +Inf is not finite"},
		{"not dyadic", A, B, [][]float64{{0.1, 0, 0}}, D, 18, 9, 40, "C[0][0] = 0.1 is not exactly representable in Q<18,9>"},
		{"too fine", A, B, C, D, 18, 8, 40, "is not exactly representable in Q<18,8>"},
		{"too large", A, B, C, D, 15, 9, 40, "B[0][0] = -50 is outside Q<15,9>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SizeModulus(tc.A, tc.B, tc.C, tc.D, tc.k, tc.l, tc.lam)
			if !errors.Is(err, ErrParams) {
				t.Fatalf("err = %v, want ErrParams", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	// Range edges of Q<k,l>: -2^(k-1) is in, 2^(k-1) is not (k = 62: 2^61 - 1 is no float64).
	for _, tc := range []struct {
		v  float64
		ok bool
	}{{-math.Ldexp(1, 61-9), true}, {math.Ldexp(1, 61-9), false}, {math.Ldexp(1, 61-9) - 1, true}} {
		_, err := encodeExact("B", 0, 0, tc.v, 62, 9)
		if (err == nil) != tc.ok {
			t.Errorf("encodeExact(%v, Q<62,9>) err = %v, want ok %v", tc.v, err, tc.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	A, B, C, D := pendulum()
	s, err := SizeModulus(A, B, C, D, 18, 9, 40)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(126.9999999); err != nil { // 2^127 - 1
		t.Errorf("Check(2^127-1) = %v, want nil", err)
	}
	err = s.Check(63.9999999) // a 64-bit modulus
	if !errors.Is(err, ErrModulusSmall) {
		t.Fatalf("Check(64-bit) = %v, want ErrModulusSmall", err)
	}
	want := "mpc: modulus too small for the controller: need 93 bits (theorem 93, numeric check 77), modulus has 63.99"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if err := s.Check(math.NaN()); !errors.Is(err, ErrModulusSmall) {
		t.Errorf("Check(NaN) = %v, want ErrModulusSmall", err)
	}

	// Check's direct conditions agree with RequiredBits, also when the numeric check binds.
	loose := s
	loose.TheoremBits = 10
	loose.RequiredBits = loose.NumericBits
	for _, sz := range []Sizing{s, loose} {
		for b := 1; b <= 200; b++ {
			for _, frac := range []float64{0, 0.5, 0.9999999} {
				err := sz.Check(float64(b) + frac)
				if got, want := err == nil, b >= sz.RequiredBits; got != want {
					t.Errorf("RequiredBits %d: Check(%v) = %v", sz.RequiredBits, float64(b)+frac, err)
				}
			}
		}
	}

	if got := Kappa(126, 40); got != 85 {
		t.Errorf("Kappa(126, 40) = %d, want 85", got)
	}
}

func TestNumericBitsMonotoneInK(t *testing.T) {
	A, B, C, D := pendulum()
	prev := 0
	for k := 16; k <= 62; k++ {
		s, err := SizeModulus(A, B, C, D, k, 9, 40)
		if err != nil {
			t.Fatalf("k = %d: %v", k, err)
		}
		if s.NumericBits < prev {
			t.Errorf("k = %d: NumericBits = %d < %d at k-1", k, s.NumericBits, prev)
		}
		prev = s.NumericBits
	}
}

// simulate runs the encoded controller of Protocol 3 in int64 with Protocol 2's truncation
// x̄' = round(z/2^l) + w and returns max |Φ̄ξ| and max |x̄| seen. next picks ȳ_t and w_t.
func simulate(t *testing.T, phi [][]int64, n, p, k, l, steps int, x0 []int64,
	next func(step int, x []int64) (y []int64, w func(i int, z int64) int64)) (maxZ, maxX int64) {
	t.Helper()
	x := append([]int64(nil), x0...)
	xi := make([]int64, n+p)
	abs := func(v int64) int64 { return max(v, -v) }
	for step := range steps {
		y, w := next(step, x)
		copy(xi, x)
		copy(xi[n:], y)
		for i, row := range phi {
			var z int64
			for j, v := range row {
				z += v * xi[j]
			}
			maxZ = max(maxZ, abs(z))
			if i < n {
				x[i] = (z+1<<(l-1))>>l + w(i, z) // >> is floor division by 2^l
			}
		}
		for _, v := range x {
			maxX = max(maxX, abs(v))
		}
	}
	return maxZ, maxX
}

func encodeAll(t *testing.T, A, B, C, D [][]float64, l int) [][]int64 {
	t.Helper()
	n := len(A)
	var phi [][]int64
	for r := range n + len(C) {
		var row []int64
		top, bot := A, B
		if r >= n {
			top, bot, r = C, D, r-n
		}
		for _, v := range append(append([]float64(nil), top[r]...), bot[r]...) {
			e := math.Ldexp(v, l)
			if e != math.Trunc(e) {
				t.Fatalf("%v not dyadic", v)
			}
			row = append(row, int64(e))
		}
		phi = append(phi, row)
	}
	return phi
}

func TestProductBoundBruteForce(t *testing.T) {
	a := 461.0 / 512
	for _, tc := range []struct {
		name       string
		A, B, C, D [][]float64
		k, l       int
	}{
		{"pendulum", nil, nil, nil, nil, 18, 9},
		{"jordan", [][]float64{{a, 1}, {0, a}}, [][]float64{{1}, {-0.5}}, [][]float64{{1, 0.25}}, [][]float64{{2}}, 20, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.A == nil {
				tc.A, tc.B, tc.C, tc.D = pendulum()
			}
			s, err := SizeModulus(tc.A, tc.B, tc.C, tc.D, tc.k, tc.l, 40)
			if err != nil {
				t.Fatal(err)
			}
			if s.ProductBound >= math.Ldexp(1, 62) {
				t.Fatalf("ProductBound %v too large for int64", s.ProductBound)
			}
			phi := encodeAll(t, tc.A, tc.B, tc.C, tc.D, tc.l)
			n, p := len(tc.A), len(tc.B[0])
			half := int64(1) << (tc.k - 1)
			rng := rand.New(rand.NewSource(1))
			randZk := func() int64 { return rng.Int63n(2*half) - half }

			x0 := make([]int64, n)
			for i := range x0 {
				x0[i] = randZk()
			}
			random := func(int, []int64) ([]int64, func(int, int64) int64) {
				y := make([]int64, p)
				for i := range y {
					y[i] = randZk()
				}
				return y, func(int, int64) int64 { return rng.Int63n(3) - 1 }
			}
			// Greedy adversary: extreme inputs maximizing the next state's L1 norm, and
			// truncation errors pushing outward.
			greedy := func(_ int, x []int64) ([]int64, func(int, int64) int64) {
				var bestY []int64
				bestV := int64(-1)
				for mask := range 1 << p {
					y := make([]int64, p)
					for j := range y {
						y[j] = -half
						if mask>>j&1 == 1 {
							y[j] = half - 1
						}
					}
					var v int64
					for i := range n {
						var z int64
						for j := range n {
							z += phi[i][j] * x[j]
						}
						for j := range p {
							z += phi[i][n+j] * y[j]
						}
						v += max(z, -z)
					}
					if v > bestV {
						bestV, bestY = v, y
					}
				}
				return bestY, func(_ int, z int64) int64 {
					if z < 0 {
						return -1
					}
					return 1
				}
			}
			for _, run := range []struct {
				name string
				next func(int, []int64) ([]int64, func(int, int64) int64)
			}{{"random", random}, {"greedy", greedy}} {
				maxZ, maxX := simulate(t, phi, n, p, tc.k, tc.l, 20000, x0, run.next)
				if float64(maxZ) >= s.ProductBound || float64(maxX) > s.StateBound {
					t.Errorf("%s: max |Φ̄ξ| = %d (bound %v), max |x̄| = %d (bound %v)",
						run.name, maxZ, s.ProductBound, maxX, s.StateBound)
				}
				t.Logf("%s: max |Φ̄ξ| / Z_max = %.4f, max |x̄| / X_max = %.4f", run.name,
					float64(maxZ)/s.ProductBound, float64(maxX)/s.StateBound)
			}
		})
	}
}

// A stable A that decays too slowly for the sizing to bound its powers
// (ρ = 1 − 2^-18: ||A^t|| ≤ 1/2 only past t ≈ 181,700, beyond
// maxPowerSteps) cannot be certified: "auto" refuses it, naming the
// remedy, and the explicit modulus the error asks for runs with a warning,
// as it does for an unstable A.
func TestResolveUncertifiedA(t *testing.T) {
	spec := ControllerSpec{
		A: [][]float64{{1 - 0x1p-18}}, B: [][]float64{{0x1p-8}}, C: [][]float64{{1}}, D: [][]float64{{0}},
		X0: []float64{0}, K: 24, L: 18, Lambda: DefaultLambda, Modulus: ModulusAuto,
	}
	_, err := spec.Resolve(PerTick)
	if !errors.Is(err, ErrUncertified) || !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), `explicit "modulus"`) {
		t.Fatalf("auto: err = %v, want ErrUncertified (and ErrParams) naming the explicit modulus", err)
	}
	spec.Modulus = PresetM127
	res, err := spec.Resolve(PerTick)
	if err != nil {
		t.Fatalf("explicit %s: %v", PresetM127, err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "certify") || !strings.Contains(res.Warnings[0], "0.999996") {
		t.Fatalf("explicit %s: warnings %q, want one saying the bound cannot be certified, with ρ", PresetM127, res.Warnings)
	}
	if res.Params.Field.Name() != PresetM127 {
		t.Fatalf("field %s, want %s", res.Params.Field.Name(), PresetM127)
	}
}

// A lambda under 40 runs, with a warning that says how little each
// truncation then hides; 40 warns of nothing.
func TestResolveWarnsSmallLambda(t *testing.T) {
	spec := ControllerSpec{
		A: [][]float64{{0.5}}, B: [][]float64{{0.25}}, C: [][]float64{{1}}, D: [][]float64{{0}},
		X0: []float64{0}, K: 24, L: 12, Lambda: 8, Modulus: ModulusAuto,
	}
	res, err := spec.Resolve(FixedMask)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "lambda = 8") || !strings.Contains(res.Warnings[0], "2^-9") {
		t.Fatalf("lambda 8: warnings %q, want one naming lambda = 8 and 2^-9", res.Warnings)
	}
	spec.Lambda = DefaultLambda
	if res, err = spec.Resolve(FixedMask); err != nil || len(res.Warnings) != 0 {
		t.Fatalf("lambda %d: warnings %q, err %v; want none", DefaultLambda, res.Warnings, err)
	}
}

// Sizing an A whose power norms are flat near ρ (A = ρI: c(γ) = 1 for every
// γ ≥ ρ) stays clear of ρ, where a certificate needs up to every power there
// is: before, the search went to γ = ρ + 10^-12 and computed 10^5 powers,
// each an n×n product (for n = 1,000 about 10^14 multiply-adds: a day).
func TestSizingStaysClearOfRho(t *testing.T) {
	const n = 8
	A := make([][]float64, n)
	for i := range A {
		A[i] = make([]float64, n)
		A[i][i] = 0.5
	}
	pn := newPowerNorms(A)
	c, g, err := pn.chooseGamma(0.5)
	if err != nil {
		t.Fatal(err)
	}
	if len(pn.logN) > 100 {
		t.Errorf("%d powers computed for A = 0.5·I, want a handful", len(pn.logN)-1)
	}
	// The bound is as good as at ρ itself, to a millionth.
	if lim := c / (1 - g); c < 1 || lim > 2*(1+1e-5) {
		t.Errorf("c = %v, γ = %v: c/(1-γ) = %v, want about 2", c, g, lim)
	}
}

// The powers computed are capped by their total work, so that a large A
// is refused (ErrUncertified, naming n) in seconds, not sized for hours.
func TestPowerStepsBoundedByWork(t *testing.T) {
	if got := powerSteps(5000); got != 1 {
		t.Errorf("n = 5,000: %d powers, want 1 (A = 0 is still sized)", got)
	}
	if got := powerSteps(3); got != maxPowerSteps {
		t.Errorf("n = 3: %d powers, want all %d", got, maxPowerSteps)
	}
	for _, n := range []int{64, 200, 1000} {
		got := powerSteps(n)
		if work := float64(got) * float64(n*n*n); got >= maxPowerSteps || work > powerWork {
			t.Errorf("n = %d: %d powers, %.3g multiply-adds; want at most %.3g", n, got, work, powerWork)
		}
	}
	// A = 0.99999·I with n = 150 needs about 69,000 powers before
	// ||A^t|| <= 1/2, more than its size allows (118 at a tenth of the
	// work, to keep the test short): uncertified, with n in the error.
	defer func(w float64) { powerWork = w }(powerWork)
	powerWork /= 10
	const n = 150
	A := make([][]float64, n)
	for i := range A {
		A[i] = make([]float64, n)
		A[i][i] = 0.99999
	}
	_, err := stateBound(A)
	if !errors.Is(err, ErrUncertified) || !strings.Contains(err.Error(), "n = 150") {
		t.Fatalf("err = %v, want ErrUncertified naming n = 150", err)
	}
}

package mpc

import (
	"fmt"
	"math"
	"math/cmplx"

	"gonum.org/v1/gonum/mat"
)

// maxPowerSteps caps how many powers A^t are computed to certify (c, γ) and to sum
// Σ_t ||A^t||_inf. Each step costs one n×n matrix product, n³ multiply-adds; powerWork
// caps their total, so that a large A is refused (ErrUncertified) in seconds rather than
// sized for hours (n = 1000 would take 10^14 at 10^5 powers): n = 32 keeps all 10^5
// powers, n = 64 about 15,000, n = 1,000 four.
const maxPowerSteps = 100000

// powerWork is the multiply-adds the powers cost at most (a variable for the tests).
var powerWork = 4e9

// powerSteps is the number of powers sizing computes at most for an n×n A, at least 1.
func powerSteps(n int) int {
	return max(1, int(min(maxPowerSteps, powerWork/math.Max(1, float64(n)*float64(n)*float64(n)))))
}

// certMargin is the slack, in natural-log units, asked of the certificate
// ||A^L||_inf / γ^L <= exp(-certMargin) < 1 (see powerNorms.c), so that rounding in the
// float64 powers cannot turn a borderline certificate into a false one.
const certMargin = 1e-6

// Sizing is the result of sizing q for a controller (protocol.md §7), together with the
// direct numeric check that backs the reconstructed theorem.
//
// All bit counts are lower bounds on log2 q. Since they are integers, log2 q >= b holds
// exactly when floor(log2 q) >= b, which for an integer q is q.BitLen()-1 >= b: the Mersenne
// prime 2^127-1 gives 126 full bits, not 127.
type Sizing struct {
	K, L, Lambda int // Q<K,L> and the statistical security λ that were sized for

	Rho      float64 // spectral radius of A
	C, Gamma float64 // ||A^t||_inf <= C*Gamma^t for all t >= 0 (induced infinity norm); C >= 1
	// F = f(n, p, c, γ) = max{n, p(1+p) n c/(1-γ)}. The seed text of Theorem 1 is garbled;
	// the max{...} reading is ours (protocol.md §7). NumericBits backs it.
	F           float64
	TheoremBits int // 3k - l + λ + 2 + floor(log2 F)

	MaxPower  float64 // max_{t>=0} ||A^t||_inf (>= 1, <= C)
	SeriesSum float64 // Σ_{t>=0} ||A^t||_inf computed directly (an upper bound); checked <= C/(1-Gamma)
	// StateBound X_max bounds |x̄_t|_inf (scale 2^l) for every t, every x_0 in Q<k,l>^n,
	// every input sequence in Q<k,l>^p and every truncation error of Protocol 2.
	StateBound float64
	// ProductBound Z_max bounds |Φ̄ ξ_t|_inf (scale 2^(2l)), the values that enter
	// Protocol 2 (state rows) and reach the actuator (output rows).
	ProductBound float64
	NumericBits  int // least b with 2^(b-λ-2) > Z_max and b-λ-1 > l (see SizeModulus)

	RequiredBits int // max(TheoremBits, NumericBits)
}

// Kappa returns κ = floor(log2 q) - λ - 1, the bit size of the values that Protocol 2 may
// truncate (protocol.md §5). Protocol 2 needs κ > l.
func Kappa(log2qFloor, lambda int) int {
	return log2qFloor - lambda - 1
}

// SizeModulus sizes the modulus q for the controller x_{t+1} = A x_t + B y_t,
// u_t = C x_t + D y_t run by Protocol 3 (protocol.md §6) with fixed point Q<k,l> and
// statistical security λ = lambda. The matrices are in real units, row-major: A n×n, B n×p,
// C m×n, D m×p. Every entry must lie in Q<k,l> exactly, since the client shares
// Φ̄ = Ecd(Φ, l) = 2^l Φ as integers in Z<k>; 2 <= k <= 62, 1 <= l < k, 1 <= λ <= 200.
//
// Theorem (protocol.md §7, formula partly reconstructed): Protocol 3 never overflows if
//
//	log2 q >= 3k - l + λ + 2 + floor(log2 f(n, p, c, γ)),  f = max{n, p(1+p) n c/(1-γ)},
//
// where ||A^t||_inf <= c γ^t for all t >= 0, c >= 1, 0 <= γ < 1. SizeModulus picks γ in
// (ρ(A), 1) minimizing c(γ)/(1-γ) with c(γ) = sup_t ||A^t||_inf/γ^t, and certifies each c(γ)
// exactly: by submultiplicativity, once ||A^L||/γ^L <= 1 for some L >= 1, every t = jL+s
// has ||A^t||/γ^t <= ||A^s||/γ^s, so c(γ) = max_{s<L} ||A^s||/γ^s. For A = 0 it returns
// c = 1, γ = 0. An A with ρ(A) >= 1 has no (c, γ): the error wraps ErrUnstable and the
// returned Sizing carries Rho.
//
// Numeric check, in the encoded domain. With Φ̄ = 2^l Φ, Protocol 2 gives
// x̄_{t+1} = round((Ā x̄_t + B̄ ȳ_t)/2^l) + w_t = A x̄_t + B ȳ_t + d_t with |d_t|_inf <= 3/2
// (rounding error 1/2, w_t in {-1,0,1}), and |ȳ_t|_inf, |x̄_0|_inf <= 2^(k-1). Hence
//
//	|x̄_t|_inf <= X_max = M 2^(k-1) + S (||B||_inf 2^(k-1) + 3/2),
//
// M = max_t ||A^t||_inf, S = Σ_t ||A^t||_inf, and row i of Φ̄ ξ_t, ξ_t = [x̄_t; ȳ_t], obeys
// |(Φ̄ ξ_t)_i| <= Σ_{j<n} |Φ̄_ij| X_max + Σ_{j>=n} |Φ̄_ij| 2^(k-1); Z_max is the largest of
// these (at most ||Φ̄||_inf max(X_max, 2^(k-1))). Protocol 2 needs its input in Z<κ>,
// κ = floor(log2 q) - λ - 1 > l, which Z_max < 2^(κ-1) guarantees; the output rows then
// cannot wrap either, as Z_max < 2^(κ-1) < (q-1)/2. NumericBits is the least integer
// b = floor(log2 q) meeting both conditions. The check is float64 arithmetic: exact for the
// dyadic entries, with relative rounding far below the one bit that the floors absorb.
//
// A shape mismatch, a bad k, l or λ, or an entry not in Q<k,l> is reported as ErrParams.
func SizeModulus(A, B, C, D [][]float64, k, l, lambda int) (Sizing, error) {
	s := Sizing{K: k, L: l, Lambda: lambda}
	if k < 2 || k > 62 {
		return s, fmt.Errorf("%w: k = %d, want 2 <= k <= 62", ErrParams, k)
	}
	if l < 1 || l >= k {
		return s, fmt.Errorf("%w: l = %d, want 1 <= l < k = %d", ErrParams, l, k)
	}
	if lambda < 1 || lambda > 200 {
		return s, fmt.Errorf("%w: lambda = %d, want 1 <= lambda <= 200", ErrParams, lambda)
	}
	n := len(A)
	if n == 0 {
		return s, fmt.Errorf("%w: A is empty, want n×n with n >= 1", ErrParams)
	}
	if len(B) == 0 || len(B[0]) == 0 {
		return s, fmt.Errorf("%w: B is empty, want n×p with p >= 1", ErrParams)
	}
	if len(C) == 0 {
		return s, fmt.Errorf("%w: C is empty, want m×n with m >= 1", ErrParams)
	}
	p, m := len(B[0]), len(C)
	for _, d := range []struct {
		name       string
		x          [][]float64
		rows, cols int
	}{{"A", A, n, n}, {"B", B, n, p}, {"C", C, m, n}, {"D", D, m, p}} {
		if err := checkShape(d.name, d.x, d.rows, d.cols); err != nil {
			return s, err
		}
	}
	// Φ̄ = Ecd(Φ, l), row-major (n+m)×(n+p): [[Ā, B̄], [C̄, D̄]].
	phi := make([][]int64, n+m)
	for i := range phi {
		phi[i] = make([]int64, n+p)
	}
	for _, blk := range []struct {
		name   string
		x      [][]float64
		r0, c0 int
	}{{"A", A, 0, 0}, {"B", B, 0, n}, {"C", C, n, 0}, {"D", D, n, n}} {
		for i, row := range blk.x {
			for j, v := range row {
				e, err := encodeExact(blk.name, i, j, v, k, l)
				if err != nil {
					return s, err
				}
				phi[blk.r0+i][blk.c0+j] = e
			}
		}
	}

	st, err := stateBound(A)
	s.Rho = st.rho
	if err != nil {
		return s, err
	}
	s.C, s.Gamma, s.MaxPower, s.SeriesSum = st.c, st.gamma, st.maxPow, st.series

	s.F = math.Max(float64(n), float64(p*(1+p)*n)*s.C/(1-s.Gamma))
	s.TheoremBits = 3*k - l + lambda + 2 + floorLog2(s.F)

	// Numeric check. ||B||_inf = ||B̄||_inf / 2^l exactly (powers of two).
	half := math.Ldexp(1, k-1)
	bNorm := 0.0
	for i := 0; i < n; i++ {
		r := 0.0
		for j := n; j < n+p; j++ {
			r += math.Abs(float64(phi[i][j]))
		}
		bNorm = math.Max(bNorm, math.Ldexp(r, -l))
	}
	s.StateBound = s.MaxPower*half + s.SeriesSum*(bNorm*half+1.5)
	for _, row := range phi {
		zx, zy := 0.0, 0.0
		for j, v := range row {
			if j < n {
				zx += math.Abs(float64(v))
			} else {
				zy += math.Abs(float64(v))
			}
		}
		s.ProductBound = math.Max(s.ProductBound, zx*s.StateBound+zy*half)
	}
	s.NumericBits = l + lambda + 2 // κ = b - λ - 1 > l
	if s.ProductBound > 0 {
		// 2^(b-λ-2) > Z_max  <=>  b >= floor(log2 Z_max) + λ + 3.
		s.NumericBits = max(s.NumericBits, floorLog2(s.ProductBound)+lambda+3)
	}
	s.RequiredBits = max(s.TheoremBits, s.NumericBits)
	return s, nil
}

// Check reports whether a modulus q with log2 q = log2q (computed precisely by the caller;
// only floor(log2q) matters besides the theorem's integer bound) is large enough: it needs
// log2 q >= TheoremBits and, with κ = Kappa(floor(log2 q), λ), κ > l and Z_max < 2^(κ-1).
// These are the conditions NumericBits was derived from, re-tested directly. s must come
// from SizeModulus. The error wraps ErrModulusSmall.
func (s Sizing) Check(log2q float64) error {
	ok := log2q >= float64(s.TheoremBits) // false for NaN
	if ok {
		fl := int(math.Floor(math.Min(log2q, 1<<20)))
		kappa := Kappa(fl, s.Lambda)
		ok = kappa > s.L && s.ProductBound < math.Ldexp(1, kappa-1)
	}
	if ok {
		return nil
	}
	// Truncate rather than round the reported size, so it is never overstated.
	return fmt.Errorf("%w: need %d bits (theorem %d, numeric check %d), modulus has %.2f",
		ErrModulusSmall, s.RequiredBits, s.TheoremBits, s.NumericBits, math.Floor(log2q*100)/100)
}

// checkShape reports an ErrParams naming x unless x is rows×cols with finite entries.
func checkShape(name string, x [][]float64, rows, cols int) error {
	if len(x) != rows {
		return fmt.Errorf("%w: %s has %d rows, want %d", ErrParams, name, len(x), rows)
	}
	for i, row := range x {
		if len(row) != cols {
			return fmt.Errorf("%w: %s row %d has %d columns, want %d", ErrParams, name, i, len(row), cols)
		}
		for j, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: %s[%d][%d] = %v is not finite", ErrParams, name, i, j, v)
			}
		}
	}
	return nil
}

// encodeExact returns Ecd(v, l) = 2^l v, which must be an integer in Z<k>.
func encodeExact(name string, i, j int, v float64, k, l int) (int64, error) {
	e := math.Ldexp(v, l) // exact: scaling by a power of two
	if e != math.Trunc(e) {
		return 0, fmt.Errorf("%w: %s[%d][%d] = %v is not exactly representable in Q<%d,%d>", ErrParams, name, i, j, v, k, l)
	}
	// e >= 2^(k-1) rather than e > 2^(k-1)-1: the latter is not a float64 for k > 54.
	if lim := math.Ldexp(1, k-1); e < -lim || e >= lim {
		return 0, fmt.Errorf("%w: %s[%d][%d] = %v is outside Q<%d,%d>", ErrParams, name, i, j, v, k, l)
	}
	return int64(e), nil
}

// floorLog2 returns floor(log2 x) for finite x > 0, exactly.
func floorLog2(x float64) int {
	_, e := math.Frexp(x) // x = f 2^e, 1/2 <= f < 1
	return e - 1
}

// stability is what stateBound learns about A.
type stability struct {
	rho, c, gamma  float64
	maxPow, series float64
}

// stateBound computes ρ(A), a certified (c, γ) minimizing c/(1-γ), max_t ||A^t||_inf and
// Σ_t ||A^t||_inf for a square float64 matrix A; see SizeModulus.
func stateBound(A [][]float64) (stability, error) {
	var st stability
	n := len(A)
	a := mat.NewDense(n, n, nil)
	for i, row := range A {
		a.SetRow(i, row)
	}
	var eig mat.Eigen
	if !eig.Factorize(a, mat.EigenNone) {
		return st, fmt.Errorf("%w: eigenvalues of A did not converge", ErrParams)
	}
	for _, v := range eig.Values(nil) {
		st.rho = math.Max(st.rho, cmplx.Abs(v))
	}
	if !(st.rho < 1) {
		return st, fmt.Errorf("%w: spectral radius %.4f >= 1; no (c, γ) exists, so \"auto\" cannot size q; give an explicit \"modulus\" to run anyway", ErrUnstable, st.rho)
	}
	pn := newPowerNorms(A)
	var err error
	if st.c, st.gamma, err = pn.chooseGamma(st.rho); err != nil {
		return st, err
	}
	if st.series, st.maxPow, err = pn.series(); err != nil {
		return st, err
	}
	if lim := st.c / (1 - st.gamma); st.series > lim*(1+1e-9) {
		return st, fmt.Errorf("%w: internal: series bound violated: Σ ||A^t|| = %g > c/(1-γ) = %g (c = %g, γ = %g)", ErrParams, st.series, lim, st.c, st.gamma)
	}
	return st, nil
}

// powerNorms computes ln ||A^t||_inf for t = 0, 1, ... on demand. The power is kept scaled
// by a power of two (exactly), so it neither underflows nor overflows; an exactly zero power
// (A nilpotent) is recorded as -Inf and stays zero.
type powerNorms struct {
	n       int
	steps   int       // powers computed at most (powerSteps)
	a, p, q []float64 // A, A^t / 2^e, scratch; row-major n×n
	e       int
	logN    []float64 // logN[t] = ln ||A^t||_inf
}

func newPowerNorms(A [][]float64) *powerNorms {
	n := len(A)
	pn := &powerNorms{n: n, steps: powerSteps(n), a: make([]float64, n*n), p: make([]float64, n*n), q: make([]float64, n*n), logN: []float64{0}}
	for i, row := range A {
		copy(pn.a[i*n:], row)
		pn.p[i*n+i] = 1
	}
	return pn
}

// logNorm returns ln ||A^t||_inf and false if t > pn.steps.
func (pn *powerNorms) logNorm(t int) (float64, bool) {
	if t > pn.steps {
		return 0, false
	}
	n := pn.n
	for len(pn.logN) <= t {
		if math.IsInf(pn.logN[len(pn.logN)-1], -1) {
			pn.logN = append(pn.logN, math.Inf(-1))
			continue
		}
		norm := 0.0
		for i := 0; i < n; i++ {
			r := 0.0
			for j := 0; j < n; j++ {
				v := 0.0
				for h := 0; h < n; h++ {
					v += pn.p[i*n+h] * pn.a[h*n+j]
				}
				pn.q[i*n+j] = v
				r += math.Abs(v)
			}
			norm = max(norm, r)
		}
		if norm == 0 {
			pn.logN = append(pn.logN, math.Inf(-1))
			continue
		}
		f, ex := math.Frexp(norm)
		for i, v := range pn.q {
			pn.p[i] = math.Ldexp(v, -ex)
		}
		pn.e += ex
		pn.logN = append(pn.logN, math.Log(f)+float64(pn.e)*math.Ln2)
	}
	return pn.logN[t], true
}

// c returns c(γ) = sup_t ||A^t||_inf / γ^t for 0 < γ < 1, certified as in SizeModulus,
// or false if no certificate was found within pn.steps powers.
func (pn *powerNorms) c(gamma float64) (float64, bool) {
	lg := math.Log(gamma)
	best := 0.0 // ln of the t = 0 term, ||I|| / γ^0 = 1
	for t := 1; ; t++ {
		if t >= len(pn.logN) {
			if _, ok := pn.logNorm(t); !ok {
				return math.Inf(1), false
			}
		}
		lr := pn.logN[t] - float64(t)*lg
		if lr <= -certMargin {
			return math.Exp(best), true
		}
		best = max(best, lr)
	}
}

// chooseGamma returns a certified (c, γ) minimizing c/(1-γ) over γ in (ρ, 1).
//
// ln c(γ) is a supremum of functions affine in u = ln γ and -ln(1-e^u) is convex, so the
// objective ln c - ln(1-γ) is convex in u and a golden-section search on u finds its
// minimum. Near ρ the certificate may need more than pn.steps powers; such γ count as
// +Inf, and as c(γ) only falls with γ they form an interval at the low end, which the
// search steps out of.
func (pn *powerNorms) chooseGamma(rho float64) (c, gamma float64, err error) {
	if ln, _ := pn.logNorm(1); math.IsInf(ln, -1) {
		return 1, 0, nil // A = 0: ||A^t|| <= 1·0^t with 0^0 = 1
	}
	bestF, bestC, bestG := math.Inf(1), 0.0, 0.0
	eval := func(u float64) float64 {
		g := math.Exp(u)
		if !(g > rho) || !(g < 1) {
			return math.Inf(1)
		}
		cg, ok := pn.c(g)
		if !ok {
			return math.Inf(1)
		}
		f := math.Log(cg) - math.Log1p(-g)
		if f < bestF {
			bestF, bestC, bestG = f, cg, g
		}
		return f
	}
	const invPhi = 0.6180339887498949
	// The low end stays a millionth of 1-ρ above ρ: the objective there is within a
	// factor 1+10^-6 of its value at ρ, while a γ closer to ρ can need far more powers
	// for its certificate (for A = ρI, about ρ/((γ-ρ)·10^6) of them: 10^5, all there
	// are, at γ = ρ+10^-12, where one suffices at this end). For an A whose c(γ) grows
	// near ρ (the pendulum's) the search still reaches the powers' limit; powerWork
	// bounds their cost.
	ua, ub := math.Log(rho+max(1e-12, 1e-6*(1-rho))), math.Log(1-1e-12)
	x1, x2 := ub-invPhi*(ub-ua), ua+invPhi*(ub-ua)
	f1, f2 := eval(x1), eval(x2)
	for it := 0; it < 200 && ub-ua > 1e-13; it++ {
		if f1 < f2 || (f1 == f2 && !math.IsInf(f1, 1)) {
			ub, x2, f2 = x2, x1, f1
			x1 = ub - invPhi*(ub-ua)
			f1 = eval(x1)
		} else {
			ua, x1, f1 = x1, x2, f2
			x2 = ua + invPhi*(ub-ua)
			f2 = eval(x2)
		}
	}
	if math.IsInf(bestF, 1) {
		return 0, 0, fmt.Errorf("%w (%w): spectral radius %.6f of A is too close to 1 for its size (n = %d): no (c, γ) certified within %d powers; give an explicit \"modulus\" instead of \"auto\"", ErrUncertified, ErrParams, rho, pn.n, pn.steps)
	}
	return bestC, bestG, nil
}

// series returns an upper bound on Σ_{t>=0} ||A^t||_inf, summed directly, and
// max_t ||A^t||_inf. With L the first t >= 1 where ||A^L|| <= 1/2, submultiplicativity bounds
// the tail: Σ_{t>=T} ||A^t|| <= Σ_{s<L} ||A^(T+s)|| / (1 - ||A^L||). Summation stops once this
// tail is below 2^-60 of the partial sum, and the tail bound is added in.
func (pn *powerNorms) series() (sum, maxN float64, err error) {
	tooLong := fmt.Errorf("%w (%w): Σ ||A^t|| did not converge within %d powers (n = %d); give an explicit \"modulus\" instead of \"auto\"", ErrUncertified, ErrParams, pn.steps, pn.n)
	L, q := 0, 0.0
	for t := 1; L == 0; t++ {
		ln, ok := pn.logNorm(t)
		if !ok {
			return 0, 0, tooLong
		}
		if ln <= -math.Ln2 {
			L, q = t, math.Exp(ln)
		}
	}
	for T := 0; ; T += L {
		block := 0.0
		for s := 0; s < L; s++ {
			ln, ok := pn.logNorm(T + s)
			if !ok {
				return 0, 0, tooLong
			}
			v := math.Exp(ln)
			block += v
			maxN = math.Max(maxN, v)
		}
		if tail := block / (1 - q); tail <= 0x1p-60*sum {
			return sum + tail, maxN, nil
		}
		sum += block
	}
}

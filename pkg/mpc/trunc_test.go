package mpc

import (
	"errors"
	"math/big"
	"testing"
)

const testLambda = 40

// protocol2 runs Protocol 2 between two in-process parties on shares of x
// with the mask shares m. It returns Z (reconstructed), the opened Y and
// R' = L0 + L1.
func protocol2(f *Field, xs [2]Matrix, m [2]MaskShare, l int) (z, y, rp Matrix) {
	rows, cols := xs[0].Rows, xs[0].Cols
	var open, zs [2]Matrix
	for i := range 2 {
		open[i] = NewMatrix(rows, cols)
		f.TruncOpen(open[i], i, xs[i], m[i], l) // step 1
	}
	y = f.ReconstNew(open[0], open[1]) // step 2: P0 sends [[Y]]_0, P1 reconstructs
	inv := f.InvPow2(l)
	for i := range 2 {
		zs[i] = xs[i].Clone()
		yi := y
		if i == 0 {
			yi = Matrix{} // P0 never sees Y
		}
		f.TruncClose(zs[i], i, zs[i], yi, m[i], l, inv) // step 3, in place
	}
	return f.ReconstNew(zs[0], zs[1]), y, f.ReconstNew(m[0].L, m[1].L)
}

// truncInputs returns X values for Protocol 2 in Z<κ>: the ends of Z<κ>,
// values around multiples of 2^l and their midpoints (the rounding ties),
// and uniform random values.
func truncInputs(t *testing.T, f *Field, r interface{ Read([]byte) (int, error) }, kappa, l, n int) []*big.Int {
	lo, hi := new(big.Int).Neg(pow2Big(kappa-1)), new(big.Int).Sub(pow2Big(kappa-1), big.NewInt(1))
	xs := []*big.Int{lo, hi, new(big.Int).Add(lo, big.NewInt(1)), new(big.Int).Sub(hi, big.NewInt(1)), big.NewInt(0), big.NewInt(1), big.NewInt(-1)}
	step, half := pow2Big(l), pow2Big(l-1)
	for i := range n {
		e := mustRandom(t, f, r)
		v := new(big.Int).Sub(new(big.Int).Rsh(toBig(e), uint(f.BitLen()-kappa)), pow2Big(kappa-1)) // uniform in Z<κ>, roughly
		if i%2 == 0 {
			// A multiple of 2^l (the top and bottom ones too), plus an offset.
			j := new(big.Int).Rsh(v, uint(l))
			switch i % 10 {
			case 2:
				j = new(big.Int).Rsh(lo, uint(l))
			case 4:
				j = new(big.Int).Sub(new(big.Int).Rsh(hi, uint(l)), big.NewInt(1))
			}
			v = new(big.Int).Mul(j, step)
			for _, off := range []*big.Int{big.NewInt(-1), big.NewInt(0), big.NewInt(1), half, new(big.Int).Sub(half, big.NewInt(1)), new(big.Int).Add(half, big.NewInt(1))} {
				w := new(big.Int).Add(v, off)
				if w.Cmp(lo) >= 0 && w.Cmp(hi) <= 0 {
					xs = append(xs, w)
				}
			}
			continue
		}
		xs = append(xs, v)
	}
	return xs
}

// TestProtocol2Lemma checks the truncation lemma exactly: for X in Z<κ>,
// Reconst(Z) = round((X + R') / 2^l) with R' = L0 + L1 the dealer's mask,
// which is round(X / 2^l) + W with W in {-1, 0, 1}; W = 0 whenever 2^l
// divides X. It also checks the opened Y = X + 2^l R + R' + 2^(l-1) never
// wraps modulo q.
func TestProtocol2Lemma(t *testing.T) {
	fields := bigFields(t)[:3] // both presets and rand200
	for _, tf := range fields {
		f := tf.f
		kappa := f.BitLen() - 2 - testLambda // κ = floor(log2 q) - λ - 1
		for _, l := range []int{1, 2, 9, 16, 30, 62} {
			r := seeded(byte(80 + l))
			xsBig := truncInputs(t, f, r, kappa, l, 3000)
			x := NewMatrix(len(xsBig), 1)
			for i, v := range xsBig {
				x.Data[i] = elemOf(f, v)
				if !f.InSigned(x.Data[i], kappa) {
					t.Fatalf("test input %s is not in Z<%d>", v, kappa)
				}
			}
			var xs [2]Matrix
			xs[0], xs[1] = mustShare(t, f, r, x)
			m0, m1, err := f.GenMask(r, r, x.Rows, 1, kappa, l, testLambda)
			if err != nil {
				t.Fatal(err)
			}
			z, y, rp := protocol2(f, xs, [2]MaskShare{m0, m1}, l)
			mask := f.ReconstNew(m0.M, m1.M)
			counts := map[int64]int{}
			for i, xv := range xsBig {
				rpv := centeredBig(f, rp.Data[i])
				wantZ := roundBig(new(big.Int).Add(xv, rpv), l)
				if got := centeredBig(f, z.Data[i]); got.Cmp(wantZ) != 0 {
					t.Fatalf("%s l=%d: X=%s R'=%s: Reconst(Z) = %s, want round((X+R')/2^l) = %s", tf.name, l, xv, rpv, got, wantZ)
				}
				w := new(big.Int).Sub(wantZ, centeredBig(f, f.RoundShift(x.Data[i], l)))
				if !w.IsInt64() || w.Int64() < -1 || w.Int64() > 1 {
					t.Fatalf("%s l=%d: X=%s: W = %s not in {-1,0,1}", tf.name, l, xv, w)
				}
				counts[w.Int64()]++
				if new(big.Int).Mod(xv, pow2Big(l)).Sign() == 0 && w.Sign() != 0 {
					t.Fatalf("%s l=%d: X=%s is a multiple of 2^l but W = %s", tf.name, l, xv, w)
				}
				// Y = X + M + 2^(l-1) as integers: no wrap-around.
				wantY := new(big.Int).Add(new(big.Int).Add(xv, centeredBig(f, mask.Data[i])), pow2Big(l-1))
				if got := centeredBig(f, y.Data[i]); got.Cmp(wantY) != 0 || !f.InSigned(y.Data[i], kappa+testLambda+1) {
					t.Fatalf("%s l=%d: X=%s: Y = %s, want %s in Z<κ+λ+1>", tf.name, l, xv, got, wantY)
				}
			}
			// The error is probabilistic: both signs occur for l > 1.
			if l > 1 && (counts[1] == 0 || counts[-1] == 0 || counts[0] == 0) {
				t.Errorf("%s l=%d: W counts %v: expected all of -1, 0, 1 to occur", tf.name, l, counts)
			}
		}
	}
}

func TestGenMask(t *testing.T) {
	for _, tf := range bigFields(t)[:4] {
		f := tf.f
		kappa := f.BitLen() - 2 - testLambda
		r := seeded(90)
		for _, l := range []int{1, 9, 62} {
			if l >= kappa {
				continue
			}
			const n = 4000
			m0, m1, err := f.GenMask(r, r, n, 1, kappa, l, testLambda)
			if err != nil {
				t.Fatal(err)
			}
			mask, rp := f.ReconstNew(m0.M, m1.M), f.ReconstNew(m0.L, m1.L)
			inv := f.InvPow2(l)
			top := make([]int, 16)
			for i := range mask.Data {
				// L = R' in Z<l>; (M - R') / 2^l = R in Z<κ-l+λ>, exactly.
				if !f.InSigned(rp.Data[i], l) {
					t.Fatalf("%s l=%d: R' = %s not in Z<%d>", tf.name, l, f.String(rp.Data[i]), l)
				}
				diff := centeredBig(f, f.Sub(mask.Data[i], rp.Data[i]))
				if new(big.Int).Mod(diff, pow2Big(l)).Sign() != 0 {
					t.Fatalf("%s l=%d: M - R' = %s is not a multiple of 2^l", tf.name, l, diff)
				}
				if R := f.Mul(f.Sub(mask.Data[i], rp.Data[i]), inv); !f.InSigned(R, kappa-l+testLambda) {
					t.Fatalf("%s l=%d: R = %s not in Z<κ-l+λ>", tf.name, l, f.String(R))
				}
				// M = 2^l R + R' is uniform on Z<κ+λ>: slice it into 16.
				b := new(big.Int).Add(centeredBig(f, mask.Data[i]), pow2Big(kappa+testLambda-1))
				top[b.Rsh(b, uint(kappa+testLambda-4)).Int64()]++
			}
			if chi := chiSquare(top); chi > chiThreshold(15) {
				t.Errorf("%s l=%d: M not uniform on Z<κ+λ>: chi-square %.1f", tf.name, l, chi)
			}
		}
		if _, _, err := f.GenMask(r, r, 2, 1, 9, 9, testLambda); !errors.Is(err, ErrParams) {
			t.Errorf("%s: GenMask with κ = l: %v, want ErrParams", tf.name, err)
		}
		if _, _, err := f.GenMask(r, r, 2, 1, f.BitLen(), 9, testLambda); !errors.Is(err, ErrParams) {
			t.Errorf("%s: GenMask with κ too large for q: %v, want ErrParams", tf.name, err)
		}
	}
}

// yHistogram returns the counts of the centered Y over 64 equal slices of
// [-2^(κ+λ), 2^(κ+λ)), and over the 256 values of its low byte.
func yHistogram(f *Field, y Matrix, width int) (slices, low []int) {
	slices, low = make([]int, 64), make([]int, 256)
	for _, v := range y.Data {
		b := new(big.Int).Add(centeredBig(f, v), pow2Big(width))
		slices[b.Rsh(b, uint(width-5)).Int64()]++
		low[f.CenteredLow64(v)&0xff]++
	}
	return slices, low
}

// twoSampleChi is the chi-square statistic for "a and b come from the same
// distribution" (equal sample sizes), and its degrees of freedom.
func twoSampleChi(a, b []int) (float64, int) {
	s, n := 0.0, 0
	for i := range a {
		if a[i]+b[i] == 0 {
			continue
		}
		d := float64(a[i] - b[i])
		s += d * d / float64(a[i]+b[i])
		n++
	}
	return s, n - 1
}

// TestProtocol2Hiding looks at what P1 sees, the opened Y, for the two
// extreme secrets X = 0 and X = 2^(κ-1)-1. Y - 2^(l-1) = X + M with M uniform
// on Z<κ+λ>, so the two distributions are 2^-λ-1 apart in statistical
// distance: at λ = 40 their histograms (64 slices of the range, and the low
// byte) must be indistinguishable by a two-sample chi-square test. The same
// test at λ = 2, where the distance is 1/8, must tell them apart, which shows
// the test can see a leak. Seeds are fixed: the outcome is deterministic.
func TestProtocol2Hiding(t *testing.T) {
	const n, l = 20000, 9
	for _, tf := range bigFields(t)[:2] {
		f := tf.f
		for _, lambda := range []int{testLambda, 2} {
			kappa := f.BitLen() - 2 - lambda
			hists := map[string][2][]int{}
			for k, secret := range []struct {
				name string
				x    *big.Int
			}{{"0", big.NewInt(0)}, {"2^(κ-1)-1", new(big.Int).Sub(pow2Big(kappa-1), big.NewInt(1))}} {
				r := seeded(byte(91 + k)) // independent samples for the two secrets
				x := NewMatrix(n, 1)
				for i := range x.Data {
					x.Data[i] = elemOf(f, secret.x)
				}
				var xs [2]Matrix
				xs[0], xs[1] = mustShare(t, f, r, x)
				m0, m1, err := f.GenMask(r, r, n, 1, kappa, l, lambda)
				if err != nil {
					t.Fatal(err)
				}
				_, y, _ := protocol2(f, xs, [2]MaskShare{m0, m1}, l)
				s, lo := yHistogram(f, y, kappa+lambda)
				hists[secret.name] = [2][]int{s, lo}
			}
			a, b := hists["0"], hists["2^(κ-1)-1"]
			chiS, dofS := twoSampleChi(a[0], b[0])
			chiL, dofL := twoSampleChi(a[1], b[1])
			t.Logf("%s λ=%d: two-sample chi-square slices %.1f (dof %d), low byte %.1f (dof %d)", tf.name, lambda, chiS, dofS, chiL, dofL)
			if lambda == testLambda {
				if chiS > chiThreshold(dofS) || chiL > chiThreshold(dofL) {
					t.Errorf("%s λ=%d: Y for X=0 and X=2^(κ-1)-1 differ: chi-square slices %.1f (dof %d), low byte %.1f (dof %d)",
						tf.name, lambda, chiS, dofS, chiL, dofL)
				}
				// Each on its own fills the middle 32 slices uniformly.
				if chi := chiSquare(a[0][16:48]); chi > chiThreshold(31) {
					t.Errorf("%s: Y for X=0 not uniform over Z<κ+λ>: chi-square %.1f", tf.name, chi)
				}
			} else if chiS < 10*chiThreshold(dofS) {
				t.Errorf("%s λ=%d: the test did not see a 1/8 statistical distance (chi-square %.1f, dof %d)", tf.name, lambda, chiS, dofS)
			}
		}
	}
}

func TestTruncShapePanics(t *testing.T) {
	f := mustField(t, PresetM127)
	m := MaskShare{M: NewMatrix(3, 1), L: NewMatrix(3, 1)}
	mustPanic(t, "TruncOpen", "mpc: TruncOpen", func() { f.TruncOpen(NewMatrix(2, 1), 0, NewMatrix(3, 1), m, 9) })
	mustPanic(t, "TruncClose", "mpc: TruncClose", func() {
		f.TruncClose(NewMatrix(3, 1), 1, NewMatrix(3, 1), NewMatrix(2, 1), m, 9, f.InvPow2(9))
	})
}

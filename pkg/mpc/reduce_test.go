package mpc

import (
	"math/big"
	"testing"
)

// The kernels of reduce.go are checked on their whole documented input
// domains (wider than the reduced elements Field passes them), against
// math/big, with the extreme inputs that stress carries.

const kernelCases = 20000

// limbs returns n random limbs, or an edge pattern for some i.
func limbs(r interface{ Read([]byte) (int, error) }, i, n int) []uint64 {
	out := make([]uint64, n)
	switch i % 16 {
	case 0: // all ones
		for k := range out {
			out[k] = ^uint64(0)
		}
		return out
	case 1: // zero
		return out
	case 2: // a single high bit
		out[n-1] = 1 << 63
		return out
	}
	var b [8]byte
	for k := range out {
		r.Read(b[:])
		for j := range b {
			out[k] |= uint64(b[j]) << (8 * j)
		}
		if i%16 == 3 { // sparse: mostly all-ones or zero limbs
			out[k] = -(out[k] & 1)
		}
	}
	return out
}

// limbsBig is the integer with the given little-endian limbs.
func limbsBig(l ...uint64) *big.Int {
	x := new(big.Int)
	for i := len(l) - 1; i >= 0; i-- {
		x.Lsh(x, 64)
		x.Or(x, new(big.Int).SetUint64(l[i]))
	}
	return x
}

func checkLimbs(t *testing.T, what string, in *big.Int, got []uint64, want *big.Int) {
	t.Helper()
	if g := limbsBig(got...); g.Cmp(want) != 0 {
		t.Fatalf("%s(%s) = %s, want %s", what, in.Text(16), g.Text(16), want.Text(16))
	}
}

func TestMulM127Kernel(t *testing.T) {
	q := new(big.Int).Sub(pow2Big(127), big.NewInt(1))
	r := seeded(21)
	for i := range kernelCases {
		a, b := limbs(r, i, 2), limbs(r, i/16+i, 2)
		a[1] &= m63 // the domain is a, b < 2^127, which includes q itself
		b[1] &= m63
		r0, r1 := mulM127(a[0], a[1], b[0], b[1])
		in := new(big.Int).Mul(limbsBig(a...), limbsBig(b...))
		checkLimbs(t, "mulM127", in, []uint64{r0, r1}, new(big.Int).Mod(in, q))
	}
}

func TestFoldM127Kernel(t *testing.T) {
	q := new(big.Int).Sub(pow2Big(127), big.NewInt(1))
	r := seeded(22)
	for i := range kernelCases {
		w := limbs(r, i, 3)
		w[2] &= m63 // w2 < 2^63
		r0, r1 := foldM127(w[0], w[1], w[2])
		in := limbsBig(w...)
		checkLimbs(t, "foldM127", in, []uint64{r0, r1}, new(big.Int).Mod(in, q))
	}
	// Every value within 40 of q and of 2^127, 2^128.
	for _, base := range []*big.Int{q, pow2Big(127), pow2Big(128), new(big.Int).Mul(q, big.NewInt(2))} {
		for d := int64(-40); d <= 40; d++ {
			in := new(big.Int).Add(base, big.NewInt(d))
			w := fromBig(in)
			r0, r1 := foldM127(w[0], w[1], w[2])
			checkLimbs(t, "foldM127", in, []uint64{r0, r1}, new(big.Int).Mod(in, q))
		}
	}
}

func TestMul256Kernel(t *testing.T) {
	r := seeded(23)
	for i := range kernelCases {
		a, b := limbs(r, i, 4), limbs(r, i/16+i, 4)
		t0, t1, t2, t3, t4, t5, t6, t7 := mul256(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
		in := limbsBig(a...)
		checkLimbs(t, "mul256", in, []uint64{t0, t1, t2, t3, t4, t5, t6, t7}, new(big.Int).Mul(in, limbsBig(b...)))
		x := limbs(r, i+5, 4)
		c := limbs(r, i+7, 1)[0]
		r0, r1, r2, r3, r4 := mulAddRow(c, a[0], a[1], a[2], a[3], x[0], x[1], x[2], x[3])
		want := new(big.Int).Add(limbsBig(x...), new(big.Int).Mul(limbsBig(c), in))
		checkLimbs(t, "mulAddRow", in, []uint64{r0, r1, r2, r3, r4}, want)
	}
}

func TestReduceP25519Kernels(t *testing.T) {
	q := new(big.Int).Sub(pow2Big(255), big.NewInt(19))
	r := seeded(24)
	for i := range kernelCases {
		s := limbs(r, i, 9)
		in := limbsBig(s[:8]...)
		r0, r1, r2, r3 := reduceP25519(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
		checkLimbs(t, "reduceP25519", in, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(in, q))
		in = limbsBig(s...)
		r0, r1, r2, r3 = reduceP25519Wide(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8])
		checkLimbs(t, "reduceP25519Wide", in, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(in, q))
		s[4] &= 1<<57 - 1 // canonP25519 takes r4 < 2^57
		in = limbsBig(s[:5]...)
		r0, r1, r2, r3 = canonP25519(s[0], s[1], s[2], s[3], s[4])
		checkLimbs(t, "canonP25519", in, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(in, q))
	}
	for _, base := range []*big.Int{q, pow2Big(255), pow2Big(256), new(big.Int).Mul(q, big.NewInt(2)), new(big.Int).Mul(q, big.NewInt(3))} {
		for d := int64(-40); d <= 40; d++ {
			in := new(big.Int).Add(base, big.NewInt(d))
			s := make([]uint64, 5)
			for k := range s {
				s[k] = new(big.Int).Rsh(in, uint(64*k)).Uint64()
			}
			r0, r1, r2, r3 := canonP25519(s[0], s[1], s[2], s[3], s[4])
			checkLimbs(t, "canonP25519", in, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(in, q))
		}
	}
}

// TestMontgomeryKernels checks redc on its whole domain t < q 2^256, and
// condSubQ, addLimbs, SubTo, mulMont for generic moduli.
func TestMontgomeryKernels(t *testing.T) {
	R := pow2Big(256)
	for _, tf := range bigFields(t) {
		f := tf.f
		if f.kind != kindGeneric {
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			q := qBig(f)
			qR := new(big.Int).Mul(q, R)
			rInv := new(big.Int).ModInverse(R, q)
			r := seeded(25)
			ins := []*big.Int{big.NewInt(0), big.NewInt(1), new(big.Int).Sub(qR, big.NewInt(1)), new(big.Int).Sub(qR, q), new(big.Int).Sub(R, big.NewInt(1))}
			for i := range kernelCases / 4 {
				l := limbs(r, i, 8)
				ins = append(ins, new(big.Int).Mod(limbsBig(l...), qR))
			}
			for _, in := range ins {
				t8 := make([]uint64, 8)
				for k := range t8 {
					t8[k] = new(big.Int).Rsh(in, uint(64*k)).Uint64()
				}
				r0, r1, r2, r3 := f.redc(t8[0], t8[1], t8[2], t8[3], t8[4], t8[5], t8[6], t8[7])
				want := new(big.Int).Mod(new(big.Int).Mul(in, rInv), q)
				checkLimbs(t, "redc", in, []uint64{r0, r1, r2, r3}, want)
			}
			twoQ := new(big.Int).Lsh(q, 1)
			for i := range kernelCases / 4 {
				x := fromBig(new(big.Int).Mod(limbsBig(limbs(r, i, 4)...), twoQ))
				in := toBig(x)
				r0, r1, r2, r3 := condSubQ(x[0], x[1], x[2], x[3], f.q[0], f.q[1], f.q[2], f.q[3])
				checkLimbs(t, "condSubQ", in, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(in, q))
				a, b := mustRandom(t, f, r), mustRandom(t, f, r)
				ab, bb := toBig(a), toBig(b)
				r0, r1, r2, r3 = f.addLimbs(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
				checkLimbs(t, "addLimbs", ab, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(new(big.Int).Add(ab, bb), q))
				var d Elem
				f.SubTo(&d, &a, &b)
				checkLimbs(t, "SubTo", ab, d[:], new(big.Int).Mod(new(big.Int).Sub(ab, bb), q))
				r0, r1, r2, r3 = f.mulMont(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
				checkLimbs(t, "mulMont", ab, []uint64{r0, r1, r2, r3}, new(big.Int).Mod(new(big.Int).Mul(ab, bb), q))
			}
		})
	}
}

// TestDotKernelsLong sums long dot products of the largest elements, which
// drives every accumulator into its top limb (for dotMont, the 2^512 limb),
// and of random elements, against math/big.
func TestDotKernelsLong(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		t.Run(tf.name, func(t *testing.T) {
			q := qBig(f)
			r := seeded(26)
			for _, n := range []int{1, 2, 3, 17, 4099} {
				for _, fill := range []string{"q-1", "random"} {
					a, b := make([]Elem, n), make([]Elem, 2*n) // b is read with stride 2
					if fill == "q-1" {
						for i := range a {
							a[i] = f.Neg(f.One())
						}
						for i := range b {
							b[i] = f.Neg(f.One())
						}
					} else {
						if err := f.FillRandom(r, a); err != nil {
							t.Fatal(err)
						}
						if err := f.FillRandom(r, b); err != nil {
							t.Fatal(err)
						}
					}
					want := new(big.Int)
					for i := range a {
						want.Add(want, new(big.Int).Mul(toBig(a[i]), toBig(b[2*i])))
					}
					var got Elem
					f.dot(&got, a, b, 2)
					if got != fromBig(want.Mod(want, q)) {
						t.Fatalf("n=%d %s: dot = %s, want %s", n, fill, toBig(got), want)
					}
				}
			}
		})
	}
}

package mpc

import (
	"math/big"
	"testing"
)

func TestShareReconst(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		r := seeded(61)
		for _, sh := range [][2]int{{1, 1}, {5, 1}, {1, 5}, {4, 5}, {0, 3}} {
			for _, fill := range []string{"random", "edges"} {
				x := mustRandomMatrix(t, f, r, sh[0], sh[1])
				if fill == "edges" {
					edges := edgeElems(f)
					for i := range x.Data {
						x.Data[i] = edges[i%len(edges)]
					}
				}
				s0, s1 := mustShare(t, f, r, x)
				if got := f.ReconstNew(s0, s1); !got.Equal(x) {
					t.Fatalf("%s %v %s: Reconst(Share(X)) != X", tf.name, sh, fill)
				}
				// [[X]]_1 = X - [[X]]_0, entry by entry, against math/big.
				for i := range x.Data {
					want := new(big.Int).Sub(toBig(x.Data[i]), toBig(s0.Data[i]))
					if s1.Data[i] != fromBig(want.Mod(want, qBig(f))) {
						t.Fatalf("%s %v: share 1 entry %d is not X - share 0", tf.name, sh, i)
					}
				}
				// ShareInto and Reconst into existing matrices.
				t0, t1, back := NewMatrix(sh[0], sh[1]), NewMatrix(sh[0], sh[1]), NewMatrix(sh[0], sh[1])
				if err := f.ShareInto(r, x, t0, t1); err != nil {
					t.Fatal(err)
				}
				f.Reconst(back, t0, t1)
				if !back.Equal(x) {
					t.Fatalf("%s %v: ShareInto/Reconst round trip failed", tf.name, sh)
				}
				if sh[0]*sh[1] > 1 && t0.Equal(s0) {
					t.Fatalf("%s %v: two sharings drew the same mask", tf.name, sh)
				}
			}
		}
	}
	mustPanic(t, "ShareInto shape", "mpc: Share", func() {
		f := mustField(t, PresetM127)
		f.ShareInto(seeded(1), NewMatrix(2, 2), NewMatrix(2, 2), NewMatrix(2, 1))
	})
}

// topBucket returns floor(n a / q): which of n equal slices of [0, q) a is in.
func topBucket(f *Field, a Elem, n int) int {
	v := new(big.Int).Mul(toBig(a), big.NewInt(int64(n)))
	return int(v.Div(v, qBig(f)).Int64())
}

// uniformityChi returns the chi-square statistics of xs over the 16 top
// slices of Z_q and over the 256 values of the low byte.
func uniformityChi(f *Field, xs []Elem) (top, low float64) {
	tc, lc := make([]int, 16), make([]int, 256)
	for _, x := range xs {
		tc[topBucket(f, x, 16)]++
		lc[x[0]&0xff]++
	}
	return chiSquare(tc), chiSquare(lc)
}

// TestSharesUniform: for a fixed secret X each share on its own is uniform in
// Z_q. Many sharings of the same X are tested with chi-square on the top
// slices and the low byte; the seed is fixed, so the test is deterministic,
// and the bound is generous. A sharing with a too-short mask fails the same
// test, which shows it has the power to see a leak.
func TestSharesUniform(t *testing.T) {
	const n = 20000
	for _, tf := range bigFields(t)[:4] { // both presets, rand200, rand100
		f := tf.f
		half := f.Half()
		for _, secret := range []Elem{{}, f.One(), half, f.Neg(f.One())} {
			x := NewMatrix(n, 1) // n copies of the same secret: n independent sharings
			for i := range x.Data {
				x.Data[i] = secret
			}
			s0, s1 := mustShare(t, f, seeded(62), x)
			for i, s := range []Matrix{s0, s1} {
				top, low := uniformityChi(f, s.Data)
				if top > chiThreshold(15) || low > chiThreshold(255) {
					t.Errorf("%s, X = %s: share %d not uniform: chi-square top %.1f (bound %.1f), low byte %.1f (bound %.1f)",
						tf.name, f.String(secret), i, top, chiThreshold(15), low, chiThreshold(255))
				}
			}
		}
		// Power: a mask uniform only below 2^64 leaves share 1 = X - R in a
		// thin slice below X.
		r := seeded(63)
		bad := make([]Elem, n)
		for i := range bad {
			m := mustRandom(t, f, r)
			bad[i] = f.Sub(half, Elem{m[0]})
		}
		if top, _ := uniformityChi(f, bad); top < 10*chiThreshold(15) {
			t.Errorf("%s: a 64-bit mask passed the uniformity test (chi-square %.1f)", tf.name, top)
		}
	}
}

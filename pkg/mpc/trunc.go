package mpc

import (
	"fmt"
	"io"
)

// Protocol 2 (protocol.md §5): probabilistic truncation, vectorized. For X in
// Z<κ>, Reconst of the result is round(X / 2^l) + W with W in {-1,0,1}
// elementwise (ePrint 2024/1127 discusses why the error is probabilistic).
// The opened Y = X + 2^l R + R' + 2^(l-1) hides X statistically with λ bits
// because R is uniform in Z<κ-l+λ>.

// MaskShare is one party's share of a truncation mask: M = 2^l R + R' and
// L = R', with R uniform in Z<κ-l+λ> and R' uniform in Z<l>. Shipping M
// rather than R saves the parties a scalar multiplication per entry.
type MaskShare struct {
	M, L Matrix
}

// GenMask draws a fresh mask for a rows x cols operand. P0's shares are read
// from r0 (uniform in Z_q, as in Share), the mask itself from r.
func (f *Field) GenMask(r, r0 io.Reader, rows, cols, kappa, l, lambda int) (m0, m1 MaskShare, err error) {
	if kappa <= l {
		return m0, m1, fmt.Errorf("%w: κ = %d must exceed l = %d", ErrParams, kappa, l)
	}
	R := NewMatrix(rows, cols)
	if err = f.FillSigned(r, R.Data, kappa-l+lambda); err != nil {
		return
	}
	Rp := NewMatrix(rows, cols)
	if err = f.FillSigned(r, Rp.Data, l); err != nil {
		return
	}
	f.MatScale(R, R, f.Pow2(l))
	f.MatAdd(R, R, Rp) // M = 2^l R + R'
	if m0.M, err = f.RandomMatrix(r0, rows, cols); err != nil {
		return
	}
	if m0.L, err = f.RandomMatrix(r0, rows, cols); err != nil {
		return
	}
	f.MatSub(R, R, m0.M)
	f.MatSub(Rp, Rp, m0.L)
	return m0, MaskShare{M: R, L: Rp}, nil
}

// TruncOpen is Protocol 2, step 1 for party i:
// dst = [[X]]_i + [[M]]_i + i 2^(l-1). P0 sends dst to P1 (the only message).
// dst may alias x. Shapes must match (a mismatch panics).
func (f *Field) TruncOpen(dst Matrix, i int, x Matrix, m MaskShare, l int) {
	mustSameShape("TruncOpen", dst, x, m.M)
	f.addVec(dst.Data, x.Data, m.M.Data)
	if i == 1 && l > 0 {
		h := f.Pow2(l - 1)
		for k := range dst.Data {
			f.AddTo(&dst.Data[k], &dst.Data[k], &h)
		}
	}
}

// TruncClose is Protocol 2, step 3 for party i:
// dst = 2^-l ([[X]]_i + [[R']]_i - i ((Y - 2^(l-1)) mod 2^l)),
// where Y is the reconstructed opening (used by P1 only; P0 may pass a zero
// Matrix) and mod 2^l is the centered reduction. inv is 2^-l mod q and
// 1 <= l <= 63. dst may alias x. Shapes must match (a mismatch panics).
func (f *Field) TruncClose(dst Matrix, i int, x, y Matrix, m MaskShare, l int, inv Elem) {
	mustSameShape("TruncClose", dst, x, m.L)
	if i == 1 {
		mustSameShape("TruncClose", dst, y)
	}
	var half, mask uint64
	if l > 0 {
		half, mask = 1<<uint(l-1), 1<<uint(l)-1
	}
	for k := range dst.Data {
		z := &dst.Data[k]
		f.AddTo(z, &x.Data[k], &m.L.Data[k])
		if i == 1 && l > 0 {
			// c = (Y - 2^(l-1)) mod 2^l in [0, 2^l) from the low bits of the
			// centered Y; its centered reading is c, or c - 2^l if c >= 2^(l-1).
			c := (f.CenteredLow64(y.Data[k]) - half) & mask
			if c < half {
				e := f.reduceSmall(c)
				f.SubTo(z, z, &e)
			} else {
				e := f.reduceSmall(mask - c + 1) // 2^l - c
				f.AddTo(z, z, &e)
			}
		}
		f.MulTo(z, z, &inv)
	}
}

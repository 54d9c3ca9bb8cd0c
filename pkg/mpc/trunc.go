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
	m1 = MaskShare{M: NewMatrix(rows, cols), L: NewMatrix(rows, cols)}
	f.MatSub(m1.M, R, m0.M)
	f.MatSub(m1.L, Rp, m0.L)
	return m0, m1, nil
}

// TruncOpen is Protocol 2, step 1 for party i:
// dst = [[X]]_i + [[M]]_i + i 2^(l-1). P0 sends dst to P1 (the only message).
func (f *Field) TruncOpen(dst Matrix, i int, x Matrix, m MaskShare, l int) {
	f.MatAdd(dst, x, m.M)
	if i == 1 && l > 0 {
		h := f.Pow2(l - 1)
		for k := range dst.Data {
			dst.Data[k] = f.Add(dst.Data[k], h)
		}
	}
}

// TruncClose is Protocol 2, step 3 for party i:
// dst = 2^-l ([[X]]_i + [[R']]_i - i ((Y - 2^(l-1)) mod 2^l)),
// where Y is the reconstructed opening (used by P1 only; P0 may pass a zero
// Matrix) and mod 2^l is the centered reduction. inv is 2^-l mod q. dst may
// alias x.
func (f *Field) TruncClose(dst Matrix, i int, x, y Matrix, m MaskShare, l int, inv Elem) {
	f.MatAdd(dst, x, m.L)
	if i == 1 {
		half := uint64(1) << (l - 1)
		mask := uint64(1)<<l - 1
		for k := range dst.Data {
			// Low l bits of the centered integer Y - 2^(l-1), read centered.
			c := (f.CenteredLow64(y.Data[k]) - half) & mask
			var e Elem
			if c >= half {
				e = f.Neg(f.FromUint64((1 << l) - c)) // c - 2^l < 0
			} else {
				e = f.FromUint64(c)
			}
			dst.Data[k] = f.Sub(dst.Data[k], e)
		}
	}
	f.MatScale(dst, dst, inv)
}

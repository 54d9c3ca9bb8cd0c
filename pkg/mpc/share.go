package mpc

import "io"

// Secret sharing (protocol.md §3): Share(X) draws R uniform in Z_q^(d1 x d2);
// [[X]]_0 = R and [[X]]_1 = X - R mod q. Reconst adds the shares.

// ShareInto writes the two shares of x into s0 and s1 (same shape as x).
func (f *Field) ShareInto(r io.Reader, x, s0, s1 Matrix) error {
	mustSameShape("Share", x, s0, s1)
	if err := f.FillRandom(r, s0.Data); err != nil {
		return err
	}
	f.MatSub(s1, x, s0)
	return nil
}

// Share returns fresh shares of x.
func (f *Field) Share(r io.Reader, x Matrix) (s0, s1 Matrix, err error) {
	s0, s1 = NewMatrix(x.Rows, x.Cols), NewMatrix(x.Rows, x.Cols)
	return s0, s1, f.ShareInto(r, x, s0, s1)
}

// Reconst sets dst = s0 + s1.
func (f *Field) Reconst(dst, s0, s1 Matrix) { f.MatAdd(dst, s0, s1) }

// ReconstNew returns s0 + s1 in a new matrix.
func (f *Field) ReconstNew(s0, s1 Matrix) Matrix {
	d := NewMatrix(s0.Rows, s0.Cols)
	f.MatAdd(d, s0, s1)
	return d
}

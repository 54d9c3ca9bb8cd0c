package mpc

import "io"

// Protocol 1 (protocol.md §4): multiplication [[Z]] = [[X]] [[Y]] with a matrix
// triple (U, V, W = U V).

// TripleShare is one party's share of a matrix triple. In the fixed-mask
// variant U is the session's fixed mask and is not part of per-tick material
// (U is then the zero-size matrix).
type TripleShare struct {
	U, V, W Matrix
}

// GenTriple draws a fresh triple for a d1 x d2 times d2 x d3 product and
// returns its shares. P0's shares are read from r0 and the triple itself from
// r; passing the same reader for both is fine (seed compression passes a PRG
// as r0, see dealer.go).
func (f *Field) GenTriple(r, r0 io.Reader, d1, d2, d3 int) (t0, t1 TripleShare, err error) {
	u, err := f.RandomMatrix(r, d1, d2)
	if err != nil {
		return t0, t1, err
	}
	v, err := f.RandomMatrix(r, d2, d3)
	if err != nil {
		return t0, t1, err
	}
	w := NewMatrix(d1, d3)
	f.MatMul(w, u, v)
	if t0.U, err = f.RandomMatrix(r0, d1, d2); err != nil {
		return t0, t1, err
	}
	if t0.V, t0.W, err = f.randVW(r0, d1, d2, d3); err != nil {
		return t0, t1, err
	}
	// P1's shares overwrite the triple in place: nothing else holds it.
	f.MatSub(u, u, t0.U)
	f.MatSub(v, v, t0.V)
	f.MatSub(w, w, t0.W)
	return t0, TripleShare{U: u, V: v, W: w}, nil
}

// GenFixedTriple draws a fresh (V, W = U V) for the session's fixed mask U
// (fixed-mask variant of Protocol 1): the shares carry no U.
func (f *Field) GenFixedTriple(r, r0 io.Reader, u Matrix, d3 int) (t0, t1 TripleShare, err error) {
	d1, d2 := u.Rows, u.Cols
	v, err := f.RandomMatrix(r, d2, d3)
	if err != nil {
		return t0, t1, err
	}
	w := NewMatrix(d1, d3)
	f.MatMul(w, u, v)
	if t0.V, t0.W, err = f.randVW(r0, d1, d2, d3); err != nil {
		return t0, t1, err
	}
	f.MatSub(v, v, t0.V)
	f.MatSub(w, w, t0.W)
	return t0, TripleShare{V: v, W: w}, nil
}

func (f *Field) randVW(r io.Reader, d1, d2, d3 int) (v, w Matrix, err error) {
	if v, err = f.RandomMatrix(r, d2, d3); err != nil {
		return
	}
	w, err = f.RandomMatrix(r, d1, d3)
	return
}

// MulOpen is Protocol 1, step 1 for one operand: dst = [[X]]_i - [[U]]_i. The
// party sends dst to the other party; both then hold X - U.
func (f *Field) MulOpen(dst, x, u Matrix) { f.MatSub(dst, x, u) }

// MulClose is Protocol 1, step 2 for party i, given the opened S = X - U and
// T = Y - V: dst = [[U]]_i T + S [[V]]_i + [[W]]_i + i S T, computed as
// [[U]]_i T + S ([[V]]_i + i T) + [[W]]_i to save one product. tmp must have
// V's shape (P1 uses it); dst must not alias any input. Shapes must match (a
// mismatch panics).
func (f *Field) MulClose(dst Matrix, i int, s, t Matrix, tr TripleShare, u, tmp Matrix) {
	v := tr.V
	if i == 1 {
		f.MatAdd(tmp, tr.V, t)
		v = tmp
	}
	f.MatMul(dst, u, t)
	f.MatMulAdd(dst, s, v)
	f.MatAdd(dst, dst, tr.W)
}

// MulPrepare is the part of MulClose that does not depend on T, for the
// fixed-mask variant (S known at set-up): pre = S [[V]]_i + [[W]]_i. It can
// run as soon as the triple is at hand, off the critical path; then
// MulClosePrepared finishes with one product instead of two.
func (f *Field) MulPrepare(pre, s Matrix, tr TripleShare) {
	f.MatMul(pre, s, tr.V)
	f.MatAdd(pre, pre, tr.W)
}

// FixedUS is the matrix MulClosePrepared multiplies T by: [[U]]_0 for P0,
// [[U]]_1 + S for P1 (a new matrix; computed once per set-up).
func (f *Field) FixedUS(i int, u, s Matrix) Matrix {
	if i == 0 {
		return u.Clone()
	}
	us := NewMatrix(u.Rows, u.Cols)
	f.MatAdd(us, u, s)
	return us
}

// MulClosePrepared is MulClose given pre = MulPrepare(S, triple) and us =
// FixedUS(i, [[U]]_i, S): dst = us T + pre, bit-identical to MulClose, since
//
//	P0: [[U]]_0 T + S [[V]]_0 + [[W]]_0
//	P1: [[U]]_1 T + S ([[V]]_1 + T) + [[W]]_1 = ([[U]]_1 + S) T + S [[V]]_1 + [[W]]_1.
func (f *Field) MulClosePrepared(dst, us, t, pre Matrix) {
	f.MatMul(dst, us, t)
	f.MatAdd(dst, dst, pre)
}

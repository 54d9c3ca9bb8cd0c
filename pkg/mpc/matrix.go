package mpc

import (
	"fmt"
	"math/bits"
)

// Matrix is a Rows x Cols matrix over Z_q in row-major order. A vector is a
// matrix with one column. Shape mismatches inside this package are programming
// errors and panic; data arriving from outside is validated by pkg/codec.
type Matrix struct {
	Rows, Cols int
	Data       []Elem
}

// NewMatrix returns a zero rows x cols matrix.
func NewMatrix(rows, cols int) Matrix {
	if rows < 0 || cols < 0 {
		panic(fmt.Sprintf("mpc: negative matrix shape %dx%d", rows, cols))
	}
	return Matrix{Rows: rows, Cols: cols, Data: make([]Elem, rows*cols)}
}

// At returns entry (i, j).
func (m Matrix) At(i, j int) Elem { return m.Data[i*m.Cols+j] }

// Set sets entry (i, j).
func (m Matrix) Set(i, j int, v Elem) { m.Data[i*m.Cols+j] = v }

// Row returns row i as a slice sharing m's storage.
func (m Matrix) Row(i int) []Elem { return m.Data[i*m.Cols : (i+1)*m.Cols] }

// RowRange returns rows [from, to) as a matrix sharing m's storage.
func (m Matrix) RowRange(from, to int) Matrix {
	return Matrix{Rows: to - from, Cols: m.Cols, Data: m.Data[from*m.Cols : to*m.Cols]}
}

// Clone returns a deep copy.
func (m Matrix) Clone() Matrix {
	c := Matrix{Rows: m.Rows, Cols: m.Cols, Data: make([]Elem, len(m.Data))}
	copy(c.Data, m.Data)
	return c
}

// Equal reports whether m and o have the same shape and entries.
func (m Matrix) Equal(o Matrix) bool {
	if m.Rows != o.Rows || m.Cols != o.Cols {
		return false
	}
	for i := range m.Data {
		if m.Data[i] != o.Data[i] {
			return false
		}
	}
	return true
}

// SameShape reports whether m and o have the same shape.
func (m Matrix) SameShape(o Matrix) bool { return m.Rows == o.Rows && m.Cols == o.Cols }

func mustSameShape(op string, ms ...Matrix) {
	for _, m := range ms {
		if !m.SameShape(ms[0]) || len(m.Data) != m.Rows*m.Cols {
			panic(fmt.Sprintf("mpc: %s: shape %dx%d, want %dx%d", op, m.Rows, m.Cols, ms[0].Rows, ms[0].Cols))
		}
	}
}

// MatAdd sets dst = a + b. dst may alias a or b.
func (f *Field) MatAdd(dst, a, b Matrix) {
	mustSameShape("MatAdd", dst, a, b)
	f.addVec(dst.Data, a.Data, b.Data)
}

// MatSub sets dst = a - b. dst may alias a or b.
func (f *Field) MatSub(dst, a, b Matrix) {
	mustSameShape("MatSub", dst, a, b)
	f.subVec(dst.Data, a.Data, b.Data)
}

// MatScale sets dst = s a. dst may alias a.
func (f *Field) MatScale(dst, a Matrix, s Elem) {
	mustSameShape("MatScale", dst, a)
	f.scaleVec(dst.Data, a.Data, s)
}

// MatMul sets dst = a b. dst must not alias a or b.
//
// Each entry is one dot product reduced once: products are summed exactly in
// a wide accumulator (three 128-bit sums for 2^127-1, 576 bits otherwise),
// which is exact for far more terms than any matrix here has, and the sum is
// reduced at the end (reduce.go).
func (f *Field) MatMul(dst, a, b Matrix) {
	if a.Cols != b.Rows || dst.Rows != a.Rows || dst.Cols != b.Cols ||
		len(dst.Data) != dst.Rows*dst.Cols || len(a.Data) != a.Rows*a.Cols || len(b.Data) != b.Rows*b.Cols {
		panic(fmt.Sprintf("mpc: MatMul: %dx%d = %dx%d * %dx%d", dst.Rows, dst.Cols, a.Rows, a.Cols, b.Rows, b.Cols))
	}
	if a.Cols == 0 { // empty sums; b.Data[j:] below would be out of range
		clear(dst.Data)
		return
	}
	for i := 0; i < a.Rows; i++ {
		row := a.Row(i)
		for j := 0; j < b.Cols; j++ {
			f.dot(&dst.Data[i*dst.Cols+j], row, b.Data[j:], b.Cols)
		}
	}
}

// MatMulAdd sets dst = dst + a b. dst must not alias a or b.
func (f *Field) MatMulAdd(dst, a, b Matrix) {
	if a.Cols != b.Rows || dst.Rows != a.Rows || dst.Cols != b.Cols ||
		len(dst.Data) != dst.Rows*dst.Cols || len(a.Data) != a.Rows*a.Cols || len(b.Data) != b.Rows*b.Cols {
		panic(fmt.Sprintf("mpc: MatMulAdd: %dx%d += %dx%d * %dx%d", dst.Rows, dst.Cols, a.Rows, a.Cols, b.Rows, b.Cols))
	}
	if a.Cols == 0 {
		return
	}
	for i := 0; i < a.Rows; i++ {
		row := a.Row(i)
		for j := 0; j < b.Cols; j++ {
			var d Elem
			f.dot(&d, row, b.Data[j:], b.Cols)
			z := &dst.Data[i*dst.Cols+j]
			z[0], z[1], z[2], z[3] = f.addLimbs(z[0], z[1], z[2], z[3], d[0], d[1], d[2], d[3])
		}
	}
}

// dot sets *z = sum_k a[k] b[k*stride] mod q.
func (f *Field) dot(z *Elem, a, b []Elem, stride int) {
	if len(a) == 0 {
		*z = Elem{}
		return
	}
	_ = b[(len(a)-1)*stride]
	switch f.kind {
	case kindM127:
		z[0], z[1] = dotM127(a, b, stride)
		z[2], z[3] = 0, 0
	case kindP25519:
		z[0], z[1], z[2], z[3] = dotP25519(a, b, stride)
	default:
		z[0], z[1], z[2], z[3] = f.dotMont(a, b, stride)
	}
}

// addVec sets z[i] = x[i] + y[i]; z may alias x or y. The kernels are
// written out in the loops: a call per element would cost as much as the
// arithmetic.
func (f *Field) addVec(z, x, y []Elem) {
	x, y = x[:len(z)], y[:len(z)]
	if f.kind == kindM127 {
		for i := range z {
			a, b, p := &x[i], &y[i], &z[i]
			s0, c := bits.Add64(a[0], b[0], 0)
			s1, _ := bits.Add64(a[1], b[1], c) // < 2^128
			p[0], p[1] = foldM127(s0, s1, 0)
			p[2], p[3] = 0, 0
		}
		return
	}
	q0, q1, q2, q3 := f.q[0], f.q[1], f.q[2], f.q[3]
	for i := range z {
		a, b, p := &x[i], &y[i], &z[i]
		s0, c := bits.Add64(a[0], b[0], 0)
		s1, c := bits.Add64(a[1], b[1], c)
		s2, c := bits.Add64(a[2], b[2], c)
		s3, _ := bits.Add64(a[3], b[3], c) // < 2q < 2^256
		p[0], p[1], p[2], p[3] = condSubQ(s0, s1, s2, s3, q0, q1, q2, q3)
	}
}

// subVec sets z[i] = x[i] - y[i]; z may alias x or y.
func (f *Field) subVec(z, x, y []Elem) {
	x, y = x[:len(z)], y[:len(z)]
	q0, q1, q2, q3 := f.q[0], f.q[1], f.q[2], f.q[3]
	for i := range z {
		a, b, p := &x[i], &y[i], &z[i]
		d0, br := bits.Sub64(a[0], b[0], 0)
		d1, br := bits.Sub64(a[1], b[1], br)
		d2, br := bits.Sub64(a[2], b[2], br)
		d3, br := bits.Sub64(a[3], b[3], br)
		mask := -br // add q back on a borrow
		d0, c := bits.Add64(d0, q0&mask, 0)
		d1, c = bits.Add64(d1, q1&mask, c)
		d2, c = bits.Add64(d2, q2&mask, c)
		d3, _ = bits.Add64(d3, q3&mask, c)
		p[0], p[1], p[2], p[3] = d0, d1, d2, d3
	}
}

// scaleVec sets z[i] = s x[i]; z may alias x.
func (f *Field) scaleVec(z, x []Elem, s Elem) {
	x = x[:len(z)]
	for i := range z {
		f.MulTo(&z[i], &x[i], &s)
	}
}

package mpc

import "fmt"

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
	for _, m := range ms[1:] {
		if !m.SameShape(ms[0]) || len(m.Data) != m.Rows*m.Cols {
			panic(fmt.Sprintf("mpc: %s: shape %dx%d, want %dx%d", op, m.Rows, m.Cols, ms[0].Rows, ms[0].Cols))
		}
	}
}

// MatAdd sets dst = a + b. dst may alias a or b.
func (f *Field) MatAdd(dst, a, b Matrix) {
	mustSameShape("MatAdd", dst, a, b)
	for i := range dst.Data {
		dst.Data[i] = f.Add(a.Data[i], b.Data[i])
	}
}

// MatSub sets dst = a - b. dst may alias a or b.
func (f *Field) MatSub(dst, a, b Matrix) {
	mustSameShape("MatSub", dst, a, b)
	for i := range dst.Data {
		dst.Data[i] = f.Sub(a.Data[i], b.Data[i])
	}
}

// MatScale sets dst = s a. dst may alias a.
func (f *Field) MatScale(dst, a Matrix, s Elem) {
	mustSameShape("MatScale", dst, a)
	for i := range dst.Data {
		dst.Data[i] = f.Mul(a.Data[i], s)
	}
}

// MatMul sets dst = a b. dst must not alias a or b.
//
// Each entry is one dot product reduced once: the presets accumulate exact
// products in a wide accumulator (320 bits for 2^127-1, 576 bits for
// 2^255-19), which is exact for up to 2^64 terms; the generic path accumulates
// Montgomery-reduced products and corrects the factor R once at the end.
func (f *Field) MatMul(dst, a, b Matrix) {
	if a.Cols != b.Rows || dst.Rows != a.Rows || dst.Cols != b.Cols || len(dst.Data) != dst.Rows*dst.Cols {
		panic(fmt.Sprintf("mpc: MatMul: %dx%d = %dx%d * %dx%d", dst.Rows, dst.Cols, a.Rows, a.Cols, b.Rows, b.Cols))
	}
	for i := 0; i < a.Rows; i++ {
		row := a.Row(i)
		for j := 0; j < b.Cols; j++ {
			dst.Data[i*dst.Cols+j] = f.dot(row, b.Data[j:], b.Cols)
		}
	}
}

// MatMulAdd sets dst = dst + a b. dst must not alias a or b.
func (f *Field) MatMulAdd(dst, a, b Matrix) {
	if a.Cols != b.Rows || dst.Rows != a.Rows || dst.Cols != b.Cols {
		panic(fmt.Sprintf("mpc: MatMulAdd: %dx%d += %dx%d * %dx%d", dst.Rows, dst.Cols, a.Rows, a.Cols, b.Rows, b.Cols))
	}
	for i := 0; i < a.Rows; i++ {
		row := a.Row(i)
		for j := 0; j < b.Cols; j++ {
			k := i*dst.Cols + j
			dst.Data[k] = f.Add(dst.Data[k], f.dot(row, b.Data[j:], b.Cols))
		}
	}
}

// dot returns sum_k a[k] b[k*stride] mod q.
func (f *Field) dot(a, b []Elem, stride int) Elem {
	if len(a) == 0 {
		return Elem{}
	}
	_ = b[(len(a)-1)*stride]
	switch f.kind {
	case kindM127:
		var acc acc5
		for k := range a {
			acc.add4(mul2x2(a[k], b[k*stride]))
		}
		return reduceM127Wide(acc)
	case kindP25519:
		var acc acc9
		for k := range a {
			acc.add8(mul4x4(a[k], b[k*stride]))
		}
		return reduceP25519Wide(acc)
	default:
		var acc Elem
		for k := range a {
			acc = f.Add(acc, f.redc(mul4x4(a[k], b[k*stride])))
		}
		return f.redc(mul4x4(acc, f.r2))
	}
}

package mpc

import (
	"fmt"
	"math"
)

// Fixed point (protocol.md §2): Q<k,l> = {2^-l z : z in Z<k>}, Ecd(x, l) = 2^l x,
// Dcd(z, l) = 2^-l z.

// MaxFixedBits bounds k so that every encoded value is an exact int64.
const MaxFixedBits = 62

// EncodeInt returns z = round(2^l x) = floor(2^l x + 1/2) and checks z in Z<k>.
// A value that is not finite, or whose encoding leaves Z<k>, is an error naming
// the value and the bound; nothing wraps. Values between grid points of
// Q<k,l> are rounded to the nearest one.
func EncodeInt(x float64, k, l int) (int64, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%w: %v cannot be encoded in Q<%d,%d>", ErrNotFinite, x, k, l)
	}
	if k < 2 || k > MaxFixedBits || l < 0 || l >= k {
		return 0, fmt.Errorf("%w: Q<%d,%d> needs 2 <= k <= %d and 0 <= l < k", ErrParams, k, l, MaxFixedBits)
	}
	// round(v) = floor(v + 1/2), computed without the addition: v + 0.5
	// can round up in float64 (0.49999999999999994 + 0.5 == 1, and above
	// 2^52 every odd integer + 0.5 is a tie that rounds to even). v is exact
	// (a power-of-two scaling), and so is v - floor(v).
	v := math.Ldexp(x, l)
	z := math.Floor(v)
	if v-z >= 0.5 {
		z++
	}
	lim := math.Ldexp(1, k-1)
	if z < -lim || z >= lim {
		return 0, fmt.Errorf("%w: %v is outside Q<%d,%d> = [%v, %v]", ErrOutOfRange, x,
			k, l, -math.Ldexp(1, k-1-l), math.Ldexp(1, k-1-l)-math.Ldexp(1, -l))
	}
	return int64(z), nil
}

// Ecd encodes x in Q<k,l> as an element of Z_q (see EncodeInt).
func (f *Field) Ecd(x float64, k, l int) (Elem, error) {
	z, err := EncodeInt(x, k, l)
	if err != nil {
		return Elem{}, err
	}
	return f.FromInt64(z), nil
}

// Dcd returns 2^-l times the centered value of a.
func (f *Field) Dcd(a Elem, l int) float64 { return f.Float64(a, l) }

// EcdVec encodes a vector as a column matrix; an error names the index.
func (f *Field) EcdVec(x []float64, k, l int) (Matrix, error) {
	m := NewMatrix(len(x), 1)
	return m, f.EcdInto(m.Data, x, k, l)
}

// EcdInto encodes x into dst (same length) without allocating.
func (f *Field) EcdInto(dst []Elem, x []float64, k, l int) error {
	if len(dst) != len(x) {
		return fmt.Errorf("%w: encoding %d values into %d", ErrDimension, len(x), len(dst))
	}
	for i, v := range x {
		e, err := f.Ecd(v, k, l)
		if err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		dst[i] = e
	}
	return nil
}

// EcdMatrix encodes a row-major float matrix; an error names the entry.
func (f *Field) EcdMatrix(x [][]float64, k, l int) (Matrix, error) {
	if len(x) == 0 {
		return Matrix{}, fmt.Errorf("%w: empty matrix", ErrDimension)
	}
	m := NewMatrix(len(x), len(x[0]))
	for i, row := range x {
		if len(row) != m.Cols {
			return Matrix{}, fmt.Errorf("%w: row %d has %d columns, want %d", ErrDimension, i, len(row), m.Cols)
		}
		for j, v := range row {
			e, err := f.Ecd(v, k, l)
			if err != nil {
				return Matrix{}, fmt.Errorf("entry (%d,%d): %w", i, j, err)
			}
			m.Set(i, j, e)
		}
	}
	return m, nil
}

// DcdInto decodes a vector with scale 2^-l into dst.
func (f *Field) DcdInto(dst []float64, a []Elem, l int) {
	for i := range a {
		dst[i] = f.Float64(a[i], l)
	}
}

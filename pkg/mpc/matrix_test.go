package mpc

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
)

func TestMatrixOpsAgainstBig(t *testing.T) {
	shapes := []struct{ d1, d2, d3 int }{
		{1, 1, 1}, {1, 7, 1}, {3, 5, 2}, {4, 5, 1}, {10, 10, 1}, {7, 1, 9}, {16, 33, 3}, {2, 0, 3},
	}
	for _, tf := range bigFields(t) {
		f := tf.f
		t.Run(tf.name, func(t *testing.T) {
			t.Parallel()
			q := qBig(f)
			r := seeded(31)
			for _, sh := range shapes {
				a := mustRandomMatrix(t, f, r, sh.d1, sh.d2)
				b := mustRandomMatrix(t, f, r, sh.d2, sh.d3)
				c := mustRandomMatrix(t, f, r, sh.d1, sh.d2)
				s := mustRandom(t, f, r)
				want := bigMatMul(f, a, b)
				got := NewMatrix(sh.d1, sh.d3)
				f.MatMul(got, a, b)
				if !got.Equal(want) {
					t.Fatalf("%v: MatMul differs from math/big", sh)
				}
				// MatMulAdd onto a random matrix.
				acc := mustRandomMatrix(t, f, r, sh.d1, sh.d3)
				wantAcc := acc.Clone()
				f.MatAdd(wantAcc, wantAcc, want)
				f.MatMulAdd(acc, a, b)
				if !acc.Equal(wantAcc) {
					t.Fatalf("%v: MatMulAdd differs", sh)
				}
				// Entrywise operations, including in place (dst aliasing a).
				sum, diff, scaled := NewMatrix(sh.d1, sh.d2), NewMatrix(sh.d1, sh.d2), NewMatrix(sh.d1, sh.d2)
				f.MatAdd(sum, a, c)
				f.MatSub(diff, a, c)
				f.MatScale(scaled, a, s)
				for i := range a.Data {
					x, y := toBig(a.Data[i]), toBig(c.Data[i])
					for _, chk := range []struct {
						op   string
						got  Elem
						want *big.Int
					}{
						{"MatAdd", sum.Data[i], new(big.Int).Add(x, y)},
						{"MatSub", diff.Data[i], new(big.Int).Sub(x, y)},
						{"MatScale", scaled.Data[i], new(big.Int).Mul(x, toBig(s))},
					} {
						if chk.got != fromBig(chk.want.Mod(chk.want, q)) {
							t.Fatalf("%v: %s entry %d = %s, want %s", sh, chk.op, i, toBig(chk.got), chk.want)
						}
					}
				}
				inPlace := a.Clone()
				f.MatAdd(inPlace, inPlace, c)
				if !inPlace.Equal(sum) {
					t.Fatalf("%v: MatAdd in place differs", sh)
				}
				inPlace = c.Clone()
				f.MatSub(inPlace, a, inPlace)
				if !inPlace.Equal(diff) {
					t.Fatalf("%v: MatSub in place differs", sh)
				}
				inPlace = a.Clone()
				f.MatScale(inPlace, inPlace, s)
				if !inPlace.Equal(scaled) {
					t.Fatalf("%v: MatScale in place differs", sh)
				}
			}
			// Random shapes until tf.cases multiply-adds have been checked, a
			// quarter of the entries edge values.
			edges := edgeElems(f)
			for terms := 0; terms < tf.cases; {
				var dims [3]int
				for k := range dims {
					e := mustRandom(t, f, r)
					dims[k] = int(e[0]%12) + 1
				}
				a := mustRandomMatrix(t, f, r, dims[0], dims[1])
				b := mustRandomMatrix(t, f, r, dims[1], dims[2])
				for k := range a.Data {
					if k%4 == 0 {
						a.Data[k] = edges[(k+terms)%len(edges)]
					}
				}
				for k := range b.Data {
					if k%4 == 1 {
						b.Data[k] = edges[(k+terms/3)%len(edges)]
					}
				}
				got := NewMatrix(dims[0], dims[2])
				f.MatMul(got, a, b)
				if !got.Equal(bigMatMul(f, a, b)) {
					t.Fatalf("%v: MatMul differs from math/big", dims)
				}
				terms += dims[0] * dims[1] * dims[2]
			}
		})
	}
}

// TestMatMulIdentities checks algebraic identities on random inputs:
// (A B) C = A (B C), A (B + C) = A B + A C, and I A = A.
func TestMatMulIdentities(t *testing.T) {
	for _, name := range []string{PresetM127, PresetP25519, "1000000000000000000000000000000000000000000000000000000000007"} {
		f := mustField(t, name)
		r := seeded(32)
		for range 20 {
			a := mustRandomMatrix(t, f, r, 5, 6)
			b := mustRandomMatrix(t, f, r, 6, 4)
			c := mustRandomMatrix(t, f, r, 4, 3)
			ab, bc := NewMatrix(5, 4), NewMatrix(6, 3)
			f.MatMul(ab, a, b)
			f.MatMul(bc, b, c)
			left, right := NewMatrix(5, 3), NewMatrix(5, 3)
			f.MatMul(left, ab, c)
			f.MatMul(right, a, bc)
			if !left.Equal(right) {
				t.Fatalf("%s: (AB)C != A(BC)", name)
			}
			b2 := mustRandomMatrix(t, f, r, 6, 4)
			sum := NewMatrix(6, 4)
			f.MatAdd(sum, b, b2)
			lhs, rhs := NewMatrix(5, 4), NewMatrix(5, 4)
			f.MatMul(lhs, a, sum)
			f.MatMul(rhs, a, b)
			f.MatMulAdd(rhs, a, b2)
			if !lhs.Equal(rhs) {
				t.Fatalf("%s: A(B+C) != AB + AC", name)
			}
			id := NewMatrix(5, 5)
			for i := range 5 {
				id.Set(i, i, f.One())
			}
			ia := NewMatrix(5, 6)
			f.MatMul(ia, id, a)
			if !ia.Equal(a) {
				t.Fatalf("%s: IA != A", name)
			}
		}
	}
}

func TestMatrixAccessors(t *testing.T) {
	m := NewMatrix(3, 2)
	for i := range 3 {
		for j := range 2 {
			m.Set(i, j, Elem{uint64(10*i + j)})
		}
	}
	if got := m.At(2, 1); got != (Elem{21}) {
		t.Errorf("At(2,1) = %v, want 21", got)
	}
	if got := m.Row(1); len(got) != 2 || got[0] != (Elem{10}) || got[1] != (Elem{11}) {
		t.Errorf("Row(1) = %v", got)
	}
	rr := m.RowRange(1, 3)
	if rr.Rows != 2 || rr.Cols != 2 || rr.At(0, 0) != (Elem{10}) {
		t.Errorf("RowRange(1,3) = %+v", rr)
	}
	rr.Set(0, 0, Elem{99}) // shares storage
	if m.At(1, 0) != (Elem{99}) {
		t.Errorf("RowRange does not share storage")
	}
	c := m.Clone()
	c.Set(0, 0, Elem{7})
	if m.At(0, 0) == (Elem{7}) {
		t.Errorf("Clone shares storage")
	}
	if !m.Equal(m.Clone()) || m.Equal(c) || m.Equal(NewMatrix(2, 3)) {
		t.Errorf("Equal is wrong")
	}
	if !m.SameShape(NewMatrix(3, 2)) || m.SameShape(NewMatrix(2, 3)) {
		t.Errorf("SameShape is wrong")
	}
}

// mustPanic runs fn and checks it panics with a message containing want.
func mustPanic(t *testing.T, what, want string, fn func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Errorf("%s: no panic", what)
			return
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Errorf("%s: panic %q, want it to contain %q", what, msg, want)
		}
	}()
	fn()
}

// TestMatrixShapePanics: a shape mismatch inside pkg/mpc is a programming
// error and panics with the shapes in the message (style.md rule 4).
func TestMatrixShapePanics(t *testing.T) {
	f := mustField(t, PresetM127)
	a, b := NewMatrix(2, 3), NewMatrix(3, 2)
	mustPanic(t, "NewMatrix", "negative matrix shape -1x2", func() { NewMatrix(-1, 2) })
	mustPanic(t, "MatAdd", "mpc: MatAdd: shape 3x2, want 2x3", func() { f.MatAdd(a, a, b) })
	mustPanic(t, "MatSub", "mpc: MatSub", func() { f.MatSub(b, a, a) })
	mustPanic(t, "MatScale", "mpc: MatScale", func() { f.MatScale(a, b, f.One()) })
	mustPanic(t, "MatMul", "mpc: MatMul: 2x3 = 2x3 * 2x3", func() { f.MatMul(a, a, a) })
	mustPanic(t, "MatMul dst", "mpc: MatMul", func() { f.MatMul(NewMatrix(3, 3), a, b) })
	mustPanic(t, "MatMulAdd", "mpc: MatMulAdd", func() { f.MatMulAdd(NewMatrix(2, 3), a, b) })
	short := Matrix{Rows: 2, Cols: 3, Data: make([]Elem, 5)}
	mustPanic(t, "MatAdd short data", "mpc: MatAdd", func() { f.MatAdd(a, a, short) })
	mustPanic(t, "MatMul short data", "mpc: MatMul", func() { f.MatMul(NewMatrix(2, 2), short, b) })
}

package mpc

import (
	"io"
	"math"
	"math/big"
	"testing"
)

// Shared test helpers. math/big is the reference for all arithmetic.

// seeded returns a deterministic reader, so every test replays bit for bit.
func seeded(seed byte) io.Reader { return NewPRG([32]byte{seed}, [16]byte{'t', 'e', 's', 't'}) }

func mustField(tb testing.TB, name string) *Field {
	tb.Helper()
	f, err := ParseModulus(name)
	if err != nil {
		tb.Fatalf("ParseModulus(%q): %v", name, err)
	}
	return f
}

func mustFieldQ(tb testing.TB, q Elem) *Field {
	tb.Helper()
	f, err := NewField(q)
	if err != nil {
		tb.Fatalf("NewField(%s): %v", elemDecimal(q), err)
	}
	return f
}

func mustRandom(tb testing.TB, f *Field, r io.Reader) Elem {
	tb.Helper()
	a, err := f.Random(r)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func mustRandomMatrix(tb testing.TB, f *Field, r io.Reader, rows, cols int) Matrix {
	tb.Helper()
	m, err := f.RandomMatrix(r, rows, cols)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func mustShare(tb testing.TB, f *Field, r io.Reader, x Matrix) (Matrix, Matrix) {
	tb.Helper()
	s0, s1, err := f.Share(r, x)
	if err != nil {
		tb.Fatal(err)
	}
	return s0, s1
}

// oddModulus returns a fixed pseudo-random odd modulus of exactly bits bits.
func oddModulus(bits int, seed byte) Elem {
	var buf [32]byte
	if _, err := io.ReadFull(NewPRG([32]byte{seed, 'q'}, [16]byte{}), buf[:]); err != nil {
		panic(err)
	}
	x := new(big.Int).SetBytes(buf[:])
	x.Rsh(x, uint(256-bits))
	x.SetBit(x, bits-1, 1)
	x.SetBit(x, 0, 1)
	return fromBig(x)
}

// toBig returns the integer held in the limbs of a.
func toBig(a Elem) *big.Int {
	x := new(big.Int)
	for i := 3; i >= 0; i-- {
		x.Lsh(x, 64)
		x.Or(x, new(big.Int).SetUint64(a[i]))
	}
	return x
}

// fromBig returns the limbs of 0 <= x < 2^256.
func fromBig(x *big.Int) Elem {
	if x.Sign() < 0 || x.BitLen() > 256 {
		panic("fromBig: out of range " + x.String())
	}
	var a Elem
	t := new(big.Int).Set(x)
	mask := new(big.Int).SetUint64(^uint64(0))
	for i := range 4 {
		a[i] = new(big.Int).And(t, mask).Uint64()
		t.Rsh(t, 64)
	}
	return a
}

func qBig(f *Field) *big.Int { return toBig(f.Modulus()) }

// centeredBig is the centered integer a stands for: a or a - q.
func centeredBig(f *Field, a Elem) *big.Int {
	x := toBig(a)
	if x.Cmp(toBig(f.Half())) > 0 {
		x.Sub(x, qBig(f))
	}
	return x
}

// elemOf returns x mod q as an element, for any integer x.
func elemOf(f *Field, x *big.Int) Elem {
	return fromBig(new(big.Int).Mod(x, qBig(f)))
}

// pow2Big returns 2^e.
func pow2Big(e int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(e)) }

// floorDivPow2 is floor(x / 2^l) (big.Int's Rsh rounds toward -inf).
func floorDivPow2(x *big.Int, l int) *big.Int { return new(big.Int).Rsh(x, uint(l)) }

// roundBig is round(x / 2^l) = floor((x + 2^(l-1)) / 2^l), the rule of
// protocol.md §2.
func roundBig(x *big.Int, l int) *big.Int {
	if l == 0 {
		return new(big.Int).Set(x)
	}
	return floorDivPow2(new(big.Int).Add(x, pow2Big(l-1)), l)
}

// bigMatMul is the reference product of two matrices over Z_q.
func bigMatMul(f *Field, a, b Matrix) Matrix {
	q := qBig(f)
	c := NewMatrix(a.Rows, b.Cols)
	for i := 0; i < a.Rows; i++ {
		for j := 0; j < b.Cols; j++ {
			s := new(big.Int)
			for k := 0; k < a.Cols; k++ {
				s.Add(s, new(big.Int).Mul(toBig(a.At(i, k)), toBig(b.At(k, j))))
			}
			c.Set(i, j, fromBig(s.Mod(s, q)))
		}
	}
	return c
}

// chiSquare returns Pearson's statistic of counts against equal expected
// frequencies.
func chiSquare(counts []int) float64 {
	n := 0
	for _, c := range counts {
		n += c
	}
	e := float64(n) / float64(len(counts))
	s := 0.0
	for _, c := range counts {
		d := float64(c) - e
		s += d * d / e
	}
	return s
}

// chiThreshold is a generous acceptance bound for a chi-square statistic with
// dof degrees of freedom: the mean plus ten standard deviations. Seeds are
// fixed, so a pass is deterministic; the margin keeps a changed seed from
// failing by bad luck (the false-alarm probability is far below 1e-9).
func chiThreshold(dof int) float64 {
	return float64(dof) + 10*sqrt(2*float64(dof))
}

func sqrt(x float64) float64 { return math.Sqrt(x) }

package mpc

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// Elem is an element of Z_q held as four little-endian 64-bit limbs.
//
// Invariant: always fully reduced, 0 <= value < q, so limbs above the field's
// width are zero. The centered integer it stands for (protocol.md §2) is the
// value itself when value <= (q-1)/2 and value - q otherwise, so Z_q is read as
// [-(q-1)/2, (q-1)/2].
type Elem [4]uint64

type fieldKind uint8

const (
	kindM127    fieldKind = iota // q = 2^127 - 1, reduction by folding at bit 127
	kindP25519                   // q = 2^255 - 19, reduction by 2^256 = 38 (mod q)
	kindGeneric                  // any odd 3 <= q < 2^255, Montgomery with R = 2^256
)

// Names of the preset moduli accepted by ParseModulus.
const (
	PresetM127   = "2^127-1"
	PresetP25519 = "2^255-19"
)

// MaxModulusBits is the largest bit length of q: q < 2^255 keeps 2q below
// 2^256, so a sum of two elements never leaves four limbs.
const MaxModulusBits = 255

// Field is Z_q for an odd modulus q chosen at run time. It is immutable after
// construction and safe for concurrent use. The two presets have dedicated
// reductions; any other odd q uses Montgomery multiplication with R = 2^256.
type Field struct {
	kind    fieldKind
	q       Elem
	half    Elem // (q-1)/2, the largest non-negative centered value
	bitLen  int
	byteLen int
	name    string
	log2q   float64

	// Montgomery constants (kindGeneric only), R = 2^256.
	m0inv uint64 // -q^-1 mod 2^64
	r1    Elem   // R mod q
	r2    Elem   // R^2 mod q
	r3    Elem   // R^3 mod q
}

// ParseModulus returns the field for a modulus given as a preset name
// ("2^127-1", "2^255-19") or as a decimal integer. The modulus must be odd and
// 3 <= q < 2^255.
func ParseModulus(s string) (*Field, error) {
	s = strings.TrimSpace(s)
	switch s {
	case PresetM127:
		return NewField(Elem{^uint64(0), 1<<63 - 1})
	case PresetP25519:
		return NewField(Elem{^uint64(0) - 18, ^uint64(0), ^uint64(0), 1<<63 - 1})
	case "":
		return nil, fmt.Errorf("%w: empty modulus", ErrModulus)
	}
	var q Elem
	for i, c := range s {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("%w: %q: character %d (%q) is not a decimal digit; use a decimal integer or %q or %q",
				ErrModulus, s, i, c, PresetM127, PresetP25519)
		}
		// q = 10 q + d, refusing anything that reaches 2^256.
		var carry uint64 = uint64(c - '0')
		for j := 0; j < 4; j++ {
			hi, lo := bits.Mul64(q[j], 10)
			lo, cc := bits.Add64(lo, carry, 0)
			q[j], carry = lo, hi+cc
		}
		if carry != 0 {
			return nil, fmt.Errorf("%w: %q has more than %d bits", ErrModulus, s, MaxModulusBits)
		}
	}
	return NewField(q)
}

// NewField returns Z_q for the odd modulus q (3 <= q < 2^255).
func NewField(q Elem) (*Field, error) {
	bl := elemBitLen(q)
	switch {
	case bl > MaxModulusBits:
		return nil, fmt.Errorf("%w: modulus has %d bits, at most %d are supported", ErrModulus, bl, MaxModulusBits)
	case q[0]&1 == 0:
		return nil, fmt.Errorf("%w: %s is even (2^l must be invertible mod q)", ErrEvenModulus, elemDecimal(q))
	case bl < 2:
		return nil, fmt.Errorf("%w: modulus must be at least 3, got %s", ErrModulus, elemDecimal(q))
	}
	f := &Field{q: q, bitLen: bl, byteLen: (bl + 7) / 8, kind: kindGeneric}
	f.half = shr1(q) // q odd, so (q-1)/2 = q >> 1
	switch q {
	case Elem{^uint64(0), 1<<63 - 1}:
		f.kind, f.name = kindM127, PresetM127
	case Elem{^uint64(0) - 18, ^uint64(0), ^uint64(0), 1<<63 - 1}:
		f.kind, f.name = kindP25519, PresetP25519
	default:
		f.name = elemDecimal(q)
	}
	f.log2q = elemLog2(q)
	// Newton iteration for q^-1 mod 2^64: each step doubles the correct bits.
	inv := q[0]
	for i := 0; i < 6; i++ {
		inv *= 2 - q[0]*inv
	}
	f.m0inv = -inv
	// R mod q and R^2 mod q by modular doublings of 1, R^3 = redc(R^2 R^2)
	// (set-up only; field_test.go re-derives all three with math/big).
	r := f.reduceSmall(1)
	for i := 1; i <= 512; i++ {
		r = f.Add(r, r)
		if i == 256 {
			f.r1 = r
		}
	}
	f.r2 = r
	f.r3[0], f.r3[1], f.r3[2], f.r3[3] = f.redc(mul256(r[0], r[1], r[2], r[3], r[0], r[1], r[2], r[3]))
	return f, nil
}

// Name is the preset name or the decimal modulus.
func (f *Field) Name() string { return f.name }

// Modulus returns q.
func (f *Field) Modulus() Elem { return f.q }

// BitLen is the bit length L of q: 2^(L-1) <= q < 2^L.
func (f *Field) BitLen() int { return f.bitLen }

// Log2 is log2(q) as a float64 (exact enough for comparing with bit bounds).
func (f *Field) Log2() float64 { return f.log2q }

// ByteLen is the length of an element's fixed-width wire encoding.
func (f *Field) ByteLen() int { return f.byteLen }

// Half is (q-1)/2, the largest non-negative centered value.
func (f *Field) Half() Elem { return f.half }

// Zero and One.
func (f *Field) Zero() Elem { return Elem{} }

// One is the multiplicative identity.
func (f *Field) One() Elem { return Elem{1} }

// Add returns a + b mod q.
func (f *Field) Add(a, b Elem) (z Elem) {
	f.AddTo(&z, &a, &b)
	return z
}

// Sub returns a - b mod q.
func (f *Field) Sub(a, b Elem) (z Elem) {
	f.SubTo(&z, &a, &b)
	return z
}

// Neg returns -a mod q.
func (f *Field) Neg(a Elem) (z Elem) {
	f.SubTo(&z, &z, &a)
	return z
}

// Mul returns a b mod q.
func (f *Field) Mul(a, b Elem) (z Elem) {
	f.MulTo(&z, &a, &b)
	return z
}

// The pointer forms below compute the same as Add, Sub and Mul without
// copying 32-byte values: Go passes and returns arrays through memory, and in
// a tight loop those copies cost as much as the arithmetic. z may alias a or
// b. The matrix operations of matrix.go use the same kernels.

// AddTo sets *z = *a + *b mod q.
func (f *Field) AddTo(z, a, b *Elem) {
	if f.kind == kindM127 {
		s0, c := bits.Add64(a[0], b[0], 0)
		s1, _ := bits.Add64(a[1], b[1], c) // < 2^128
		z[0], z[1] = foldM127(s0, s1, 0)
		z[2], z[3] = 0, 0
		return
	}
	s0, c := bits.Add64(a[0], b[0], 0)
	s1, c := bits.Add64(a[1], b[1], c)
	s2, c := bits.Add64(a[2], b[2], c)
	s3, _ := bits.Add64(a[3], b[3], c) // < 2q < 2^256
	z[0], z[1], z[2], z[3] = condSubQ(s0, s1, s2, s3, f.q[0], f.q[1], f.q[2], f.q[3])
}

// SubTo sets *z = *a - *b mod q.
func (f *Field) SubTo(z, a, b *Elem) {
	d0, br := bits.Sub64(a[0], b[0], 0)
	d1, br := bits.Sub64(a[1], b[1], br)
	d2, br := bits.Sub64(a[2], b[2], br)
	d3, br := bits.Sub64(a[3], b[3], br)
	mask := -br // add q back on a borrow, without a branch
	d0, c := bits.Add64(d0, f.q[0]&mask, 0)
	d1, c = bits.Add64(d1, f.q[1]&mask, c)
	d2, c = bits.Add64(d2, f.q[2]&mask, c)
	d3, _ = bits.Add64(d3, f.q[3]&mask, c)
	z[0], z[1], z[2], z[3] = d0, d1, d2, d3
}

// MulTo sets *z = *a * *b mod q.
func (f *Field) MulTo(z, a, b *Elem) {
	switch f.kind {
	case kindM127:
		z[0], z[1] = mulM127(a[0], a[1], b[0], b[1])
		z[2], z[3] = 0, 0
	case kindP25519:
		z[0], z[1], z[2], z[3] = reduceP25519(mul256(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]))
	default:
		z[0], z[1], z[2], z[3] = f.mulMont(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
	}
}

// reduceSmall returns v mod q for a 64-bit v.
func (f *Field) reduceSmall(v uint64) Elem {
	if f.bitLen <= 64 {
		return Elem{v % f.q[0]}
	}
	return Elem{v}
}

// FromUint64 returns v mod q.
func (f *Field) FromUint64(v uint64) Elem { return f.reduceSmall(v) }

// FromInt64 returns v mod q (the centered reading of the result is v when
// |v| <= (q-1)/2).
func (f *Field) FromInt64(v int64) Elem {
	if v >= 0 {
		return f.reduceSmall(uint64(v))
	}
	return f.Neg(f.reduceSmall(uint64(-(v + 1)) + 1)) // -(MinInt64) overflows; -(v+1)+1 does not
}

// Pow2 returns 2^e mod q for e >= 0.
func (f *Field) Pow2(e int) Elem {
	if e < f.bitLen-1 && e < 256 {
		var r Elem
		r[e/64] = 1 << (e % 64)
		return r
	}
	r := f.Pow2(0)
	two := f.reduceSmall(2)
	for i := 0; i < e; i++ {
		r = f.Mul(r, two)
	}
	return r
}

// InvPow2 returns 2^-e mod q; it exists because q is odd: 2^-1 = (q+1)/2.
func (f *Field) InvPow2(e int) Elem {
	inv2 := shr1(f.q)
	inv2 = f.Add(inv2, Elem{1}) // (q-1)/2 + 1 = (q+1)/2
	r := Elem{1}
	for i := 0; i < e; i++ {
		r = f.Mul(r, inv2)
	}
	return r
}

// IsNeg reports whether a's centered value is negative.
func (f *Field) IsNeg(a Elem) bool { return cmp(a, f.half) > 0 }

// Int64 returns a's centered value and whether it fits in an int64.
func (f *Field) Int64(a Elem) (int64, bool) {
	if f.IsNeg(a) {
		m := f.Neg(a) // magnitude
		if m[1]|m[2]|m[3] != 0 || m[0] > 1<<63 {
			return 0, false
		}
		return int64(-m[0]), true // -(1<<63) wraps to MinInt64, as intended
	}
	if a[1]|a[2]|a[3] != 0 || a[0] > math.MaxInt64 {
		return 0, false
	}
	return int64(a[0]), true
}

// CenteredLow64 returns the low 64 bits of a's centered value in two's
// complement, which is all Protocol 2 step 3 needs for a reduction mod 2^l
// with l < 64.
func (f *Field) CenteredLow64(a Elem) uint64 {
	if f.IsNeg(a) {
		return a[0] - f.q[0] // (a - q) mod 2^64
	}
	return a[0]
}

// InSigned reports whether a's centered value lies in Z<k> = [-2^(k-1), 2^(k-1)).
func (f *Field) InSigned(a Elem, k int) bool {
	if k-1 >= f.bitLen {
		return true
	}
	if f.IsNeg(a) {
		m := f.Neg(a)
		return elemBitLen(m) < k || (elemBitLen(m) == k && isPow2(m)) // |v| <= 2^(k-1)
	}
	return elemBitLen(a) < k
}

// Float64 returns a's centered value divided by 2^scale, correctly rounded
// to float64 (round half to even), for scale >= 0.
func (f *Field) Float64(a Elem, scale int) float64 {
	neg := f.IsNeg(a)
	if neg {
		a = f.Neg(a)
	}
	// Round the magnitude once: keep its top 64 bits and fold every lower
	// bit into bit 0 as a sticky bit, so that converting that word rounds as
	// the full value would (64 bits leave room for 53 plus guard and sticky).
	var v float64
	if n := elemBitLen(a); n <= 64 {
		v = math.Ldexp(float64(a[0]), -scale)
	} else {
		sh := n - 64
		top := shrN(a, sh)[0]
		if lowBitsNonZero(a, sh) {
			top |= 1
		}
		v = math.Ldexp(float64(top), sh-scale)
	}
	if neg {
		return -v
	}
	return v
}

// PutElem writes a's fixed-width little-endian encoding into dst[:ByteLen()].
func (f *Field) PutElem(dst []byte, a Elem) {
	_ = dst[f.byteLen-1]
	i := 0
	for ; i+8 <= f.byteLen; i += 8 { // whole limbs
		binary.LittleEndian.PutUint64(dst[i:], a[i/8])
	}
	for ; i < f.byteLen; i++ {
		dst[i] = byte(a[i/8] >> (8 * (i % 8)))
	}
}

// ElemFromBytes decodes a fixed-width little-endian element and rejects
// anything of the wrong length or not below q.
func (f *Field) ElemFromBytes(b []byte) (Elem, error) {
	var a Elem
	if len(b) != f.byteLen {
		return a, fmt.Errorf("%w: %d bytes, want %d for modulus %s", ErrEncoding, len(b), f.byteLen, f.name)
	}
	i := 0
	for ; i+8 <= len(b); i += 8 { // whole limbs
		a[i/8] = binary.LittleEndian.Uint64(b[i:])
	}
	for ; i < len(b); i++ {
		a[i/8] |= uint64(b[i]) << (8 * (i % 8))
	}
	if cmp(a, f.q) >= 0 {
		return Elem{}, fmt.Errorf("%w: value is not below the modulus %s", ErrEncoding, f.name)
	}
	return a, nil
}

// String formats a's centered value in decimal.
func (f *Field) String(a Elem) string {
	if f.IsNeg(a) {
		return "-" + elemDecimal(f.Neg(a))
	}
	return elemDecimal(a)
}

func cmp(a, b Elem) int {
	for i := 3; i >= 0; i-- {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func shr1(a Elem) Elem {
	return Elem{a[0]>>1 | a[1]<<63, a[1]>>1 | a[2]<<63, a[2]>>1 | a[3]<<63, a[3] >> 1}
}

func elemBitLen(a Elem) int {
	for i := 3; i >= 0; i-- {
		if a[i] != 0 {
			return 64*i + bits.Len64(a[i])
		}
	}
	return 0
}

func isPow2(a Elem) bool {
	n := 0
	for _, w := range a {
		n += bits.OnesCount64(w)
	}
	return n == 1
}

func elemLog2(a Elem) float64 {
	bl := elemBitLen(a)
	// Take the top 64 bits as a mantissa; the rest shifts the exponent.
	if bl <= 64 {
		return math.Log2(float64(a[0]))
	}
	sh := bl - 64
	top := shrN(a, sh)[0]
	return math.Log2(float64(top)) + float64(sh)
}

// lowBitsNonZero reports whether any of the n low bits of a is set.
func lowBitsNonZero(a Elem, n int) bool {
	for i := 0; i < 4 && n > 0; i, n = i+1, n-64 {
		w := a[i]
		if n < 64 {
			w &= 1<<uint(n) - 1
		}
		if w != 0 {
			return true
		}
	}
	return false
}

// addRaw and subRaw are plain 256-bit integer addition and subtraction (no
// reduction); callers guarantee no overflow or borrow.
func addRaw(a, b Elem) Elem {
	var c uint64
	a[0], c = bits.Add64(a[0], b[0], 0)
	a[1], c = bits.Add64(a[1], b[1], c)
	a[2], c = bits.Add64(a[2], b[2], c)
	a[3], _ = bits.Add64(a[3], b[3], c)
	return a
}

func subRaw(a, b Elem) Elem {
	var c uint64
	a[0], c = bits.Sub64(a[0], b[0], 0)
	a[1], c = bits.Sub64(a[1], b[1], c)
	a[2], c = bits.Sub64(a[2], b[2], c)
	a[3], _ = bits.Sub64(a[3], b[3], c)
	return a
}

func shrN(a Elem, n int) Elem {
	for n >= 64 {
		a = Elem{a[1], a[2], a[3], 0}
		n -= 64
	}
	if n == 0 {
		return a
	}
	return Elem{a[0]>>n | a[1]<<(64-n), a[1]>>n | a[2]<<(64-n), a[2]>>n | a[3]<<(64-n), a[3] >> n}
}

func elemDecimal(a Elem) string {
	if a == (Elem{}) {
		return "0"
	}
	var digits []byte
	for a != (Elem{}) {
		var r uint64
		for i := 3; i >= 0; i-- {
			a[i], r = bits.Div64(r, a[i], 10)
		}
		digits = append(digits, byte('0'+r))
	}
	for i, j := 0, len(digits)-1; i < j; i, j = i+1, j-1 {
		digits[i], digits[j] = digits[j], digits[i]
	}
	return string(digits)
}

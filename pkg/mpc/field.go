package mpc

import (
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

	// Montgomery constants (kindGeneric only).
	m0inv uint64 // -q^-1 mod 2^64
	r2    Elem   // 2^512 mod q
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
	// R^2 = 2^512 mod q by 512 modular doublings (set-up only).
	r := f.reduceSmall(1)
	for i := 0; i < 512; i++ {
		r = f.Add(r, r)
	}
	f.r2 = r
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
func (f *Field) Add(a, b Elem) Elem {
	var s Elem
	var c uint64
	s[0], c = bits.Add64(a[0], b[0], 0)
	s[1], c = bits.Add64(a[1], b[1], c)
	s[2], c = bits.Add64(a[2], b[2], c)
	s[3], _ = bits.Add64(a[3], b[3], c) // a+b < 2q < 2^256
	return f.condSub(s)
}

// Sub returns a - b mod q.
func (f *Field) Sub(a, b Elem) Elem {
	var d Elem
	var br uint64
	d[0], br = bits.Sub64(a[0], b[0], 0)
	d[1], br = bits.Sub64(a[1], b[1], br)
	d[2], br = bits.Sub64(a[2], b[2], br)
	d[3], br = bits.Sub64(a[3], b[3], br)
	if br != 0 {
		var c uint64
		d[0], c = bits.Add64(d[0], f.q[0], 0)
		d[1], c = bits.Add64(d[1], f.q[1], c)
		d[2], c = bits.Add64(d[2], f.q[2], c)
		d[3], _ = bits.Add64(d[3], f.q[3], c)
	}
	return d
}

// Neg returns -a mod q.
func (f *Field) Neg(a Elem) Elem { return f.Sub(Elem{}, a) }

// Mul returns a b mod q.
func (f *Field) Mul(a, b Elem) Elem {
	switch f.kind {
	case kindM127:
		return reduceM127(mul2x2(a, b))
	case kindP25519:
		return reduceP25519(mul4x4(a, b))
	default:
		t := f.redc(mul4x4(a, b))      // a b R^-1
		return f.redc(mul4x4(t, f.r2)) // a b
	}
}

// condSub returns s - q if s >= q, else s; s < 2q.
func (f *Field) condSub(s Elem) Elem {
	var d Elem
	var br uint64
	d[0], br = bits.Sub64(s[0], f.q[0], 0)
	d[1], br = bits.Sub64(s[1], f.q[1], br)
	d[2], br = bits.Sub64(s[2], f.q[2], br)
	d[3], br = bits.Sub64(s[3], f.q[3], br)
	if br != 0 {
		return s
	}
	return d
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

// Float64 returns a's centered value divided by 2^scale, rounded to float64.
func (f *Field) Float64(a Elem, scale int) float64 {
	neg := f.IsNeg(a)
	if neg {
		a = f.Neg(a)
	}
	v := 0.0
	for i := 3; i >= 0; i-- {
		v = v*0x1p64 + float64(a[i])
	}
	v = math.Ldexp(v, -scale)
	if neg {
		return -v
	}
	return v
}

// PutElem writes a's fixed-width little-endian encoding into dst[:ByteLen()].
func (f *Field) PutElem(dst []byte, a Elem) {
	_ = dst[f.byteLen-1]
	for i := 0; i < f.byteLen; i++ {
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
	for i, c := range b {
		a[i/8] |= uint64(c) << (8 * (i % 8))
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

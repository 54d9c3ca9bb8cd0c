package mpc

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// Z_q is tested three ways: exhaustively on toy moduli against plain int64
// arithmetic, on 10^5 random and edge inputs per field against math/big, and
// by re-deriving every precomputed constant.

// toyModuli are small odd moduli, including composites: nothing here needs q
// to be prime. 65535 = 3 5 17 257 is the 16-bit composite.
var toyModuli = []uint64{3, 15, 251, 65535}

// toyPairLimit bounds exhaustive all-pairs checks; above it binary operations
// run over every a and a fixed set of b.
const toyPairLimit = 256

func toyField(t *testing.T, q uint64) *Field {
	t.Helper()
	return mustFieldQ(t, Elem{q})
}

// toyCentered is the centered reading of a in [0, q).
func toyCentered(a, q int64) int64 {
	if a > (q-1)/2 {
		return a - q
	}
	return a
}

func floorDiv(a, b int64) int64 {
	d := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		d--
	}
	return d
}

func mod(a, q int64) int64 { return ((a % q) + q) % q }

func TestToyFieldBinaryOps(t *testing.T) {
	for _, qu := range toyModuli {
		f := toyField(t, qu)
		q := int64(qu)
		var bs []int64
		if qu <= toyPairLimit {
			for b := int64(0); b < q; b++ {
				bs = append(bs, b)
			}
		} else {
			bs = []int64{0, 1, 2, 3, q / 2, q/2 + 1, q - 2, q - 1, 255, 256, 257, 4096, 12345}
			r := seeded(byte(qu))
			for range 32 {
				v, _ := f.Int64(mustRandom(t, f, r))
				bs = append(bs, mod(v, q))
			}
		}
		for a := int64(0); a < q; a++ {
			ea := Elem{uint64(a)}
			for _, b := range bs {
				eb := Elem{uint64(b)}
				checks := []struct {
					op   string
					got  Elem
					want int64
				}{
					{"Add", f.Add(ea, eb), (a + b) % q},
					{"Sub", f.Sub(ea, eb), mod(a-b, q)},
					{"Mul", f.Mul(ea, eb), a * b % q},
				}
				for _, c := range checks {
					if c.got != (Elem{uint64(c.want)}) {
						t.Fatalf("q=%d: %s(%d, %d) = %v, want %d", q, c.op, a, b, c.got, c.want)
					}
				}
				var z Elem
				if f.MulTo(&z, &ea, &eb); z != (Elem{uint64(a * b % q)}) {
					t.Fatalf("q=%d: MulTo(%d, %d) = %v, want %d", q, a, b, z, a*b%q)
				}
			}
		}
	}
}

func TestToyFieldUnaryOps(t *testing.T) {
	for _, qu := range toyModuli {
		f := toyField(t, qu)
		q := int64(qu)
		for a := int64(0); a < q; a++ {
			ea := Elem{uint64(a)}
			c := toyCentered(a, q)
			if got := f.Neg(ea); got != (Elem{uint64(mod(-a, q))}) {
				t.Fatalf("q=%d: Neg(%d) = %v", q, a, got)
			}
			if got, ok := f.Int64(ea); !ok || got != c {
				t.Fatalf("q=%d: Int64(%d) = %d, %v; want %d", q, a, got, ok, c)
			}
			if got := f.IsNeg(ea); got != (c < 0) {
				t.Fatalf("q=%d: IsNeg(%d) = %v", q, a, got)
			}
			if got := f.CenteredLow64(ea); got != uint64(c) {
				t.Fatalf("q=%d: CenteredLow64(%d) = %#x, want %#x", q, a, got, uint64(c))
			}
			if got := f.String(ea); got != fmt.Sprint(c) {
				t.Fatalf("q=%d: String(%d) = %q, want %d", q, a, got, c)
			}
			for _, scale := range []int{0, 1, 5, 64} {
				if got, want := f.Float64(ea, scale), math.Ldexp(float64(c), -scale); got != want {
					t.Fatalf("q=%d: Float64(%d, %d) = %v, want %v", q, a, scale, got, want)
				}
			}
			for k := 1; k <= f.BitLen()+2; k++ {
				lim := int64(1) << (k - 1)
				if got, want := f.InSigned(ea, k), -lim <= c && c < lim; got != want {
					t.Fatalf("q=%d: InSigned(%d [centered %d], %d) = %v, want %v", q, a, c, k, got, want)
				}
			}
			for l := 0; l <= f.BitLen()+1; l++ {
				var want int64
				if l == 0 {
					want = c
				} else {
					want = floorDiv(c+int64(1)<<(l-1), int64(1)<<l)
				}
				if got := f.RoundShift(ea, l); got != (Elem{uint64(mod(want, q))}) {
					gc, _ := f.Int64(got)
					t.Fatalf("q=%d: RoundShift(%d [centered %d], %d) = %d, want %d", q, a, c, l, gc, want)
				}
			}
		}
		// FromInt64 and FromUint64 over a window around every multiple of q
		// that matters, and at the int64 extremes.
		vs := []int64{math.MinInt64, math.MinInt64 + 1, math.MaxInt64, math.MaxInt64 - 1}
		for v := -3 * q; v <= 3*q; v++ {
			vs = append(vs, v)
		}
		for _, v := range vs {
			want := new(big.Int).Mod(big.NewInt(v), big.NewInt(q)).Uint64()
			if got := f.FromInt64(v); got != (Elem{want}) {
				t.Fatalf("q=%d: FromInt64(%d) = %v, want %d", q, v, got, want)
			}
			if v >= 0 {
				if got := f.FromUint64(uint64(v)); got != (Elem{uint64(v) % qu}) {
					t.Fatalf("q=%d: FromUint64(%d) = %v", q, v, got)
				}
			}
		}
	}
}

// TestToyFieldEncoding decodes every byte string of the field's width: exactly
// the values below q are accepted, and each re-encodes to the same bytes.
func TestToyFieldEncoding(t *testing.T) {
	for _, qu := range toyModuli {
		f := toyField(t, qu)
		n := f.ByteLen()
		accepted := 0
		for v := 0; v < 1<<(8*n); v++ {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(v >> (8 * i))
			}
			a, err := f.ElemFromBytes(b)
			if uint64(v) >= qu {
				if !errors.Is(err, ErrEncoding) {
					t.Fatalf("q=%d: ElemFromBytes(%x) = %v, %v; want ErrEncoding", qu, b, a, err)
				}
				continue
			}
			if err != nil || a != (Elem{uint64(v)}) {
				t.Fatalf("q=%d: ElemFromBytes(%x) = %v, %v; want %d", qu, b, a, err, v)
			}
			accepted++
			out := make([]byte, n)
			f.PutElem(out, a)
			if string(out) != string(b) {
				t.Fatalf("q=%d: PutElem(%d) = %x, want %x", qu, v, out, b)
			}
		}
		if accepted != int(qu) {
			t.Errorf("q=%d: %d encodings accepted, want q", qu, accepted)
		}
		for _, bad := range [][]byte{nil, make([]byte, n-1), make([]byte, n+1)} {
			if _, err := f.ElemFromBytes(bad); !errors.Is(err, ErrEncoding) {
				t.Errorf("q=%d: ElemFromBytes(%d bytes) error = %v, want ErrEncoding", qu, len(bad), err)
			}
		}
	}
}

func TestToyFieldPow2(t *testing.T) {
	for _, qu := range toyModuli {
		f := toyField(t, qu)
		want := uint64(1)
		for e := 0; e < 3*f.BitLen()+5; e++ {
			if got := f.Pow2(e); got != (Elem{want}) {
				t.Fatalf("q=%d: Pow2(%d) = %v, want %d", qu, e, got, want)
			}
			if got := f.Mul(f.InvPow2(e), f.Pow2(e)); got != f.One() {
				t.Fatalf("q=%d: InvPow2(%d) 2^%d = %v, want 1", qu, e, e, got)
			}
			want = want * 2 % qu
		}
	}
}

// testField is a field under test with a readable name and how many random
// cases it gets.
type testField struct {
	name  string
	f     *Field
	cases int
}

// bigFields are the fields checked against math/big: both presets and random
// odd 200- and 100-bit moduli get 10^5 random cases (10^4 with -short); the
// extra generic moduli probe limb boundaries and the extremes (the largest
// allowed modulus, 2^255-1, and the smallest, 3) with fewer.
func bigFields(t testing.TB) []testField {
	t.Helper()
	n := 100000
	if testing.Short() {
		n = 10000
	}
	fs := []testField{
		{"2^127-1", mustField(t, PresetM127), n},
		{"2^255-19", mustField(t, PresetP25519), n},
		{"rand200", mustFieldQ(t, oddModulus(200, 1)), n},
		{"rand100", mustFieldQ(t, oddModulus(100, 2)), n},
	}
	for _, b := range []int{255, 129, 128, 127, 65, 64, 63} {
		fs = append(fs, testField{fmt.Sprintf("rand%d", b), mustFieldQ(t, oddModulus(b, byte(b))), n / 10})
	}
	max := new(big.Int).Sub(pow2Big(255), big.NewInt(1)) // odd, 255 bits
	fs = append(fs,
		testField{"2^255-1", mustFieldQ(t, fromBig(max)), n / 10},
		testField{"3", mustFieldQ(t, Elem{3}), n / 10})
	return fs
}

// edgeElems are the values most likely to break carries and reductions.
func edgeElems(f *Field) []Elem {
	q := qBig(f)
	cands := []*big.Int{
		big.NewInt(0), big.NewInt(1), big.NewInt(2),
		new(big.Int).Sub(q, big.NewInt(1)), new(big.Int).Sub(q, big.NewInt(2)),
		new(big.Int).Rsh(q, 1),                                  // (q-1)/2
		new(big.Int).Add(new(big.Int).Rsh(q, 1), big.NewInt(1)), // (q+1)/2
		new(big.Int).Sub(new(big.Int).Rsh(q, 1), big.NewInt(1)),
	}
	for _, e := range []int{63, 64, 127, 128, 191, 192, 254} {
		for _, d := range []int64{-1, 0, 1} {
			cands = append(cands, new(big.Int).Add(pow2Big(e), big.NewInt(d)))
		}
	}
	var out []Elem
	for _, c := range cands {
		if c.Sign() >= 0 && c.Cmp(q) < 0 {
			out = append(out, fromBig(c))
		}
	}
	return out
}

func TestFieldAgainstBig(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		t.Run(tf.name, func(t *testing.T) {
			t.Parallel()
			q := qBig(f)
			r := seeded(11)
			edges := edgeElems(f)
			pick := func(i int) Elem {
				// One operand in eight is an edge value.
				if i%8 == 0 {
					return edges[(i/8)%len(edges)]
				}
				return mustRandom(t, f, r)
			}
			// Every pair of edge values, then random cases.
			var as, bs []Elem
			for _, a := range edges {
				for _, b := range edges {
					as, bs = append(as, a), append(bs, b)
				}
			}
			for i := range tf.cases {
				as, bs = append(as, pick(i)), append(bs, pick(i*7+3))
			}
			ab, bb := new(big.Int), new(big.Int)
			want := new(big.Int)
			for i := range as {
				a, b := as[i], bs[i]
				ab.Set(toBig(a))
				bb.Set(toBig(b))
				check := func(op string, got Elem, w *big.Int) {
					t.Helper()
					if got != fromBig(w) {
						t.Fatalf("%s(%s, %s) = %s, want %s", op, ab, bb, toBig(got), w)
					}
				}
				check("Add", f.Add(a, b), want.Mod(want.Add(ab, bb), q))
				check("Sub", f.Sub(a, b), want.Mod(want.Sub(ab, bb), q))
				check("Mul", f.Mul(a, b), want.Mod(want.Mul(ab, bb), q))
				check("Neg", f.Neg(a), want.Mod(want.Neg(ab), q))
				// Float64 of the centered value, correctly rounded, at the
				// pendulum's output scale 2^(2l) = 2^18.
				fw, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(centeredBig(f, a)), -18).Float64()
				if got := f.Float64(a, 18); got != fw {
					t.Fatalf("Float64(%s, 18) = %v, want %v", ab, got, fw)
				}
				var z Elem
				f.AddTo(&z, &a, &b)
				check("AddTo", z, want.Mod(want.Add(ab, bb), q))
				z = a
				f.SubTo(&z, &z, &b) // aliasing
				check("SubTo", z, want.Mod(want.Sub(ab, bb), q))
				z = b
				f.MulTo(&z, &a, &z)
				check("MulTo", z, want.Mod(want.Mul(ab, bb), q))
			}
		})
	}
}

// TestFieldCenteredAgainstBig covers the readings of the centered value:
// Int64, CenteredLow64, IsNeg, InSigned, RoundShift, Float64 and String.
func TestFieldCenteredAgainstBig(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		t.Run(tf.name, func(t *testing.T) {
			t.Parallel()
			r := seeded(12)
			vals := edgeElems(f)
			// Small magnitudes exercise Int64 and the signed ranges.
			for _, v := range []int64{0, 1, -1, 2, -2, 255, -256, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
				vals = append(vals, f.FromInt64(v))
			}
			for i := range tf.cases / 10 {
				a := mustRandom(t, f, r)
				if i%2 == 1 {
					// A random value of random bit length, either sign.
					n := int(a[0]%uint64(f.BitLen()-1)) + 1
					a = elemOf(f, new(big.Int).Rsh(centeredBig(f, a), uint(f.BitLen()-n)))
				}
				vals = append(vals, a)
			}
			mask64 := new(big.Int).SetUint64(math.MaxUint64)
			for _, a := range vals {
				c := centeredBig(f, a)
				if got, ok := f.Int64(a); ok != c.IsInt64() || (ok && got != c.Int64()) {
					t.Fatalf("Int64(%s) = %d, %v", c, got, ok)
				}
				if got, want := f.CenteredLow64(a), new(big.Int).And(c, mask64).Uint64(); got != want {
					t.Fatalf("CenteredLow64(%s) = %#x, want %#x", c, got, want)
				}
				if got := f.IsNeg(a); got != (c.Sign() < 0) {
					t.Fatalf("IsNeg(%s) = %v", c, got)
				}
				if got := f.String(a); got != c.String() {
					t.Fatalf("String(%s) = %q", c, got)
				}
				for _, k := range []int{1, 2, 9, 18, 63, 64, 65, 100, 126, 127, 128, f.BitLen() - 1, f.BitLen(), 300} {
					lim := pow2Big(k - 1)
					want := c.Cmp(new(big.Int).Neg(lim)) >= 0 && c.Cmp(lim) < 0
					if got := f.InSigned(a, k); got != want {
						t.Fatalf("InSigned(%s, %d) = %v, want %v", c, k, got, want)
					}
				}
				for _, l := range []int{0, 1, 2, 9, 16, 40, 62, 63, 64, 65, 128, 200, 254, 255, 256, 300} {
					want := c
					if l > 0 {
						want = roundBig(c, l)
					}
					if got := f.RoundShift(a, l); got != elemOf(f, want) {
						t.Fatalf("RoundShift(%s, %d) = %s, want %s", c, l, centeredBig(f, got), want)
					}
				}
				for _, scale := range []int{0, 9, 18, 64, 127, 254} {
					want, _ := new(big.Float).SetMantExp(new(big.Float).SetInt(c), -scale).Float64()
					if got := f.Float64(a, scale); got != want {
						t.Fatalf("Float64(%s, %d) = %v, want %v (correctly rounded)", c, scale, got, want)
					}
				}
				if got := f.Dcd(a, 9); got != f.Float64(a, 9) {
					t.Fatalf("Dcd(%s, 9) = %v, want Float64", c, got)
				}
			}
		})
	}
}

// TestFloat64Rounding pins the correctly rounded conversion at ties and
// just past them, where summing limbs in float64 rounds twice.
func TestFloat64Rounding(t *testing.T) {
	f := mustField(t, PresetP25519)
	for _, tc := range []struct {
		v    *big.Int
		want float64
	}{
		// 2^64 + 2^11 + 1 is just above the tie between 2^64 and 2^64 + 2^12.
		{new(big.Int).Add(pow2Big(64), big.NewInt(1<<11+1)), 0x1p64 + 0x1p12},
		// 2^64 + 2^11 exactly is a tie: round half to even gives 2^64.
		{new(big.Int).Add(pow2Big(64), big.NewInt(1<<11)), 0x1p64},
		// 2^200 + 2^147 + 1: tie broken by a bit far below the top 64.
		{new(big.Int).Add(new(big.Int).Add(pow2Big(200), pow2Big(147)), big.NewInt(1)), 0x1p200 + 0x1p148},
		{new(big.Int).Add(pow2Big(200), pow2Big(147)), 0x1p200},
	} {
		for _, sign := range []int64{1, -1} {
			v := new(big.Int).Mul(tc.v, big.NewInt(sign))
			if got := f.Float64(elemOf(f, v), 0); got != float64(sign)*tc.want {
				t.Errorf("Float64(%s) = %v, want %v", v, got, float64(sign)*tc.want)
			}
		}
	}
}

func TestFieldEncodingAgainstBig(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		t.Run(tf.name, func(t *testing.T) {
			q := qBig(f)
			n := f.ByteLen()
			if want := (q.BitLen() + 7) / 8; n != want {
				t.Fatalf("ByteLen = %d, want %d", n, want)
			}
			r := seeded(13)
			vals := edgeElems(f)
			for range 1000 {
				vals = append(vals, mustRandom(t, f, r))
			}
			buf := make([]byte, n)
			for _, a := range vals {
				f.PutElem(buf, a)
				want := toBig(a).FillBytes(make([]byte, n)) // big endian
				for i := range want {
					if buf[i] != want[n-1-i] {
						t.Fatalf("PutElem(%s) = %x, want little-endian %x", toBig(a), buf, want)
					}
				}
				got, err := f.ElemFromBytes(buf)
				if err != nil || got != a {
					t.Fatalf("ElemFromBytes(PutElem(%s)) = %s, %v", toBig(a), toBig(got), err)
				}
			}
			// q itself, q + 1 and the all-ones string are not elements.
			for _, bad := range []*big.Int{q, new(big.Int).Add(q, big.NewInt(1)), new(big.Int).Sub(pow2Big(8*n), big.NewInt(1))} {
				b := bad.FillBytes(make([]byte, n))
				for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
					b[i], b[j] = b[j], b[i]
				}
				if _, err := f.ElemFromBytes(b); !errors.Is(err, ErrEncoding) {
					t.Errorf("ElemFromBytes(%s) error = %v, want ErrEncoding", bad, err)
				}
			}
		})
	}
}

// TestFieldConstants re-derives every precomputed constant with math/big.
func TestFieldConstants(t *testing.T) {
	m127 := new(big.Int).Sub(pow2Big(127), big.NewInt(1))
	p25519 := new(big.Int).Sub(pow2Big(255), big.NewInt(19))
	for _, tc := range []struct {
		name string
		q    *big.Int
		kind fieldKind
	}{
		{PresetM127, m127, kindM127},
		{PresetP25519, p25519, kindP25519},
		{m127.String(), m127, kindM127}, // the decimal spelling finds the preset
		{p25519.String(), p25519, kindP25519},
	} {
		f := mustField(t, tc.name)
		if f.Modulus() != fromBig(tc.q) || f.kind != tc.kind {
			t.Errorf("ParseModulus(%q) = %s (kind %d), want %s (kind %d)", tc.name, toBig(f.Modulus()), f.kind, tc.q, tc.kind)
		}
		if want := map[fieldKind]string{kindM127: PresetM127, kindP25519: PresetP25519}[tc.kind]; f.Name() != want {
			t.Errorf("ParseModulus(%q).Name() = %q, want %q", tc.name, f.Name(), want)
		}
	}
	// The reduction identities reduce.go relies on.
	for _, id := range []struct {
		what     string
		got, mod *big.Int
		want     int64
	}{
		{"2^127 mod 2^127-1", pow2Big(127), m127, 1},
		{"2^128 mod 2^127-1", pow2Big(128), m127, 2},
		{"2^255 mod 2^255-19", pow2Big(255), p25519, 19},
		{"2^256 mod 2^255-19", pow2Big(256), p25519, 38},
	} {
		if got := new(big.Int).Mod(id.got, id.mod); got.Int64() != id.want {
			t.Errorf("%s = %s, want %d", id.what, got, id.want)
		}
	}
	if m63 != 1<<63-1 {
		t.Errorf("m63 = %#x", uint64(m63))
	}

	R := pow2Big(256)
	for _, tf := range bigFields(t) {
		f := tf.f
		q := qBig(f)
		name := tf.name
		if got, want := f.Half(), fromBig(new(big.Int).Rsh(q, 1)); got != want {
			t.Errorf("%s: Half = %s, want (q-1)/2", name, toBig(got))
		}
		if f.BitLen() != q.BitLen() {
			t.Errorf("%s: BitLen = %d, want %d", name, f.BitLen(), q.BitLen())
		}
		// log2 q from the top 60 bits of q with big.Float.
		mant := new(big.Float).SetMantExp(new(big.Float).SetInt(q), -q.BitLen())
		m, _ := mant.Float64()
		if want := math.Log2(m) + float64(q.BitLen()); math.Abs(f.Log2()-want) > 1e-12 {
			t.Errorf("%s: Log2 = %v, want %v", name, f.Log2(), want)
		}
		if f.Log2() < float64(f.BitLen()-1) || f.Log2() > float64(f.BitLen()) {
			t.Errorf("%s: Log2 = %v outside [BitLen-1, BitLen]", name, f.Log2())
		}
		// m0inv = -q^-1 mod 2^64: q m0inv = -1 mod 2^64.
		if f.Modulus()[0]*f.m0inv != math.MaxUint64 {
			t.Errorf("%s: q m0inv = %#x mod 2^64, want -1", name, f.Modulus()[0]*f.m0inv)
		}
		for i, c := range []struct {
			got Elem
			e   int
		}{{f.r1, 1}, {f.r2, 2}, {f.r3, 3}} {
			want := new(big.Int).Mod(new(big.Int).Exp(R, big.NewInt(int64(c.e)), nil), q)
			if c.got != fromBig(want) {
				t.Errorf("%s: r%d = %s, want R^%d mod q = %s", name, i+1, toBig(c.got), c.e, want)
			}
		}
		for _, e := range []int{0, 1, 2, 9, 63, 64, 100, f.BitLen() - 2, f.BitLen() - 1, f.BitLen(), 300} {
			if got, want := f.Pow2(e), new(big.Int).Mod(pow2Big(e), q); got != fromBig(want) {
				t.Errorf("%s: Pow2(%d) = %s, want %s", name, e, toBig(got), want)
			}
			inv := new(big.Int).ModInverse(new(big.Int).Mod(pow2Big(e), q), q)
			if got := f.InvPow2(e); got != fromBig(inv) {
				t.Errorf("%s: InvPow2(%d) = %s, want %s", name, e, toBig(got), inv)
			}
			if got := f.Mul(f.InvPow2(e), f.Pow2(e)); got != f.One() {
				t.Errorf("%s: InvPow2(%d) 2^%d = %s, want 1", name, e, e, toBig(got))
			}
		}
		if f.Zero() != (Elem{}) || f.One() != (Elem{1}) {
			t.Errorf("%s: Zero, One = %v, %v", name, f.Zero(), f.One())
		}
	}
}

func TestParseModulus(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string // decimal q, or "" for an error
		err     error
		message string // substring of the error
	}{
		{in: PresetM127, want: "170141183460469231731687303715884105727"},
		{in: " 2^255-19 ", want: new(big.Int).Sub(pow2Big(255), big.NewInt(19)).String()},
		{in: "3", want: "3"},
		{in: "15", want: "15"},
		{in: "0065535", want: "65535"},
		{in: new(big.Int).Sub(pow2Big(255), big.NewInt(1)).String(), want: new(big.Int).Sub(pow2Big(255), big.NewInt(1)).String()},
		{in: "1", err: ErrModulus, message: "at least 3"},
		{in: "0", err: ErrEvenModulus},
		{in: "2", err: ErrEvenModulus, message: "2 is even"},
		{in: "340282366920938463463374607431768211456", err: ErrEvenModulus}, // 2^128
		{in: new(big.Int).Add(pow2Big(255), big.NewInt(1)).String(), err: ErrModulus, message: "256 bits"},
		{in: new(big.Int).Add(pow2Big(256), big.NewInt(1)).String(), err: ErrModulus, message: "more than 255 bits"},
		{in: strings.Repeat("9", 100), err: ErrModulus, message: "more than 255 bits"},
		{in: "", err: ErrModulus, message: "empty"},
		{in: "12a5", err: ErrModulus, message: `character 2 ('a')`},
		{in: "-7", err: ErrModulus, message: `('-')`},
		{in: "2^127", err: ErrModulus, message: `('^')`},
		{in: "0x11", err: ErrModulus, message: `('x')`},
		{in: "1 7", err: ErrModulus, message: `(' ')`},
	} {
		f, err := ParseModulus(tc.in)
		if tc.err == nil {
			if err != nil {
				t.Errorf("ParseModulus(%q): %v", tc.in, err)
			} else if got := toBig(f.Modulus()).String(); got != tc.want {
				t.Errorf("ParseModulus(%q) = %s, want %s", tc.in, got, tc.want)
			}
			continue
		}
		if !errors.Is(err, tc.err) || !strings.Contains(fmt.Sprint(err), tc.message) || !strings.HasPrefix(fmt.Sprint(err), "mpc: ") {
			t.Errorf("ParseModulus(%q) error = %v, want %v containing %q", tc.in, err, tc.err, tc.message)
		}
	}
	// NewField applies the same rules to limbs.
	for _, tc := range []struct {
		q   Elem
		err error
	}{
		{Elem{}, ErrEvenModulus},
		{Elem{1}, ErrModulus},
		{Elem{4}, ErrEvenModulus},
		{Elem{1, 0, 0, 1 << 63}, ErrModulus}, // 2^255 + 1
		{Elem{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}, ErrModulus},
	} {
		if _, err := NewField(tc.q); !errors.Is(err, tc.err) {
			t.Errorf("NewField(%s) error = %v, want %v", toBig(tc.q), err, tc.err)
		}
	}
}

// FuzzElemFromBytes: decoding never panics, accepts exactly the encodings of
// values below q, and re-encoding an accepted element gives the input back.
func FuzzElemFromBytes(f *testing.F) {
	fields := []*Field{mustField(f, PresetM127), mustField(f, PresetP25519), mustFieldQ(f, oddModulus(100, 2)), mustFieldQ(f, Elem{65535})}
	for _, fd := range fields {
		f.Add(make([]byte, fd.ByteLen()))
		b := make([]byte, fd.ByteLen())
		fd.PutElem(b, fd.Neg(fd.One()))
		f.Add(b)
		f.Add(bytes.Repeat([]byte{0xff}, fd.ByteLen()))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, fd := range fields {
			a, err := fd.ElemFromBytes(b)
			x := new(big.Int).SetBytes(reversed(b))
			valid := len(b) == fd.ByteLen() && x.Cmp(qBig(fd)) < 0
			if valid != (err == nil) {
				t.Fatalf("q=%s: ElemFromBytes(%x): err %v, want valid=%v", fd.Name(), b, err, valid)
			}
			if err != nil {
				if !errors.Is(err, ErrEncoding) {
					t.Fatalf("error %v is not ErrEncoding", err)
				}
				continue
			}
			out := make([]byte, fd.ByteLen())
			fd.PutElem(out, a)
			if !bytes.Equal(out, b) {
				t.Fatalf("q=%s: PutElem(ElemFromBytes(%x)) = %x", fd.Name(), b, out)
			}
		}
	})
}

func reversed(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return r
}

// FuzzParseModulus: parsing never panics; an accepted decimal modulus is the
// number written, odd, 3 <= q < 2^255; a rejected one wraps a sentinel.
func FuzzParseModulus(f *testing.F) {
	for _, s := range []string{"2^127-1", "2^255-19", "3", "1", "0", "15", "12a5", "", " 7 ", "-3", "65535",
		"57896044618658097711785492504343953926634992332820282019728792003956564819967",
		"57896044618658097711785492504343953926634992332820282019728792003956564819969"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fd, err := ParseModulus(s)
		if err != nil {
			if !errors.Is(err, ErrModulus) && !errors.Is(err, ErrEvenModulus) {
				t.Fatalf("ParseModulus(%q): error %v wraps no sentinel", s, err)
			}
			return
		}
		q := qBig(fd)
		if q.Bit(0) != 1 || q.Cmp(big.NewInt(3)) < 0 || q.BitLen() > MaxModulusBits {
			t.Fatalf("ParseModulus(%q) accepted %s", s, q)
		}
		trimmed := strings.TrimSpace(s)
		if trimmed == PresetM127 || trimmed == PresetP25519 {
			return
		}
		if want, ok := new(big.Int).SetString(trimmed, 10); !ok || want.Cmp(q) != 0 || strings.ContainsAny(trimmed, "+-_") {
			t.Fatalf("ParseModulus(%q) = %s", s, q)
		}
	})
}

package codec

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// fastTypes are the payload types with a fast path.
var fastTypes = []reflect.Type{
	reflect.TypeFor[MeasurePayload](), reflect.TypeFor[MulPayload](), reflect.TypeFor[TruncPayload](),
	reflect.TypeFor[OutputPayload](), reflect.TypeFor[TickPayload](), reflect.TypeFor[ItemMsg](),
	reflect.TypeFor[MaterialPayload](), reflect.TypeFor[PlantReadPayload](), reflect.TypeFor[PlantYPayload](), reflect.TypeFor[PlantUPayload](),
	reflect.TypeFor[MatrixWire](), reflect.TypeFor[StateRecord](),
	reflect.TypeFor[MaskYPayload](), reflect.TypeFor[MeasureMaskedPayload](),
}

// TestFastTypesComplete checks that exactly the fastTypes have a fast path,
// by value and by pointer, among all the payload types.
func TestFastTypesComplete(t *testing.T) {
	fast := make(map[reflect.Type]bool)
	for _, typ := range fastTypes {
		fast[typ] = true
	}
	for _, v := range samplePayloads(t) {
		typ := reflect.TypeOf(v).Elem()
		_, enc := reflect.Zero(typ).Interface().(fastEncoder)
		_, encPtr := v.(fastEncoder)
		_, dec := v.(fastDecoder)
		if enc != fast[typ] || encPtr != fast[typ] || dec != fast[typ] {
			t.Errorf("%v: fast encoder %v (pointer %v), decoder %v; want %v", typ, enc, encPtr, dec, fast[typ])
		}
	}
}

// checkPaths decodes data as typ through the fast path and the reflection
// path; both must accept, or both reject with the same sentinel, and accepted
// values must be equal and re-encode to data through both Marshals.
func checkPaths(t testing.TB, typ reflect.Type, data []byte) (accepted bool) {
	t.Helper()
	fast, slow := reflect.New(typ).Interface(), reflect.New(typ).Interface()
	fastErr, slowErr := Unmarshal(data, fast), unmarshalReflect(data, slow)
	if (fastErr == nil) != (slowErr == nil) || Reason(fastErr) != Reason(slowErr) {
		t.Fatalf("%v: %x\nfast path: %v\nreflection: %v", typ, data, fastErr, slowErr)
	}
	if fastErr != nil {
		if !strings.HasPrefix(fastErr.Error(), "codec: ") {
			t.Fatalf("%v: %q lacks the prefix", typ, fastErr)
		}
		return false
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%v: %x\nfast path decodes %+v\nreflection %+v", typ, data, fast, slow)
	}
	checkMarshal(t, fast)
	if b, _ := Marshal(fast); !bytes.Equal(b, data) {
		t.Fatalf("%v: decode-then-encode differs:\n got %x\nwant %x", typ, b, data)
	}
	return true
}

// checkMarshal compares Marshal with the reflection path on v and on the
// value *v, and checks that the fast path sizes its output exactly.
func checkMarshal(t testing.TB, v any) []byte {
	t.Helper()
	want, wantErr := marshalReflect(v)
	for _, x := range []any{v, reflect.ValueOf(v).Elem().Interface()} {
		got, err := Marshal(x)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) || Reason(err) != Reason(wantErr) {
			t.Fatalf("Marshal(%T) = %x, %v\nreflection: %x, %v", x, got, err, want, wantErr)
		}
		if err == nil && cap(got) != len(got) {
			t.Fatalf("Marshal(%T): %d bytes in a buffer of %d", x, len(got), cap(got))
		}
	}
	return want
}

// gen draws payload values, favouring the boundaries between encodings.
type gen struct{ *rand.Rand }

func (g gen) uint64() uint64 {
	edges := []uint64{0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff, 1 << 32, math.MaxInt64, 1<<63 + 1, math.MaxUint64}
	if g.IntN(2) == 0 {
		return edges[g.IntN(len(edges))]
	}
	return g.Uint64() >> g.IntN(64)
}

// instance draws a payload's Inc and Peer, each zero (omitted) half the
// time.
func (g gen) instance() (inc, peer uint64) {
	if g.IntN(2) == 0 {
		inc = g.uint64()
	}
	if g.IntN(2) == 0 {
		peer = g.uint64()
	}
	return inc, peer
}

func (g gen) int64() int64 {
	edges := []int64{0, 127, 128, -1, -32, -33, -128, -129, math.MinInt16, math.MinInt16 - 1, math.MinInt32, math.MinInt32 - 1, math.MinInt64, math.MaxInt64}
	switch g.IntN(3) {
	case 0:
		return edges[g.IntN(len(edges))]
	case 1:
		return -int64(g.Uint64() >> (1 + g.IntN(63)))
	}
	return int64(g.Uint64() >> (1 + g.IntN(63)))
}

func (g gen) uint32() uint32 { return uint32(g.uint64()) }

func (g gen) length() int {
	edges := []int{0, 1, 15, 16, 31, 32, 255, 256}
	if g.IntN(2) == 0 {
		return edges[g.IntN(len(edges))]
	}
	return g.IntN(200)
}

func (g gen) bytes() []byte {
	switch g.IntN(8) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, g.length())
	for i := range b {
		b[i] = byte(g.Uint32())
	}
	return b
}

func (g gen) matrix() MatrixWire {
	return MatrixWire{Rows: g.uint32(), Cols: g.uint32(), Data: g.bytes()}
}

func (g gen) loop() string {
	const alphabet = "abcXYZ019_-"
	n := []int{0, 1, 8, 31, 32, 64, 65, 255, 256}[g.IntN(9)]
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.IntN(len(alphabet))]
	}
	if n > 0 && g.IntN(8) == 0 {
		b[g.IntN(n)] = byte(g.Uint32()) // most likely not a loop id
	}
	return string(b)
}

func (g gen) floats() []float64 {
	switch g.IntN(8) {
	case 0:
		return nil
	case 1:
		return []float64{}
	}
	x := make([]float64, []int{1, 2, 15, 16, 17, 40}[g.IntN(6)])
	for i := range x {
		if g.IntN(16) == 0 {
			x[i] = math.Float64frombits(g.Uint64()) // sometimes NaN or infinite
		} else {
			x[i] = g.NormFloat64() * 100
		}
	}
	return x
}

func (g gen) nonce() (n [16]byte) {
	for i := range n {
		n[i] = byte(g.Uint32())
	}
	return n
}

// value returns a random value of the i-th fast type, as a pointer.
func (g gen) value(i int) any {
	switch fastTypes[i] {
	case reflect.TypeFor[MeasurePayload]():
		return &MeasurePayload{Y: g.matrix(), SentUnixNano: g.int64()}
	case reflect.TypeFor[MulPayload]():
		inc, peer := g.instance()
		var serial Serial
		if g.IntN(2) == 0 {
			serial = g.nonce()
		}
		return &MulPayload{Item: g.uint64(), Version: g.uint64(), S: g.matrix(), T: g.matrix(), Inc: inc, Peer: peer, Serial: serial}
	case reflect.TypeFor[TruncPayload]():
		inc, peer := g.instance()
		return &TruncPayload{Item: g.uint64(), Y: g.matrix(), Inc: inc, Peer: peer}
	case reflect.TypeFor[MaskYPayload]():
		return &MaskYPayload{Item: g.uint64(), V: g.matrix(), Epoch: g.uint64()}
	case reflect.TypeFor[MeasureMaskedPayload]():
		return &MeasureMaskedPayload{Item: g.uint64(), T: g.matrix(), SentUnixNano: g.int64()}
	case reflect.TypeFor[OutputPayload]():
		return &OutputPayload{Item: g.uint64(), U: g.matrix(), SentUnixNano: g.int64()}
	case reflect.TypeFor[TickPayload]():
		return &TickPayload{SentUnixNano: g.int64()}
	case reflect.TypeFor[ItemMsg]():
		return &ItemMsg{Loop: g.loop(), Epoch: g.uint64(), Nonce: g.nonce(), P0: g.bytes(), P1: g.bytes()}
	case reflect.TypeFor[MaterialPayload]():
		return &MaterialPayload{Nonce: g.nonce(), U: g.matrix(), V: g.matrix(), W: g.matrix(), M: g.matrix(), L: g.matrix()}
	case reflect.TypeFor[PlantReadPayload]():
		return &PlantReadPayload{Epoch: g.uint64()}
	case reflect.TypeFor[PlantYPayload]():
		return &PlantYPayload{Y: g.floats(), Epoch: g.uint64()}
	case reflect.TypeFor[PlantUPayload]():
		return &PlantUPayload{U: g.floats(), FailSafe: g.IntN(2) == 0, Epoch: g.uint64()}
	case reflect.TypeFor[MatrixWire]():
		m := g.matrix()
		return &m
	case reflect.TypeFor[StateRecord]():
		r := &StateRecord{Instance: g.uint64(), Epoch: g.uint64(), Version: g.uint64(), Tick: g.uint64(), HWM: g.uint64(),
			X: g.matrix(), Prev: g.matrix(), HasPrev: g.IntN(2) == 0}
		if g.IntN(2) == 0 {
			r.HWMIdx = g.uint64()
		}
		if b := g.bytes(); len(b) > 0 { // empty is omitted, and read back as nil
			r.Serials = b
		}
		return r
	}
	panic("no generator for " + fastTypes[i].String())
}

// mutate returns a copy of b with one random edit, favouring the bytes that
// switch between MessagePack forms.
func (g gen) mutate(b []byte) []byte {
	b = bytes.Clone(b)
	codes := []byte{0x00, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x9f, 0xa0, 0xa1, 0xbf, mpNil, 0xc1, mpFalse, mpTrue,
		mpBin8, mpBin16, mpBin32, 0xca, mpFloat64, mpUint8, mpUint16, mpUint32, mpUint64,
		mpInt8, mpInt16, mpInt32, mpInt64, mpStr8, mpStr16, mpStr32, mpArray16, mpArray32, 0xde, 0xdf, 0xe0, 0xff}
	if len(b) == 0 {
		return append(b, codes[g.IntN(len(codes))])
	}
	i := g.IntN(len(b))
	switch g.IntN(8) {
	case 0:
		b[i] ^= 1 << g.IntN(8)
	case 1:
		b[i] = codes[g.IntN(len(codes))]
	case 2:
		b[i] = byte(g.Uint32())
	case 3:
		b = b[:i]
	case 4:
		b = append(b, codes[g.IntN(len(codes))])
	case 5:
		b = append(b[:i], b[i+1:]...)
	case 6:
		b = append(b[:i], append([]byte{codes[g.IntN(len(codes))]}, b[i:]...)...)
	default:
		b[i]++
	}
	return b
}

// token is one MessagePack value, or the header of a map or an array, at
// data[off:end]; c is its first byte.
type token struct {
	off, end int
	c        byte
}

// tokenize splits a well-formed encoding into tokens, depth first.
func tokenize(t testing.TB, data []byte) []token {
	var toks []token
	r := reader{b: data}
	var walk func()
	walk = func() {
		at := r.off
		c, err := r.byte1("token")
		if err != nil {
			t.Fatal(err)
		}
		n, items := 0, 0
		switch {
		case c < 0x80 || c >= mpNegFix || c == mpNil || c == mpFalse || c == mpTrue:
		case c&0xf0 == mpFixMap:
			items = 2 * int(c&0x0f)
		case c&0xf0 == mpFixArray:
			items = int(c & 0x0f)
		case c&0xe0 == mpFixStr:
			n = int(c & 0x1f)
		case c == mpBin8 || c == mpStr8:
			l, _ := r.be("len", 1)
			n = int(l)
		case c == mpBin16 || c == mpStr16 || c == mpArray16:
			l, _ := r.be("len", 2)
			n = int(l)
		case c == mpBin32 || c == mpStr32 || c == mpArray32:
			l, _ := r.be("len", 4)
			n = int(l)
		case c == mpFloat64:
			n = 8
		case c >= mpUint8 && c <= mpUint64:
			n = 1 << (c - mpUint8)
		case c >= mpInt8 && c <= mpInt64:
			n = 1 << (c - mpInt8)
		default:
			t.Fatalf("tokenize: unexpected type 0x%02x", c)
		}
		if c == mpArray16 || c == mpArray32 {
			n, items = 0, n
		}
		if _, err := r.take("token", n); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, token{at, r.off, c})
		for range items {
			walk()
		}
	}
	walk()
	return toks
}

// widen returns the encodings of tok's value in every wider form than the
// canonical one; all of them are valid MessagePack that must be refused.
func widen(data []byte, tok token) [][]byte {
	v := data[tok.off:tok.end]
	c := tok.c
	var forms [][]byte
	uintForms := func(u uint64, from byte) {
		for code := from; code <= mpUint64; code++ {
			forms = append(forms, binary.BigEndian.AppendUint64(nil, u)[8-(1<<(code-mpUint8)):])
			forms[len(forms)-1] = append([]byte{code}, forms[len(forms)-1]...)
		}
	}
	intForms := func(i int64, from byte) {
		for code := from; code <= mpInt64; code++ {
			forms = append(forms, append([]byte{code}, binary.BigEndian.AppendUint64(nil, uint64(i))[8-(1<<(code-mpInt8)):]...))
		}
	}
	lenForms := func(n int, payload []byte, codes ...byte) {
		for _, code := range codes {
			b := []byte{code}
			switch code {
			case mpStr8, mpBin8:
				b = append(b, byte(n))
			case mpStr16, mpBin16, mpArray16, 0xde:
				b = binary.BigEndian.AppendUint16(b, uint16(n))
			default:
				b = binary.BigEndian.AppendUint32(b, uint32(n))
			}
			forms = append(forms, append(b, payload...))
		}
	}
	switch {
	case c < 0x80:
		uintForms(uint64(c), mpUint8)
		intForms(int64(c), mpInt8)
	case c >= mpUint8 && c <= mpUint64:
		u, _ := (&reader{b: v}).uint("")
		uintForms(u, c+1)
		if u <= math.MaxInt64 {
			intForms(int64(u), mpInt8+min(c-mpUint8+1, 3))
		}
	case c >= mpNegFix:
		intForms(int64(int8(c)), mpInt8)
	case c >= mpInt8 && c <= mpInt64:
		r := reader{b: v[1:]}
		u, _ := r.be("", 1<<(c-mpInt8))
		shift := 64 - 8*(1<<(c-mpInt8))
		intForms(int64(u<<shift)>>shift, c+1)
	case c&0xe0 == mpFixStr:
		lenForms(int(c&0x1f), v[1:], mpStr8, mpStr16, mpStr32)
	case c == mpStr8:
		lenForms(len(v)-2, v[2:], mpStr16, mpStr32)
	case c == mpStr16:
		lenForms(len(v)-3, v[3:], mpStr32)
	case c == mpBin8:
		lenForms(len(v)-2, v[2:], mpBin16, mpBin32)
	case c == mpBin16:
		lenForms(len(v)-3, v[3:], mpBin32)
	case c&0xf0 == mpFixArray:
		lenForms(int(c&0x0f), nil, mpArray16, mpArray32)
	case c == mpArray16:
		n, _ := (&reader{b: v[1:]}).be("", 2)
		lenForms(int(n), nil, mpArray32)
	case c&0xf0 == mpFixMap:
		lenForms(int(c&0x0f), nil, 0xde, 0xdf)
	}
	out := make([][]byte, len(forms))
	for i, f := range forms {
		out[i] = append(append(bytes.Clone(data[:tok.off]), f...), data[tok.end:]...)
	}
	return out
}

// substitute replaces tok with a random well-formed value: another integer,
// binary, string, nil, boolean, float or empty container.
func (g gen) substitute(data []byte, tok token) []byte {
	var f []byte
	switch g.IntN(9) {
	case 0:
		f = appendUint(nil, g.uint64())
	case 1:
		f = appendInt(nil, -1-int64(g.Uint64()>>(1+g.IntN(63))))
	case 2:
		f = appendBin(nil, g.bytes())
	case 3:
		f = appendStr(nil, g.loop())
	case 4:
		f = []byte{mpNil}
	case 5:
		f = appendBool(nil, g.IntN(2) == 0)
	case 6:
		f = binary.BigEndian.AppendUint64([]byte{mpFloat64}, g.Uint64())
	case 7:
		f = []byte{mpFixArray}
	default:
		f = []byte{mpFixMap}
	}
	return append(append(bytes.Clone(data[:tok.off]), f...), data[tok.end:]...)
}

// TestFastPathMatchesReflection is the differential test: for random values
// of every fast type, Marshal must equal the reflection path byte for byte,
// and the two Unmarshal paths must agree on the encoding, on every wider
// encoding of each of its values, on the library's default (non-compact)
// encoding of the same value, on random substitutions of single values and
// on random byte edits, also when decoding as another type.
func TestFastPathMatchesReflection(t *testing.T) {
	g := gen{rand.New(rand.NewChaCha8([32]byte{12}))}
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	for range rounds {
		for i, typ := range fastTypes {
			v := g.value(i)
			data := checkMarshal(t, v)
			checkPaths(t, typ, data)
			toks := tokenize(t, data)
			for _, tok := range toks {
				for _, b := range widen(data, tok) {
					if checkPaths(t, typ, b) {
						t.Fatalf("%v: accepted the wider form %x of %x", typ, b, data)
					}
				}
			}
			lax, err := msgpack.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			checkPaths(t, typ, lax)
			for range 10 {
				for _, b := range [][]byte{g.substitute(data, toks[g.IntN(len(toks))]), g.mutate(data), g.mutate(lax), g.mutate(g.mutate(data))} {
					checkPaths(t, typ, b)
					checkPaths(t, fastTypes[g.IntN(len(fastTypes))], b)
				}
			}
		}
	}
}

// TestFastPathEdges covers what the random values miss: the 16- and 32-bit
// length forms, the largest payloads, nil pointers and the sample payloads.
func TestFastPathEdges(t *testing.T) {
	big := make([]byte, 70000)
	floats := make([]float64, 0x10000)
	vals := []any{
		&ItemMsg{Loop: "l", P0: big[:0xffff], P1: big[:0x10000]},
		&ItemMsg{Loop: strings.Repeat("l", 0x10000), P1: []byte{1}},
		&MulPayload{S: MatrixWire{Data: big[:0x100]}, T: MatrixWire{Data: big}},
		&PlantYPayload{Y: floats[:0xffff]},
		&PlantUPayload{U: floats},
		// The largest ItemMsg that fits, and one byte more.
		&ItemMsg{Loop: "l", P1: make([]byte, MaxEnvelope-(1+5+2+6+1+6+18+3+1+3+5))},
		&ItemMsg{Loop: "l", P1: make([]byte, MaxEnvelope-(1+5+2+6+1+6+18+3+1+3+5)+1)},
	}
	for _, v := range samplePayloads(t) {
		if _, ok := v.(fastDecoder); ok {
			vals = append(vals, v)
		}
	}
	for _, v := range vals {
		data := checkMarshal(t, v)
		if data == nil {
			continue // too large
		}
		valid := true
		if val, ok := v.(validator); ok {
			valid = val.validate() == nil
		}
		if got := checkPaths(t, reflect.TypeOf(v).Elem(), data); got != valid {
			t.Errorf("%T: accepted %v, want %v", v, got, valid)
		}
	}
	if n, err := Marshal(vals[5]); err != nil || len(n) != MaxEnvelope {
		t.Errorf("largest ItemMsg: %d bytes, %v", len(n), err)
	}
	// Nil pointers take the reflection path.
	for _, typ := range fastTypes {
		nilPtr := reflect.Zero(reflect.PointerTo(typ)).Interface()
		if !nilFast(nilPtr) {
			t.Errorf("nilFast(%T(nil)) = false", nilPtr)
		}
		got, err := Marshal(nilPtr)
		want, wantErr := marshalReflect(nilPtr)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("Marshal(%T(nil)) = %x, %v; reflection %x, %v", nilPtr, got, err, want, wantErr)
		}
		data, _ := Marshal(reflect.New(typ).Interface())
		if err, want := Unmarshal(data, nilPtr), unmarshalReflect(data, nilPtr); err == nil || Reason(err) != Reason(want) {
			t.Errorf("Unmarshal into %T(nil) = %v, reflection %v", nilPtr, err, want)
		}
	}
}

// TestUnmarshalFastCopies checks that decoded byte slices do not alias the
// input or each other, and that a failed decode leaves v unchanged.
func TestUnmarshalFastCopies(t *testing.T) {
	want := &MaterialPayload{Nonce: [16]byte{1}, U: MatrixWire{Rows: 1, Cols: 1, Data: []byte{1, 2}}, V: MatrixWire{Data: []byte{}},
		W: MatrixWire{Data: []byte{3}}, L: MatrixWire{Data: []byte{4, 5, 6}}}
	data := mustMarshal(t, want)
	var got MaterialPayload
	if err := Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	clear(data)
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("after clearing the input: %+v", got)
	}
	got.U.Data = append(got.U.Data, 0xee)
	got.V.Data = append(got.V.Data, 0xee)
	if !bytes.Equal(got.W.Data, want.W.Data) || got.M.Data != nil || !bytes.Equal(got.L.Data, want.L.Data) {
		t.Fatalf("appending to one field changed another: %+v", got)
	}

	item := ItemMsg{Loop: "keep", P1: []byte{7}}
	before := item
	bad := mustMarshal(t, &ItemMsg{Loop: "x", P1: []byte{1}})
	if err := Unmarshal(bad[:len(bad)-1], &item); err == nil || !reflect.DeepEqual(item, before) {
		t.Errorf("failed Unmarshal = %v and changed v to %+v", err, item)
	}
}

func TestFastPathAllocs(t *testing.T) {
	mul := &MulPayload{Item: 1 << 40, S: MatrixWire{Rows: 4, Cols: 5, Data: make([]byte, 320)}, T: MatrixWire{Rows: 5, Cols: 1, Data: make([]byte, 80)}}
	data := mustMarshal(t, mul)
	var got MulPayload
	for _, c := range []struct {
		name string
		fn   func() error
	}{
		{"Marshal", func() error { _, err := Marshal(mul); return err }},
		{"Unmarshal", func() error { return Unmarshal(data, &got) }},
	} {
		if n := testing.AllocsPerRun(100, func() {
			if err := c.fn(); err != nil {
				t.Fatal(err)
			}
		}); n != 1 {
			t.Errorf("%s(MulPayload) allocates %v times, want 1", c.name, n)
		}
	}
}

// A fast decoder leaves its target as it was when it refuses the input,
// here a valid encoding followed by a byte: the item message's decoder had
// already filled its target, with slices into the input, before it found
// the trailing byte.
func TestFastDecodersLeaveTargetOnError(t *testing.T) {
	g := gen{rand.New(rand.NewChaCha8([32]byte{13}))}
	for range 20 {
		for i, typ := range fastTypes {
			data, err := Marshal(g.value(i))
			if err != nil {
				t.Fatal(err)
			}
			target, zero := reflect.New(typ).Interface(), reflect.New(typ).Interface()
			if err := Unmarshal(append(data, 0xc0), target); err == nil {
				t.Fatalf("%v: a trailing byte accepted", typ)
			}
			if !reflect.DeepEqual(target, zero) {
				t.Fatalf("%v: the refused input was decoded into the target: %+v", typ, target)
			}
		}
	}
	// Input that parses but fails the type's own checks leaves the target
	// too: the checks come before it is written.
	for _, c := range []struct{ in, target any }{
		{&PlantYPayload{Y: []float64{math.NaN()}}, &PlantYPayload{}},
		{&PlantUPayload{U: []float64{math.Inf(1)}}, &PlantUPayload{}},
		{&ItemMsg{Loop: "offline", P0: []byte{1}, P1: []byte{2}}, &ItemMsg{}},
		{&ItemMsg{Loop: "a", P0: []byte{1}}, &ItemMsg{}},
	} {
		data, err := Marshal(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := Unmarshal(data, c.target); err == nil {
			t.Fatalf("%+v: accepted", c.in)
		}
		if zero := reflect.New(reflect.TypeOf(c.target).Elem()).Interface(); !reflect.DeepEqual(c.target, zero) {
			t.Fatalf("%+v: refused, but decoded into the target: %+v", c.in, c.target)
		}
	}
}

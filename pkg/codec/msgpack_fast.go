package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The fast path: the payloads sent every tick are encoded and parsed by hand,
// without reflection, into and from exactly the bytes the library produces
// with Marshal's settings. Their fields are unsigned and signed integers in
// their shortest form, binaries (nil as MessagePack nil), short strings,
// booleans, float64 arrays and nested MatrixWire maps, and each struct is a
// map of its msgpack tags in declaration order.
//
// A hand-written parser that accepts each field only in that one form is
// canonical by construction: whatever it accepts re-encodes to the input, so
// it needs neither the structural scan nor the re-encoding of the reflection
// path. TestFastPathMatchesReflection and FuzzUnmarshalPayloads check that
// both paths produce the same bytes and accept and reject the same inputs.

// fastEncoder is implemented, with value receivers, by every payload type on
// the fast path, so that both T and *T satisfy it without a copy.
type fastEncoder interface {
	// encodedLen is the exact length of the encoding.
	encodedLen() int
	appendMsgpack(b []byte) []byte
}

// fastDecoder is implemented by pointers to the same types.
type fastDecoder interface {
	// unmarshalMsgpack sets the receiver from data, which it does not alias,
	// and leaves it unchanged on error.
	unmarshalMsgpack(data []byte) error
}

// nilFast reports whether v is a nil pointer to a fast-path type: those take
// the reflection path, which encodes MessagePack nil and refuses to decode.
func nilFast(v any) bool {
	switch v {
	case (*MeasurePayload)(nil), (*MulPayload)(nil), (*TruncPayload)(nil),
		(*OutputPayload)(nil), (*TickPayload)(nil), (*ItemMsg)(nil),
		(*MaterialPayload)(nil), (*PlantReadPayload)(nil), (*PlantYPayload)(nil), (*PlantUPayload)(nil),
		(*MatrixWire)(nil), (*StateRecord)(nil), (*MaskYPayload)(nil), (*MeasureMaskedPayload)(nil):
		return true
	}
	return false
}

// unmarshalFast decodes data into v if v has a fast path (ok).
func unmarshalFast(data []byte, v any) (ok bool, err error) {
	d, ok := v.(fastDecoder)
	if !ok || nilFast(v) {
		return false, nil
	}
	return true, decoded(v, d.unmarshalMsgpack(data))
}

// decoded finishes a fast-path decode of v: the decoder's error, named with
// v's type. A fast decoder of a type with its own checks (validator) makes
// them before it writes v, so that a refused input leaves v as it was.
func decoded(v any, err error) error {
	if err != nil {
		return fmt.Errorf("%w (decoding %T)", err, v)
	}
	return nil
}

// Encoding. Each appendX has a matching xLen giving its exact length.

func keyLen(name string) int { return 1 + len(name) }

// appendKey writes a field name; every name here is shorter than 32 bytes.
func appendKey(b []byte, name string) []byte {
	return append(append(b, mpFixStr|byte(len(name))), name...)
}

func uintLen(v uint64) int {
	switch {
	case v < 0x80:
		return 1
	case v <= 0xff:
		return 2
	case v <= 0xffff:
		return 3
	case v <= 0xffffffff:
		return 5
	}
	return 9
}

func intLen(v int64) int {
	switch {
	case v >= 0:
		return uintLen(uint64(v))
	case v >= -32:
		return 1
	case v >= math.MinInt8:
		return 2
	case v >= math.MinInt16:
		return 3
	case v >= math.MinInt32:
		return 5
	}
	return 9
}

// appendInt writes v as the library does with compact integers: a
// non-negative value as unsigned, a negative one in the shortest signed form.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
}

func strLen(s string) int {
	n := len(s)
	switch {
	case n < 32:
		return 1 + n
	case n <= 0xff:
		return 2 + n
	case n <= 0xffff:
		return 3 + n
	}
	return 5 + n
}

func binLen(p []byte) int {
	if p == nil {
		return 1
	}
	return binHeaderLen(len(p)) + len(p)
}

// appendBin writes p as a binary, or nil if p is nil.
func appendBin(b, p []byte) []byte {
	if p == nil {
		return append(b, mpNil)
	}
	return append(appendBinHeader(b, len(p)), p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

func floatsLen(x []float64) int {
	n := len(x)
	switch {
	case x == nil:
		return 1
	case n < 16:
		return 1 + 9*n
	case n <= 0xffff:
		return 3 + 9*n
	}
	return 5 + 9*n
}

// appendFloats writes x as an array of float64, or nil if x is nil.
func appendFloats(b []byte, x []float64) []byte {
	n := len(x)
	switch {
	case x == nil:
		return append(b, mpNil)
	case n < 16:
		b = append(b, mpFixArray|byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, mpArray16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpArray32), uint32(n))
	}
	for _, v := range x {
		b = binary.BigEndian.AppendUint64(append(b, mpFloat64), math.Float64bits(v))
	}
	return b
}

// Decoding.

// decoder parses one payload with a sticky error: after the first failure
// every read returns a zero value and the error is reported by end. Each
// read of a field takes its key first, so the struct's parser reads like its
// declaration.
type decoder struct {
	r   reader
	err error
}

func newDecoder(data []byte) decoder { return decoder{r: reader{b: data}} }

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// mapHeader reads the header of a struct of n fields (n < 16).
func (d *decoder) mapHeader(what string, n int) {
	if d.err != nil {
		return
	}
	c, err := d.r.byte1(what)
	if err == nil && c != mpFixMap|byte(n) {
		d.r.off--
		err = d.r.errf(what, "type 0x%02x, want a map of %d fields", c, n)
	}
	d.fail(err)
}

// key reads the field name that must come next and reports whether reading
// may go on.
func (d *decoder) key(name string) bool {
	if d.err != nil {
		return false
	}
	if d.next(name) {
		d.r.off += 1 + len(name)
		return true
	}
	// Not the key: read whatever is there to say why.
	k, err := d.r.strBytes(name, 31)
	if err == nil && string(k) != name {
		err = fmt.Errorf("%w: field %q at byte %d: found %.32q", ErrMalformed, name, d.r.off-len(k)-1, k)
	}
	d.fail(err)
	return d.err == nil
}

// next reports whether the field name comes next, without reading it: for
// a field that is omitted when empty.
func (d *decoder) next(name string) bool {
	b := d.r.b[d.r.off:]
	return d.err == nil && len(b) > len(name) && b[0] == mpFixStr|byte(len(name)) && string(b[1:1+len(name)]) == name
}

func (d *decoder) uint(name string) uint64 {
	if !d.key(name) {
		return 0
	}
	v, err := d.r.uint(name)
	d.fail(err)
	return v
}

func (d *decoder) uint32(name string) uint32 {
	v := d.uint(name)
	if v > math.MaxUint32 {
		d.fail(d.r.errf(name, "%d overflows uint32", v))
		return 0
	}
	return uint32(v)
}

// int reads an int64 in the form appendInt writes.
func (d *decoder) int(name string) int64 {
	if !d.key(name) {
		return 0
	}
	c, err := d.r.byte1(name)
	if err != nil {
		d.fail(err)
		return 0
	}
	var v int64
	var lo, hi int64 // the signed form of n bytes holds [lo, hi)
	switch {
	case c < 0x80, c >= mpNegFix:
		return int64(int8(c))
	case c >= mpUint8 && c <= mpUint64:
		d.r.off--
		u, err := d.r.uint(name)
		if err == nil && u > math.MaxInt64 {
			err = d.r.errf(name, "%d overflows int64", u)
		}
		d.fail(err)
		return int64(u)
	case c == mpInt8:
		u, e := d.r.be(name, 1)
		v, err, lo, hi = int64(int8(u)), e, math.MinInt8, -32
	case c == mpInt16:
		u, e := d.r.be(name, 2)
		v, err, lo, hi = int64(int16(u)), e, math.MinInt16, math.MinInt8
	case c == mpInt32:
		u, e := d.r.be(name, 4)
		v, err, lo, hi = int64(int32(u)), e, math.MinInt32, math.MinInt16
	case c == mpInt64:
		u, e := d.r.be(name, 8)
		v, err, lo, hi = int64(u), e, math.MinInt64, math.MinInt32
	default:
		err = d.r.errf(name, "type 0x%02x, want an integer", c)
	}
	if err == nil && (v < lo || v >= hi) {
		err = d.r.errf(name, "integer %d not in its shortest form", v)
	}
	d.fail(err)
	return v
}

func (d *decoder) bool(name string) bool {
	if !d.key(name) {
		return false
	}
	c, err := d.r.byte1(name)
	if err == nil && c != mpTrue && c != mpFalse {
		err = d.r.errf(name, "type 0x%02x, want a boolean", c)
	}
	d.fail(err)
	return c == mpTrue
}

// bytes reads a binary, or nil for MessagePack nil. The result aliases the
// input (see own); an empty binary is an empty, non-nil slice.
func (d *decoder) bytes(name string) []byte {
	if !d.key(name) {
		return nil
	}
	if d.r.off < len(d.r.b) && d.r.b[d.r.off] == mpNil {
		d.r.off++
		return nil
	}
	p, err := d.r.bin(name, MaxEnvelope)
	d.fail(err)
	return p
}

// str reads a string's bytes (aliasing the input).
func (d *decoder) str(name string) []byte {
	if !d.key(name) {
		return nil
	}
	p, err := d.r.strBytes(name, MaxEnvelope)
	d.fail(err)
	return p
}

// nonce reads a [16]byte, which the library writes as a 16-byte binary.
func (d *decoder) nonce(name string) (n [16]byte) {
	p := d.bytes(name)
	if d.err == nil && len(p) != len(n) {
		d.fail(fmt.Errorf("%w: %s has %d bytes, want %d", ErrMalformed, name, len(p), len(n)))
	}
	copy(n[:], p)
	return n
}

// floats reads a float64 array, or nil for MessagePack nil. It checks the
// declared length against the bytes left before allocating.
func (d *decoder) floats(name string) []float64 {
	if !d.key(name) {
		return nil
	}
	c, err := d.r.byte1(name)
	if err != nil {
		d.fail(err)
		return nil
	}
	var n, lo uint64
	switch {
	case c == mpNil:
		return nil
	case c&0xf0 == mpFixArray:
		n = uint64(c & 0x0f)
	case c == mpArray16:
		n, err = d.r.be(name, 2)
		lo = 16
	case c == mpArray32:
		n, err = d.r.be(name, 4)
		lo = 0x10000
	default:
		err = d.r.errf(name, "type 0x%02x, want an array", c)
	}
	if err == nil && n < lo {
		err = d.r.errf(name, "length %d not in its shortest form", n)
	}
	if left := uint64(len(d.r.b) - d.r.off); err == nil && n > left/9 {
		err = d.r.errf(name, "%d float64s declared, only %d bytes left", n, left)
	}
	if err != nil {
		d.fail(err)
		return nil
	}
	x := make([]float64, n)
	for i := range x {
		p := d.r.b[d.r.off : d.r.off+9]
		if p[0] != mpFloat64 {
			d.fail(d.r.errf(name, "element %d has type 0x%02x, want float64", i, p[0]))
			return nil
		}
		x[i] = math.Float64frombits(binary.BigEndian.Uint64(p[1:]))
		d.r.off += 9
	}
	return x
}

// end reports the first error, or trailing bytes.
func (d *decoder) end() error {
	if d.err != nil {
		return d.err
	}
	return d.r.end("payload")
}

// own replaces each non-nil slice in ps, which alias the input, by a copy.
// The copies share one allocation; each is capped at its length, so that
// appending to one cannot overwrite the next.
func own(ps ...*[]byte) {
	n := 0
	for _, p := range ps {
		n += len(*p)
	}
	buf := make([]byte, n) // non-nil even if n == 0, like the library's empty binaries
	for _, p := range ps {
		if *p != nil {
			k := copy(buf, *p)
			*p, buf = buf[:k:k], buf[k:]
		}
	}
}

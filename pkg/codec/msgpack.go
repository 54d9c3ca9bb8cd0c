package codec

import (
	"bytes"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// Payloads are MessagePack, encoded by github.com/vmihailenco/msgpack with
// compact integers and the field names in the struct tags. Unmarshal is
// strict in three steps:
//
//  1. a structural scan rejects truncation, trailing bytes, extension types,
//     nesting deeper than maxDepth and any declared length longer than the
//     bytes left, so a few hostile bytes cannot make the decoder allocate much;
//  2. the library decodes, refusing unknown fields;
//  3. the value is re-encoded and must reproduce the input byte for byte,
//     which rejects everything the library would accept loosely: integers
//     that overflow their field, non-minimal encodings, short fixed-size
//     arrays, strings for binaries, reordered or repeated fields.
//
// So whatever Unmarshal accepts is exactly what Marshal produces.
//
// The payloads on the per-tick path (see MarshalAppend) skip all of this: they
// are encoded and parsed by hand in msgpack_fast.go, into exactly the same
// bytes and accepting exactly the same inputs, which the differential tests
// check against the reflection path kept here for every other type.

const maxDepth = 16

func newEncoder(w io.Writer) *msgpack.Encoder {
	enc := msgpack.GetEncoder()
	enc.Reset(w)
	enc.UseCompactInts(true)
	enc.SetSortMapKeys(true)
	return enc
}

// Marshal encodes a payload. The result is at most MaxEnvelope bytes.
func Marshal(v any) ([]byte, error) { return MarshalAppend(nil, v) }

// MarshalAppend is Marshal appending the encoding to dst (growing it, if
// it must, to exactly the length needed, when a fast path applies) and
// returns the extended slice.
func MarshalAppend(dst []byte, v any) ([]byte, error) {
	if e, ok := v.(fastEncoder); ok && !nilFast(v) {
		n := e.encodedLen()
		if n > MaxEnvelope {
			return nil, fmt.Errorf("%w: %T encodes to %d bytes, limit %d", ErrTooLarge, v, n, MaxEnvelope)
		}
		if cap(dst)-len(dst) < n { // exactly what is needed: no spare capacity
			dst = append(make([]byte, 0, len(dst)+n), dst...)
		}
		return e.appendMsgpack(dst), nil
	}
	b, err := marshalReflect(v)
	if err != nil || len(dst) == 0 {
		return b, err
	}
	return append(dst, b...), nil
}

// marshalReflect is Marshal through the library, for every type without a
// fast path.
func marshalReflect(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil {
		return nil, fmt.Errorf("codec: encoding %T: %w", v, err)
	}
	if buf.Len() > MaxEnvelope {
		return nil, fmt.Errorf("%w: %T encodes to %d bytes, limit %d", ErrTooLarge, v, buf.Len(), MaxEnvelope)
	}
	return buf.Bytes(), nil
}

// validator is implemented by payloads with constraints beyond their types.
type validator interface{ validate() error }

// Unmarshal decodes data into v, a pointer to a payload type (or any other
// struct without maps or interfaces). It accepts exactly the encodings Marshal
// produces; every error wraps ErrTooLarge or ErrMalformed (or, for a payload
// that parses but fails its own checks, ErrLoopID). Byte slices in v are
// copies and never alias data.
func Unmarshal(data []byte, v any) error {
	if len(data) > MaxEnvelope {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	if ok, err := unmarshalFast(data, v); ok {
		return err
	}
	return unmarshalReflect(data, v)
}

// viewDecoder is implemented by the payloads UnmarshalView decodes without
// copying.
type viewDecoder interface{ unmarshalView(data []byte) error }

// UnmarshalView is Unmarshal, except that the matrices of the payloads a
// party decodes, and then decodes into field elements, every tick
// (MeasurePayload, MeasureMaskedPayload, MulPayload, TruncPayload,
// MaterialPayload; and MaskYPayload and OutputPayload, which the sensor and
// the actuator decode) alias data instead of being copies: v is valid only
// while data is not overwritten. Any other type is decoded by Unmarshal.
func UnmarshalView(data []byte, v any) error {
	if len(data) > MaxEnvelope {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	if d, ok := v.(viewDecoder); ok && !nilFast(v) {
		return decoded(v, d.unmarshalView(data))
	}
	return Unmarshal(data, v)
}

// unmarshalReflect is Unmarshal through the library: scan, decode, re-encode
// and compare.
func unmarshalReflect(data []byte, v any) error {
	if len(data) > MaxEnvelope {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	if err := scan(data); err != nil {
		return fmt.Errorf("%w (decoding %T)", err, v)
	}
	if err := decode(data, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	cw := cmpWriter{want: data}
	enc := newEncoder(&cw)
	err := enc.Encode(v)
	msgpack.PutEncoder(enc)
	if err != nil || cw.bad || cw.off != len(data) {
		return fmt.Errorf("%w: %T: not in canonical form (re-encoding differs at byte %d)", ErrMalformed, v, cw.off)
	}
	if val, ok := v.(validator); ok {
		return val.validate()
	}
	return nil
}

func decode(data []byte, v any) (err error) {
	// The library is not written for hostile input; scan bounds it, and a
	// panic that still gets through is a malformed message, not a crash.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panic: %v", p)
		}
	}()
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(bytes.NewReader(data))
	dec.DisallowUnknownFields(true)
	return dec.Decode(v)
}

// cmpWriter compares what is written with want.
type cmpWriter struct {
	want []byte
	off  int
	bad  bool
}

func (w *cmpWriter) Write(p []byte) (int, error) {
	if w.bad || len(p) > len(w.want)-w.off || !bytes.Equal(p, w.want[w.off:w.off+len(p)]) {
		w.bad = true
		return len(p), nil
	}
	w.off += len(p)
	return len(p), nil
}

func (w *cmpWriter) WriteByte(c byte) error {
	if w.bad || w.off >= len(w.want) || w.want[w.off] != c {
		w.bad = true
		return nil
	}
	w.off++
	return nil
}

// scan checks that data is exactly one well-formed MessagePack value without
// extension types, nested at most maxDepth deep, whose every declared length
// fits in the bytes that follow it.
func scan(data []byte) error {
	r := reader{b: data}
	if err := skipValue(&r, 0); err != nil {
		return err
	}
	if r.off != len(data) {
		return r.errf("message", "%d trailing bytes", len(data)-r.off)
	}
	return nil
}

func skipValue(r *reader, depth int) error {
	if depth > maxDepth {
		return r.errf("value", "nested deeper than %d", maxDepth)
	}
	at := r.off
	c, err := r.byte1("value")
	if err != nil {
		return err
	}
	var items uint64 // values that follow (array elements, map keys and values)
	switch {
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixint, nil, bool
		return nil
	case c&0xf0 == 0x80: // fixmap
		items = 2 * uint64(c&0x0f)
	case c&0xf0 == 0x90: // fixarray
		items = uint64(c & 0x0f)
	case c&0xe0 == 0xa0: // fixstr
		_, err = r.take("string", int(c&0x1f))
		return err
	case c == mpBin8 || c == mpStr8:
		return skipSized(r, 1)
	case c == mpBin16 || c == mpStr16:
		return skipSized(r, 2)
	case c == mpBin32 || c == mpStr32:
		return skipSized(r, 4)
	case c == 0xca: // float32
		_, err = r.take("float32", 4)
		return err
	case c == 0xcb: // float64
		_, err = r.take("float64", 8)
		return err
	case c >= mpUint8 && c <= mpUint64:
		_, err = r.take("uint", 1<<(c-mpUint8))
		return err
	case c >= 0xd0 && c <= 0xd3: // int8 .. int64
		_, err = r.take("int", 1<<(c-0xd0))
		return err
	case c == 0xdc: // array16
		items, err = r.be("array length", 2)
	case c == 0xdd: // array32
		items, err = r.be("array length", 4)
	case c == 0xde: // map16
		items, err = r.be("map length", 2)
		items *= 2
	case c == 0xdf: // map32
		items, err = r.be("map length", 4)
		items *= 2
	default: // 0xc1 (never used) and the extension types
		return r.errf("value", "type 0x%02x is not allowed", c)
	}
	if err != nil {
		return err
	}
	// Each value takes at least one byte.
	if left := uint64(len(r.b) - r.off); items > left {
		return r.errf("container", "%d values declared at byte %d, only %d bytes left", items, at, left)
	}
	for ; items > 0; items-- {
		if err := skipValue(r, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func skipSized(r *reader, lenBytes int) error {
	n, err := r.be("length", lenBytes)
	if err != nil {
		return err
	}
	if n > uint64(len(r.b)-r.off) {
		return r.errf("bytes", "truncated: %d bytes declared, %d left", n, len(r.b)-r.off)
	}
	_, err = r.take("bytes", int(n))
	return err
}

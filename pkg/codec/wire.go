package codec

import (
	"encoding/binary"
	"fmt"
)

// A canonical subset of MessagePack for the envelope and the sealed header:
// unsigned integers, strings, binaries and arrays, each in its shortest form.
// The reader refuses every other form, so a parsed envelope re-encodes to the
// exact input bytes, and any MessagePack library can read what we write.

const (
	mpFixMap   = 0x80 // 0x80-0x8f: map of 0-15 pairs
	mpFixArray = 0x90 // 0x90-0x9f: array of 0-15
	mpFixStr   = 0xa0 // 0xa0-0xbf: string of 0-31 bytes
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpFloat64  = 0xcb
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpNegFix   = 0xe0 // 0xe0-0xff: -32 to -1
)

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, mpUint8, byte(v))
	case v <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
	case v <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, mpFixStr|byte(n))
	case n <= 0xff:
		b = append(b, mpStr8, byte(n))
	case n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// appendBinHeader writes the header of a binary of n bytes.
func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= 0xff:
		return append(b, mpBin8, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
}

// binHeaderLen is the length of appendBinHeader's output.
func binHeaderLen(n int) int {
	switch {
	case n <= 0xff:
		return 2
	case n <= 0xffff:
		return 3
	}
	return 5
}

// reader decodes the canonical subset from b. Errors wrap ErrMalformed and
// name the field being read.
type reader struct {
	b   []byte
	off int
}

func (r *reader) errf(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s at byte %d: %s", ErrMalformed, field, r.off, fmt.Sprintf(format, args...))
}

func (r *reader) byte1(field string) (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf(field, "truncated")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// take returns the next n bytes (aliasing the input).
func (r *reader) take(field string, n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, r.errf(field, "truncated: %d bytes declared, %d left", n, len(r.b)-r.off)
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

// be reads an n-byte big-endian length or value.
func (r *reader) be(field string, n int) (uint64, error) {
	p, err := r.take(field, n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// arrayLen reads a fixarray header (every array here is short).
func (r *reader) arrayLen(field string) (int, error) {
	c, err := r.byte1(field)
	if err != nil {
		return 0, err
	}
	if c&0xf0 != mpFixArray {
		return 0, r.errf(field, "type 0x%02x, want a short array", c)
	}
	return int(c & 0x0f), nil
}

func (r *reader) uint(field string) (uint64, error) {
	c, err := r.byte1(field)
	if err != nil {
		return 0, err
	}
	var v, lo uint64
	switch {
	case c < 0x80:
		return uint64(c), nil
	case c == mpUint8:
		v, err = r.be(field, 1)
		lo = 0x80
	case c == mpUint16:
		v, err = r.be(field, 2)
		lo = 0x100
	case c == mpUint32:
		v, err = r.be(field, 4)
		lo = 0x10000
	case c == mpUint64:
		v, err = r.be(field, 8)
		lo = 0x100000000
	default:
		return 0, r.errf(field, "type 0x%02x, want an unsigned integer", c)
	}
	if err != nil {
		return 0, err
	}
	if v < lo {
		return 0, r.errf(field, "integer %d not in its shortest form", v)
	}
	return v, nil
}

// strBytes reads a string of at most limit bytes and returns its bytes
// (aliasing the input).
func (r *reader) strBytes(field string, limit int) ([]byte, error) {
	c, err := r.byte1(field)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == mpFixStr:
		return r.checkedTake(field, uint64(c&0x1f), 0, limit)
	case c == mpStr8:
		n, err = r.be(field, 1)
		if err == nil {
			return r.checkedTake(field, n, 32, limit)
		}
	case c == mpStr16:
		n, err = r.be(field, 2)
		if err == nil {
			return r.checkedTake(field, n, 0x100, limit)
		}
	case c == mpStr32:
		n, err = r.be(field, 4)
		if err == nil {
			return r.checkedTake(field, n, 0x10000, limit)
		}
	default:
		return nil, r.errf(field, "type 0x%02x, want a string", c)
	}
	return nil, err
}

// bin reads a binary of at most limit bytes (aliasing the input).
func (r *reader) bin(field string, limit int) ([]byte, error) {
	c, err := r.byte1(field)
	if err != nil {
		return nil, err
	}
	var n uint64
	switch c {
	case mpBin8:
		n, err = r.be(field, 1)
		if err == nil {
			return r.checkedTake(field, n, 0, limit)
		}
	case mpBin16:
		n, err = r.be(field, 2)
		if err == nil {
			return r.checkedTake(field, n, 0x100, limit)
		}
	case mpBin32:
		n, err = r.be(field, 4)
		if err == nil {
			return r.checkedTake(field, n, 0x10000, limit)
		}
	default:
		return nil, r.errf(field, "type 0x%02x, want a binary", c)
	}
	return nil, err
}

func (r *reader) checkedTake(field string, n, lo uint64, hi int) ([]byte, error) {
	if n < lo {
		return nil, r.errf(field, "length %d not in its shortest form", n)
	}
	if n > uint64(hi) {
		return nil, r.errf(field, "length %d exceeds %d", n, hi)
	}
	return r.take(field, int(n))
}

func (r *reader) end(what string) error {
	if r.off != len(r.b) {
		return fmt.Errorf("%w: %d trailing bytes after the %s", ErrMalformed, len(r.b)-r.off, what)
	}
	return nil
}

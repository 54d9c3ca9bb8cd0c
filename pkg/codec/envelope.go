package codec

import (
	"crypto/cipher"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/box"
)

// Envelope layout (wire version 2), a MessagePack array of 8:
//
//	[version, kind, loop, tick, from, to, nonce (bin 24), box (bin)]
//
// box is the sealed plaintext, a MessagePack array of 7,
//
//	[version, kind, loop, tick, from, to, payload (bin)]
//
// encrypted with XChaCha20-Poly1305 (ciphertext, then the 16-byte tag; no
// associated data) under the key the sender and the recipient share:
// HSalsa20 of their X25519 shared secret, with a zero nonce (the key NaCl's
// box.Precompute derives). Wire version 1 sealed the same
// plaintext under the same key with NaCl box's XSalsa20-Poly1305; version
// 2 changed only the cipher, which costs less than half as much per
// message. An envelope of another version is refused (ErrVersion).
//
// The outer header lets the broker and the receiver route and drop messages
// without decrypting; the sealed copy binds it to the payload. Open
// compares the two field by field.

// boxAEAD is the cipher of envelopes between the holders of pub and priv:
// XChaCha20-Poly1305 under box.Precompute's key. (decodePublicKey has
// refused low-order public keys.)
func boxAEAD(pub, priv *[32]byte) (cipher.AEAD, error) {
	var k [32]byte
	box.Precompute(&k, pub, priv)
	defer clear(k[:])
	return chacha20poly1305.NewX(k[:])
}

// boxOverhead is the tag's length.
const boxOverhead = chacha20poly1305.Overhead

const (
	envelopeFields = 8
	sealedFields   = 7
	nonceSize      = 24
	// maxHeaderLen bounds appendHeader's output: version, kind (2 bytes
	// each), loop (2+64), tick (9), from, to (2 each).
	maxHeaderLen = 2 + 2 + 2 + MaxLoopID + 9 + 2 + 2
)

// envelope is a parsed outer envelope; box and nonceIn alias the input.
type envelope struct {
	h     Header
	nonce [nonceSize]byte
	box   []byte
	// nonceIn is the nonce where it lies in the input: passing it, not a
	// slice of nonce, to the cipher (an interface) keeps a parsed envelope
	// off the heap.
	nonceIn []byte
}

func appendHeader(b []byte, h Header) []byte {
	b = appendUint(b, uint64(h.Version))
	b = appendUint(b, uint64(h.Kind))
	b = appendStr(b, h.Loop)
	b = appendUint(b, h.Tick)
	b = appendUint(b, uint64(h.From))
	return appendUint(b, uint64(h.To))
}

// appendTo re-encodes a parsed envelope; for every input parseEnvelope
// accepts, the result is that input byte for byte.
func (e *envelope) appendTo(b []byte) []byte {
	b = append(b, mpFixArray|envelopeFields)
	b = appendHeader(b, e.h)
	b = appendBinHeader(b, nonceSize)
	b = append(b, e.nonce[:]...)
	b = appendBinHeader(b, len(e.box))
	return append(b, e.box...)
}

// fieldNames names a header's fields in errors; constant, so that the happy
// path does not build strings.
type fieldNames struct{ where, version, kind, loop, tick, from, to string }

var (
	envelopeNames = fieldNames{"envelope", "envelope version", "envelope kind", "envelope loop", "envelope tick", "envelope from", "envelope to"}
	sealedNames   = fieldNames{"sealed header", "sealed version", "sealed kind", "sealed loop", "sealed tick", "sealed from", "sealed to"}
)

// readHeaderFields reads kind, loop, tick, from and to (the version has been
// read). The loop id is returned as bytes aliasing the input.
func readHeaderFields(r *reader, n *fieldNames) (h Header, loop []byte, err error) {
	kind, err := r.uint(n.kind)
	if err != nil {
		return h, nil, err
	}
	if kind > 0xff {
		return h, nil, fmt.Errorf("%w: %s %d", ErrKind, n.kind, kind)
	}
	if loop, err = r.strBytes(n.loop, MaxEnvelope); err != nil {
		return h, nil, err
	}
	if h.Tick, err = r.uint(n.tick); err != nil {
		return h, nil, err
	}
	from, err := r.uint(n.from)
	if err != nil {
		return h, nil, err
	}
	to, err := r.uint(n.to)
	if err != nil {
		return h, nil, err
	}
	if from > 0xff || to > 0xff {
		return h, nil, fmt.Errorf("%w: %s roles %d -> %d", ErrRole, n.where, from, to)
	}
	h.Version, h.Kind, h.From, h.To = Version, Kind(kind), Role(from), Role(to)
	return h, loop, nil
}

// readVersion reads an array header and the version that starts it, so that
// a future version may change everything after the version.
func readVersion(r *reader, names *fieldNames, fields int) error {
	n, err := r.arrayLen(names.where)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: empty %s", ErrMalformed, names.where)
	}
	v, err := r.uint(names.version)
	if err != nil {
		return err
	}
	if v != Version {
		return fmt.Errorf("%w: %s %d, this build speaks %d", ErrVersion, names.version, v, Version)
	}
	if n != fields {
		return fmt.Errorf("%w: %s has %d fields, want %d", ErrMalformed, names.where, n, fields)
	}
	return nil
}

// parseEnvelope decodes the outer envelope strictly. It checks structure and
// version only; Header.check does the rest.
func parseEnvelope(data []byte) (envelope, error) {
	var e envelope
	if len(data) > MaxEnvelope {
		return e, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	r := reader{b: data}
	if err := readVersion(&r, &envelopeNames, envelopeFields); err != nil {
		return e, err
	}
	h, loop, err := readHeaderFields(&r, &envelopeNames)
	if err != nil {
		return e, err
	}
	if !validLoopBytes(loop) {
		return e, ValidLoopID(string(loop))
	}
	h.Loop = string(loop)
	nonce, err := r.bin("nonce", nonceSize)
	if err != nil {
		return e, err
	}
	if len(nonce) != nonceSize {
		return e, fmt.Errorf("%w: nonce has %d bytes, want %d", ErrMalformed, len(nonce), nonceSize)
	}
	copy(e.nonce[:], nonce)
	e.nonceIn = nonce
	if e.box, err = r.bin("box", MaxEnvelope); err != nil {
		return e, err
	}
	if len(e.box) < boxOverhead {
		return e, fmt.Errorf("%w: box has %d bytes, less than the %d-byte tag", ErrMalformed, len(e.box), boxOverhead)
	}
	if err := r.end("envelope"); err != nil {
		return e, err
	}
	e.h = h
	return e, nil
}

// PeekHeader returns an envelope's outer header without opening it, for
// routing and logging. Nothing in it is authenticated: only Open's header may
// be trusted.
func PeekHeader(data []byte) (Header, error) {
	e, err := parseEnvelope(data)
	if err != nil {
		return Header{}, err
	}
	if err := e.h.check(); err != nil {
		return Header{}, err
	}
	return e.h, nil
}

package codec

import (
	"encoding/binary"
	"fmt"
)

// A batch carries several sealed envelopes, each whole and unchanged, in one
// NATS message: the parties use it for the messages they exchange, so that
// under load many loops' messages cost the broker and both clients one
// message. A batch adds nothing to what the broker sees (the envelopes are
// the ones it would have carried one by one) and nothing is trusted from it:
// each envelope is opened, authenticated and replay-checked on its own.
//
// Layout: the byte BatchMagic, then for each envelope its length as an
// unsigned varint followed by its bytes. At most MaxBatchEnvelopes
// envelopes, each non-empty, MaxEnvelope bytes in all.

// BatchMagic is a batch's first byte (an envelope starts with a msgpack
// fixarray byte, 0x9N, never this).
const BatchMagic = 0xB1

// MaxBatchEnvelopes bounds the envelopes in one batch.
const MaxBatchEnvelopes = 256

// AppendBatch appends env to the batch in dst (starting it if dst is
// empty) and returns the extended slice.
func AppendBatch(dst, env []byte) []byte {
	if len(dst) == 0 {
		dst = append(dst, BatchMagic)
	}
	dst = binary.AppendUvarint(dst, uint64(len(env)))
	return append(dst, env...)
}

// SplitBatch checks a batch and calls fn with each envelope in order (a
// sub-slice of data). A malformed batch (ErrMalformed) or one too large
// (ErrTooLarge) is refused whole, before fn is called.
func SplitBatch(data []byte, fn func(env []byte)) error {
	n, err := checkBatch(data)
	if err != nil {
		return err
	}
	rest := data[1:]
	for range n {
		l, k := binary.Uvarint(rest)
		fn(rest[k : k+int(l)])
		rest = rest[k+int(l):]
	}
	return nil
}

// checkBatch validates the layout and returns the number of envelopes.
func checkBatch(data []byte) (int, error) {
	if len(data) > MaxEnvelope {
		return 0, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	if len(data) == 0 || data[0] != BatchMagic {
		return 0, fmt.Errorf("%w: not a batch", ErrMalformed)
	}
	rest, n := data[1:], 0
	for len(rest) > 0 {
		if n == MaxBatchEnvelopes {
			return 0, fmt.Errorf("%w: batch of more than %d envelopes", ErrMalformed, MaxBatchEnvelopes)
		}
		l, k := binary.Uvarint(rest)
		if k <= 0 || l == 0 || l > uint64(len(rest)-k) {
			return 0, fmt.Errorf("%w: batch envelope %d: bad length", ErrMalformed, n)
		}
		if k != uvarintLen(l) { // one encoding only: a varint padded with 0x80 bytes is another
			return 0, fmt.Errorf("%w: batch envelope %d: length not in its shortest form", ErrMalformed, n)
		}
		rest = rest[k+int(l):]
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: empty batch", ErrMalformed)
	}
	return n, nil
}

// uvarintLen is the length of l's shortest varint encoding.
func uvarintLen(l uint64) int {
	n := 1
	for ; l >= 0x80; l >>= 7 {
		n++
	}
	return n
}

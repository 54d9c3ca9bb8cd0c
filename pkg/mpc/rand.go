package mpc

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"io"
)

// Uniform sampling. Everything that samples takes an io.Reader: tests pass a
// seeded PRG so that every protocol run replays bit for bit; production passes
// crypto/rand, or a PRG keyed from it (NewPRG) for speed.

// sampleBatch is how many candidate elements are read per call to the reader.
const sampleBatch = 32

// FillRandom fills dst with independent uniform elements of Z_q by rejection
// sampling: each candidate has BitLen() random bits and is kept if below q
// (probability > 1/2).
func (f *Field) FillRandom(r io.Reader, dst []Elem) error {
	var buf [sampleBatch * 32]byte
	topBits := uint(f.bitLen % 8)
	n := 0
	for n < len(dst) {
		want := len(dst) - n
		if want > sampleBatch {
			want = sampleBatch
		}
		// Ask for a few more than needed to make a second read rare.
		want += want/2 + 1
		if want > sampleBatch {
			want = sampleBatch
		}
		b := buf[:want*f.byteLen]
		if _, err := io.ReadFull(r, b); err != nil {
			return fmt.Errorf("mpc: reading randomness: %w", err)
		}
		for c := 0; c < want && n < len(dst); c++ {
			cand := b[c*f.byteLen : (c+1)*f.byteLen]
			if topBits != 0 {
				cand[f.byteLen-1] &= 1<<topBits - 1
			}
			var a Elem
			for i, x := range cand {
				a[i/8] |= uint64(x) << (8 * (i % 8))
			}
			if cmp(a, f.q) < 0 {
				dst[n] = a
				n++
			}
		}
	}
	return nil
}

// Random returns one uniform element of Z_q.
func (f *Field) Random(r io.Reader) (Elem, error) {
	var e [1]Elem
	err := f.FillRandom(r, e[:])
	return e[0], err
}

// RandomMatrix returns a uniform rows x cols matrix.
func (f *Field) RandomMatrix(r io.Reader, rows, cols int) (Matrix, error) {
	m := NewMatrix(rows, cols)
	return m, f.FillRandom(r, m.Data)
}

// FillSigned fills dst with independent uniform values of Z<b> =
// [-2^(b-1), 2^(b-1)), as elements. It needs b <= BitLen()-1 so that Z<b> lies
// inside the centered range of Z_q, and b <= 255.
func (f *Field) FillSigned(r io.Reader, dst []Elem, b int) error {
	if b < 1 || b > f.bitLen-1 {
		return fmt.Errorf("%w: Z<%d> does not fit in the centered range of a %d-bit modulus", ErrParams, b, f.bitLen)
	}
	nb := (b + 7) / 8
	var buf [32]byte
	off := f.Pow2(b - 1)
	for k := range dst {
		if _, err := io.ReadFull(r, buf[:nb]); err != nil {
			return fmt.Errorf("mpc: reading randomness: %w", err)
		}
		if b%8 != 0 {
			buf[nb-1] &= 1<<uint(b%8) - 1
		}
		var a Elem
		for i := 0; i < nb; i++ {
			a[i/8] |= uint64(buf[i]) << (8 * (i % 8))
		}
		// a is uniform in [0, 2^b) and below q; shift to [-2^(b-1), 2^(b-1)).
		dst[k] = f.Sub(a, off)
	}
	return nil
}

// prg is an AES-256-CTR keystream.
type prg struct{ s cipher.Stream }

// NewPRG returns a deterministic reader: the AES-256-CTR keystream under a
// 32-byte seed and a 16-byte nonce. It backs seed compression of dealer
// material and seeded tests; a fresh seed from crypto/rand makes it a fast
// production source.
func NewPRG(seed [32]byte, nonce [16]byte) io.Reader {
	blk, err := aes.NewCipher(seed[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	return &prg{s: cipher.NewCTR(blk, nonce[:])}
}

func (p *prg) Read(b []byte) (int, error) {
	clear(b)
	p.s.XORKeyStream(b, b)
	return len(b), nil
}

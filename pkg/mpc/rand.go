package mpc

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
)

// Uniform sampling. Everything that samples takes an io.Reader: tests pass a
// seeded PRG so that every protocol run replays bit for bit (the items'
// serials aside, which come from the clock: Dealer.Resume pins them);
// production passes crypto/rand, or a PRG keyed from it (NewPRG) for speed.

// randBuf is the size of the buffer randomness is read into.
const randBuf = 1024

// randSource hands out random bytes in chunks of at most randBuf. A *prg
// fills its own buffer, so sampling from it allocates nothing; any other
// reader is read into one buffer allocated per call (buffers passed to an
// io.Reader escape to the heap).
type randSource struct {
	p   *prg
	r   io.Reader
	buf []byte
}

func newRandSource(r io.Reader, need int) randSource {
	if p, ok := r.(*prg); ok {
		return randSource{p: p}
	}
	return randSource{r: r, buf: make([]byte, min(need, randBuf))}
}

// capacity is the largest chunk next returns.
func (s *randSource) capacity() int {
	if s.p != nil {
		return randBuf
	}
	return len(s.buf)
}

// next returns n fresh random bytes (n <= capacity()), valid until the next call.
func (s *randSource) next(n int) ([]byte, error) {
	if s.p != nil {
		b := s.p.buf[:n]
		s.p.Read(b)
		return b, nil
	}
	b := s.buf[:n]
	if _, err := io.ReadFull(s.r, b); err != nil {
		return nil, fmt.Errorf("mpc: reading randomness: %w", err)
	}
	return b, nil
}

// FillRandom fills dst with independent uniform elements of Z_q by rejection
// sampling: each candidate is BitLen() random bits (ByteLen() bytes, little
// endian, the excess top bits cleared) and is kept if below q, which happens
// with probability q / 2^BitLen() > 1/2 (for the presets all but 2^-127 and
// 2^-250). Candidates are read in batches; the stream consumed is a function
// of len(dst) and the bytes read, so a seeded reader replays exactly.
func (f *Field) FillRandom(r io.Reader, dst []Elem) error {
	bl := f.byteLen
	src := newRandSource(r, 2*len(dst)*bl)
	// Expected candidates per element, rounded up generously: 1 for the
	// presets (a rejection just costs another batch), 1.5 otherwise.
	generous := f.kind == kindGeneric
	n := 0
	for n < len(dst) {
		want := len(dst) - n
		if generous {
			want += want/2 + 1
		}
		want = max(1, min(want, src.capacity()/bl))
		b, err := src.next(want * bl)
		if err != nil {
			return err
		}
		for c := 0; c < want && n < len(dst); c++ {
			a0, a1, a2, a3 := f.candidate(b[c*bl : (c+1)*bl])
			// Keep a if a < q, that is if a - q borrows.
			var br uint64
			_, br = bits.Sub64(a0, f.q[0], 0)
			_, br = bits.Sub64(a1, f.q[1], br)
			_, br = bits.Sub64(a2, f.q[2], br)
			_, br = bits.Sub64(a3, f.q[3], br)
			if br != 0 {
				p := &dst[n]
				p[0], p[1], p[2], p[3] = a0, a1, a2, a3
				n++
			}
		}
	}
	return nil
}

// candidate decodes ByteLen() little-endian bytes and clears the bits from
// BitLen() up. Limbs are returned as values (see reduce.go on why).
func (f *Field) candidate(b []byte) (a0, a1, a2, a3 uint64) {
	switch f.kind {
	case kindM127: // 16 bytes, 127 bits
		return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]) & m63, 0, 0
	case kindP25519: // 32 bytes, 255 bits
		return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]),
			binary.LittleEndian.Uint64(b[16:]), binary.LittleEndian.Uint64(b[24:]) & m63
	}
	a := leElem(b)
	a[(f.bitLen-1)/64] &= ^uint64(0) >> uint(63-(f.bitLen-1)%64)
	return a[0], a[1], a[2], a[3]
}

// leElem decodes up to 32 little-endian bytes.
func leElem(b []byte) (a Elem) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		a[i/8] = binary.LittleEndian.Uint64(b[i:])
	}
	for j := len(b) - 1; j >= i; j-- {
		a[i/8] = a[i/8]<<8 | uint64(b[j])
	}
	return a
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
// [-2^(b-1), 2^(b-1)), as elements: each is (b+7)/8 random bytes, little
// endian, the excess top bits cleared, minus 2^(b-1). It needs
// 1 <= b <= BitLen()-1 so that Z<b> lies inside the centered range of Z_q.
func (f *Field) FillSigned(r io.Reader, dst []Elem, b int) error {
	if b < 1 || b > f.bitLen-1 {
		return fmt.Errorf("%w: Z<%d> does not fit in the centered range of a %d-bit modulus", ErrParams, b, f.bitLen)
	}
	nb := (b + 7) / 8
	src := newRandSource(r, len(dst)*nb)
	top := (b - 1) / 64
	topMask := ^uint64(0) >> uint(63-(b-1)%64)
	off := f.Pow2(b - 1)
	for n := 0; n < len(dst); {
		want := min(len(dst)-n, src.capacity()/nb)
		chunk, err := src.next(want * nb)
		if err != nil {
			return err
		}
		for c := 0; c < want; c, n = c+1, n+1 {
			a := leElem(chunk[c*nb : (c+1)*nb])
			a[top] &= topMask
			// a is uniform in [0, 2^b), below q; shift to [-2^(b-1), 2^(b-1)).
			f.SubTo(&dst[n], &a, &off)
		}
	}
	return nil
}

// prg is an AES-256-CTR keystream, with a buffer for FillRandom and
// FillSigned to draw into.
type prg struct {
	ctr ctr
	buf [randBuf]byte
	// tagIn and tagOut are the Dealer's blocks for a compressed item's
	// tag (Dealer.Next), kept here so that enciphering allocates nothing.
	tagIn, tagOut [ItemTagLen]byte
}

// NewPRG returns a deterministic reader: the AES-256-CTR keystream under a
// 32-byte seed and a 16-byte nonce (the nonce the initial counter block, as
// cipher.NewCTR takes it). It backs seed compression of dealer material
// and seeded tests; a fresh seed from crypto/rand makes it a fast
// production source.
func NewPRG(seed [32]byte, nonce [16]byte) io.Reader {
	p := new(prg)
	p.ctr.start(seedCipher(seed), nonce)
	return p
}

// seedCipher is AES-256 keyed by a 32-byte seed: the key schedule of
// NewPRG's streams, the Expander's and the Dealer's.
func seedCipher(seed [32]byte) cipher.Block {
	blk, err := aes.NewCipher(seed[:])
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	return blk
}

func (p *prg) Read(b []byte) (int, error) {
	p.ctr.read(b)
	return len(b), nil
}

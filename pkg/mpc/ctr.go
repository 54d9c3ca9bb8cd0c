package mpc

import (
	"crypto/cipher"
	"encoding/binary"
)

// ctrBatch is how many counter blocks ctr encrypts in one round: their
// block cipher calls do not depend on each other, so the processor overlaps
// them.
const ctrBatch = 4

// ctrBulk is the read from which ctr hands the rest of the keystream to
// the library's CTR stream: the library's assembly runs eight blocks at a
// time, three to four times as fast per byte as a block at a time, but
// costs a copy of the key schedule (an allocation) to start
// (BenchmarkCTRSizes: the two take the same time at about 450-500 bytes).
const ctrBulk = 512

// ctr is the CTR-mode keystream of a 16-byte block cipher, exactly as
// cipher.NewCTR produces it (the IV a 128-bit big-endian counter, one block
// per increment), written straight into the reader's buffer. Unlike
// cipher.NewCTR, which copies the AES key schedule into a new stream for
// every IV, it is reset in place: P0 expands a small item (the pendulum's,
// every read under ctrBulk) from its seed without allocating. From the first
// read of ctrBulk bytes or more on, the library's stream, started at the
// counter reached, produces the rest of the keystream; a long-lived stream
// (start) uses it from the first byte.
type ctr struct {
	blk    cipher.Block
	hi, lo uint64 // the next counter block
	in     [ctrBatch * 16]byte
	ks     [ctrBatch * 16]byte // keystream generated but not yet read: ks[used:]
	used   int
	bulk   cipher.Stream // nil until a read of ctrBulk bytes
}

// reset starts the keystream of iv under blk.
func (c *ctr) reset(blk cipher.Block, iv [16]byte) {
	if blk.BlockSize() != 16 {
		panic("mpc: ctr needs a 16-byte block cipher")
	}
	c.blk = blk
	c.hi, c.lo = binary.BigEndian.Uint64(iv[:8]), binary.BigEndian.Uint64(iv[8:])
	c.used = len(c.ks)
	c.bulk = nil
}

// start is reset for a long-lived stream (NewPRG): the library's stream
// from the first byte, whose start is paid for by the bytes that follow.
func (c *ctr) start(blk cipher.Block, iv [16]byte) {
	c.reset(blk, iv)
	c.bulk = cipher.NewCTR(blk, iv[:])
}

// fill writes the next n <= ctrBatch keystream blocks into dst.
func (c *ctr) fill(dst []byte, n int) {
	for i := range n {
		binary.BigEndian.PutUint64(c.in[16*i:], c.hi)
		binary.BigEndian.PutUint64(c.in[16*i+8:], c.lo)
		c.lo++
		if c.lo == 0 {
			c.hi++
		}
	}
	for i := range n {
		c.blk.Encrypt(dst[16*i:16*i+16], c.in[16*i:16*i+16])
	}
}

// read overwrites b with the next len(b) bytes of the keystream.
func (c *ctr) read(b []byte) {
	k := copy(b, c.ks[c.used:])
	c.used += k
	b = b[k:]
	if c.bulk == nil && len(b) >= ctrBulk { // ks is used up: the counter is where b starts
		var iv [16]byte
		binary.BigEndian.PutUint64(iv[:8], c.hi)
		binary.BigEndian.PutUint64(iv[8:], c.lo)
		c.bulk = cipher.NewCTR(c.blk, iv[:])
	}
	if c.bulk != nil {
		clear(b)
		c.bulk.XORKeyStream(b, b)
		return
	}
	for len(b) >= len(c.ks) {
		c.fill(b, ctrBatch)
		b = b[len(c.ks):]
	}
	if len(b) > 0 {
		c.fill(c.ks[:], ctrBatch)
		c.used = copy(b, c.ks[:])
	}
}

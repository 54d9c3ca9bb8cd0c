package mpc

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"testing"
)

// libraryKeystream is the first n bytes of cipher.NewCTR's keystream.
func libraryKeystream(blk cipher.Block, iv [16]byte, n int) []byte {
	b := make([]byte, n)
	cipher.NewCTR(blk, iv[:]).XORKeyStream(b, b)
	return b
}

// TestCTRMatchesLibrary: ctr is cipher.NewCTR's keystream to the byte
// (seed compression depends on it: a dealer of an earlier release expanded
// P0's shares with the library), whatever the sizes of the reads, across
// the carry out of the counter's low 64 bits and its wrap at 2^128, and
// after a reset in mid-stream; and from start, the library's own stream.
func TestCTRMatchesLibrary(t *testing.T) {
	blk, err := aes.NewCipher(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ivs := map[string][16]byte{
		"zero":          {},
		"nonce":         {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		"low word wrap": {0, 0, 0, 0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd},
		"2^128 wrap":    {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe},
	}
	reads := [][]int{{1000}, {1, 15, 16, 17, 63, 64, 65, 128, 3, 200, 428}, {64, 64, 64, 808}, {5, 995}}
	var c ctr
	for name, iv := range ivs {
		want := libraryKeystream(blk, iv, 1000)
		for _, sizes := range reads {
			// read reads the keystream in these sizes; every byte is
			// overwritten, not XORed.
			read := func() []byte {
				var got []byte
				for _, n := range sizes {
					b := bytes.Repeat([]byte{0xaa}, n)
					c.read(b)
					got = append(got, b...)
				}
				return got
			}
			c.reset(blk, [16]byte{9}) // a reset in mid-stream forgets the old keystream
			c.read(make([]byte, 21))
			c.reset(blk, iv)
			if got := read(); !bytes.Equal(got, want) {
				t.Errorf("%s, reads %v: keystream differs from cipher.NewCTR's", name, sizes)
			}
			c.start(blk, iv) // a long-lived stream: the library's from the first byte
			if got := read(); !bytes.Equal(got, want) {
				t.Errorf("%s, reads %v after start: keystream differs from cipher.NewCTR's", name, sizes)
			}
		}
	}
}

// BenchmarkCTRSizes: a fresh keystream from a kept key schedule, as P0
// expands one item per tick, by ctr and by the library, at a pendulum
// item's size (304 bytes: 19 elements of 2^127-1, the fixed-mask variant)
// and at larger ones (n = 32's material is about 2 KB, d = 100's per-tick
// triple 160 KB), where ctr hands over to the library's stream.
func BenchmarkCTRSizes(b *testing.B) {
	blk, _ := aes.NewCipher(make([]byte, 32))
	for _, n := range []int{304, 496, 528, 2048, 163840} {
		buf := make([]byte, n)
		b.Run(fmt.Sprintf("ctr-%d", n), func(b *testing.B) {
			var c ctr
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c.reset(blk, [16]byte{byte(i)})
				c.read(buf)
			}
		})
		b.Run(fmt.Sprintf("library-%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				clear(buf)
				cipher.NewCTR(blk, []byte{byte(i), 15: 0}).XORKeyStream(buf, buf)
			}
		})
	}
}

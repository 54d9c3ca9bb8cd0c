package mpc

import "math/bits"

// This file holds the limb-level products and reductions behind Field.Mul and
// the lazily reduced dot products of matrix.go. None of it allocates.

const m63 = 1<<63 - 1

// mul2x2 returns the 256-bit product of two values below 2^128.
func mul2x2(a, b Elem) [4]uint64 {
	h00, l00 := bits.Mul64(a[0], b[0])
	h01, l01 := bits.Mul64(a[0], b[1])
	h10, l10 := bits.Mul64(a[1], b[0])
	h11, l11 := bits.Mul64(a[1], b[1])
	var p [4]uint64
	var c1, c2, c3, c4, c5 uint64
	p[0] = l00
	p[1], c1 = bits.Add64(h00, l01, 0)
	p[1], c2 = bits.Add64(p[1], l10, 0)
	p[2], c3 = bits.Add64(h01, h10, 0)
	p[2], c4 = bits.Add64(p[2], l11, 0)
	p[2], c5 = bits.Add64(p[2], c1+c2, 0)
	p[3] = h11 + c3 + c4 + c5
	return p
}

// reduceM127 returns p mod 2^127-1 for p < 2^256 (2^127 = 1 mod q, so the
// 127-bit chunks of p are added).
func reduceM127(p [4]uint64) Elem {
	// lo = p mod 2^127, mid = (p >> 127) mod 2^127, top = p >> 254.
	lo0, lo1 := p[0], p[1]&m63
	mid0 := p[1]>>63 | p[2]<<1
	mid1 := (p[2]>>63 | p[3]<<1) & m63
	top := p[3] >> 62
	s0, c := bits.Add64(lo0, mid0, 0)
	s1, _ := bits.Add64(lo1, mid1, c) // < 2^128
	s0, c = bits.Add64(s0, top, 0)
	s1 += c
	return foldM127(s0, s1)
}

// foldM127 reduces s < 2^128 modulo 2^127-1 to [0, q).
func foldM127(s0, s1 uint64) Elem {
	t := s1 >> 63
	s1 &= m63
	var c uint64
	s0, c = bits.Add64(s0, t, 0)
	s1 += c // s <= 2^127
	// Subtract q if s >= q.
	d0, br := bits.Sub64(s0, ^uint64(0), 0)
	d1, br := bits.Sub64(s1, m63, br)
	if br == 0 {
		return Elem{d0, d1}
	}
	return Elem{s0, s1}
}

// mul4x4 returns the 512-bit product of two values below 2^256.
func mul4x4(a, b Elem) [8]uint64 {
	var t [8]uint64
	for i := 0; i < 4; i++ {
		var carry uint64
		ai := a[i]
		if ai == 0 {
			continue
		}
		for j := 0; j < 4; j++ {
			hi, lo := bits.Mul64(ai, b[j])
			var c uint64
			lo, c = bits.Add64(lo, t[i+j], 0)
			hi += c
			lo, c = bits.Add64(lo, carry, 0)
			hi += c
			t[i+j], carry = lo, hi
		}
		t[i+4] = carry
	}
	return t
}

// reduceP25519 returns t mod 2^255-19 for any t < 2^512 (2^256 = 38 mod q).
func reduceP25519(t [8]uint64) Elem {
	// r = lo + 38 hi, at most 2^256 + 38 * 2^256: five limbs.
	var r [5]uint64
	var carry uint64
	for i := 0; i < 4; i++ {
		hi, lo := bits.Mul64(t[4+i], 38)
		var c uint64
		lo, c = bits.Add64(lo, t[i], 0)
		hi += c
		lo, c = bits.Add64(lo, carry, 0)
		hi += c
		r[i], carry = lo, hi
	}
	r[4] = carry
	return foldP25519(r)
}

// foldP25519 reduces a value below 2^320 modulo 2^255-19.
func foldP25519(r [5]uint64) Elem {
	// Fold bits >= 255: value = h 2^255 + l = l + 19 h.
	h := r[4]<<1 | r[3]>>63
	r3 := r[3] & m63
	hh, hl := bits.Mul64(h, 19)
	var c uint64
	var e Elem
	e[0], c = bits.Add64(r[0], hl, 0)
	e[1], c = bits.Add64(r[1], hh, c)
	e[2], c = bits.Add64(r[2], 0, c)
	e[3], _ = bits.Add64(r3, 0, c) // < 2^255 + 2^70
	// Once more for the (rare) carry past bit 255, then subtract q if needed.
	t := e[3] >> 63
	e[3] &= m63
	e[0], c = bits.Add64(e[0], 19*t, 0)
	e[1], c = bits.Add64(e[1], 0, c)
	e[2], c = bits.Add64(e[2], 0, c)
	e[3] += c
	var d Elem
	var br uint64
	d[0], br = bits.Sub64(e[0], ^uint64(0)-18, 0)
	d[1], br = bits.Sub64(e[1], ^uint64(0), br)
	d[2], br = bits.Sub64(e[2], ^uint64(0), br)
	d[3], br = bits.Sub64(e[3], m63, br)
	if br == 0 {
		return d
	}
	return e
}

// redc is Montgomery reduction: for t < q 2^256 it returns t 2^-256 mod q.
func (f *Field) redc(t [8]uint64) Elem {
	q := &f.q
	for i := 0; i < 4; i++ {
		m := t[i] * f.m0inv
		var carry uint64
		for j := 0; j < 4; j++ {
			hi, lo := bits.Mul64(m, q[j])
			var c uint64
			lo, c = bits.Add64(lo, t[i+j], 0)
			hi += c
			lo, c = bits.Add64(lo, carry, 0)
			hi += c
			t[i+j], carry = lo, hi
		}
		for k := i + 4; k < 8 && carry != 0; k++ {
			t[k], carry = bits.Add64(t[k], carry, 0)
		}
	}
	// (t + m q)/R < 2q < 2^256.
	return f.condSub(Elem{t[4], t[5], t[6], t[7]})
}

// acc5 is a 320-bit accumulator for lazily reduced M127 dot products.
type acc5 [5]uint64

func (a *acc5) add4(p [4]uint64) {
	var c uint64
	a[0], c = bits.Add64(a[0], p[0], 0)
	a[1], c = bits.Add64(a[1], p[1], c)
	a[2], c = bits.Add64(a[2], p[2], c)
	a[3], c = bits.Add64(a[3], p[3], c)
	a[4] += c
}

// reduceM127Wide reduces a 320-bit value modulo 2^127-1.
func reduceM127Wide(a acc5) Elem {
	// Chunks at bits 0, 127, 254 (the last one is at most 66 bits).
	c0 := Elem{a[0], a[1] & m63}
	c1 := shrN(Elem{a[1], a[2], a[3], a[4]}, 63)
	c1 = Elem{c1[0], c1[1] & m63}
	c2 := shrN(Elem{a[3], a[4]}, 62) // bits 254..319
	s0, c := bits.Add64(c0[0], c2[0], 0)
	s1, _ := bits.Add64(c0[1], c2[1], c) // < 2^127 + 2^66
	s := foldM127(s0, s1)                // < q
	s0, c = bits.Add64(s[0], c1[0], 0)
	s1, _ = bits.Add64(s[1], c1[1], c) // < 2q < 2^128
	return foldM127(s0, s1)
}

// acc9 is a 576-bit accumulator for lazily reduced P25519 dot products.
type acc9 [9]uint64

func (a *acc9) add8(p [8]uint64) {
	var c uint64
	for i := 0; i < 8; i++ {
		a[i], c = bits.Add64(a[i], p[i], c)
	}
	a[8] += c
}

// reduceP25519Wide reduces a 576-bit value modulo 2^255-19.
func reduceP25519Wide(a acc9) Elem {
	// a = lo + 2^256 hi with hi < 2^320: r = lo + 38 hi < 2^327.
	var r [6]uint64
	var carry uint64
	for i := 0; i < 5; i++ {
		hiw := a[4+i]
		var lo0 uint64
		if i < 4 {
			lo0 = a[i]
		}
		hi, lo := bits.Mul64(hiw, 38)
		var c uint64
		lo, c = bits.Add64(lo, lo0, 0)
		hi += c
		lo, c = bits.Add64(lo, carry, 0)
		hi += c
		r[i], carry = lo, hi
	}
	r[5] = carry
	// Once more: r = lo' + 2^256 hi' with hi' < 2^71.
	var s [5]uint64
	carry = 0
	for i := 0; i < 4; i++ {
		var hiw uint64
		if i < 2 {
			hiw = r[4+i]
		}
		hi, lo := bits.Mul64(hiw, 38)
		var c uint64
		lo, c = bits.Add64(lo, r[i], 0)
		hi += c
		lo, c = bits.Add64(lo, carry, 0)
		hi += c
		s[i], carry = lo, hi
	}
	s[4] = carry
	return foldP25519(s)
}

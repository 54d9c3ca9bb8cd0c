package mpc

import "math/bits"

// This file holds the limb-level kernels behind Field.Mul and the lazily
// reduced dot products of matrix.go. None of it allocates.
//
// The kernels take and return limbs as separate uint64 values, not as Elem:
// Go keeps arrays in memory, and an Elem assembled from 8-byte stores and
// then copied with 16-byte loads defeats store forwarding. Passing limbs
// keeps them in registers; the first version of this file, which returned
// [4]uint64 and [8]uint64, was 5-10 times slower.

const m63 = 1<<63 - 1

// ---------------------------------------------------------------------------
// q = 2^127 - 1. Elements are a0 + a1 2^64 with a1 < 2^63.

// mulM127 returns a b mod 2^127-1 for a = a0 + a1 2^64, b = b0 + b1 2^64,
// both below 2^127.
//
// a b = a0 b0 + (a0 b1 + a1 b0) 2^64 + a1 b1 2^128 and 2^128 = 2 (mod q).
// With a0 b0 = l00 + h00 2^64, s = a0 b1 + a1 b0 = s0 + s1 2^64 (below 2^128
// because a1, b1 < 2^63) and 2 a1 b1 = (2 a1) b1 = l11 + h11 2^64 (2 a1 fits
// in 64 bits), a b = l00 + l11 + 2 s1 + (h00 + h11 + s0) 2^64 (mod q), a sum
// w = w0 + w1 2^64 + w2 2^128 with w2 <= 3.
func mulM127(a0, a1, b0, b1 uint64) (r0, r1 uint64) {
	h00, l00 := bits.Mul64(a0, b0)
	h01, l01 := bits.Mul64(a0, b1)
	h10, l10 := bits.Mul64(a1, b0)
	h11, l11 := bits.Mul64(a1<<1, b1)
	s0, c := bits.Add64(l01, l10, 0)
	s1, _ := bits.Add64(h01, h10, c)
	w0, c := bits.Add64(l00, l11, 0)
	w1, c := bits.Add64(h00, h11, c)
	w2 := c
	w0, c = bits.Add64(w0, s1<<1, 0)
	w1, c = bits.Add64(w1, s0, c)
	w2 += c
	w1, c = bits.Add64(w1, s1>>63, 0)
	w2 += c
	return foldM127(w0, w1, w2)
}

// foldM127 returns w mod 2^127-1 for w = w0 + w1 2^64 + w2 2^128, w2 < 2^63.
func foldM127(w0, w1, w2 uint64) (r0, r1 uint64) {
	// 2^127 = 1 (mod q): u = (w mod 2^127) + (w >> 127) < 2^127 + 2^64.
	u0, c := bits.Add64(w0, w1>>63|w2<<1, 0)
	u1 := w1&m63 + c
	// u >= q iff u + 1 >= 2^127, and then u - q = (u + 1) mod 2^127.
	_, c = bits.Add64(u0, 1, 0)
	t := (u1 + c) >> 63
	r0, c = bits.Add64(u0, t, 0)
	r1 = (u1 + c) & m63
	return r0, r1
}

// dotM127 returns sum_k a[k] b[k*stride] mod 2^127-1 with one reduction.
//
// Each product x y = l00 + (h00 + l01 + l10) 2^64 + (h01 + h10 + l11) 2^128
// + h11 2^192 (hij, lij the halves of x_i y_j) is, since 2^128 = 2 (mod q),
// l00 + 2m + (h00 + l01 + l10 + 2 h11) 2^64 with m = h01 + h10 + l11 < 2^65
// (h01, h10 < 2^63 and h11 < 2^62 because x1, y1 < 2^63). The loop sums
// A = sum l00, B = sum (h00 + l01 + l10 + 2 h11) and M = sum m in 128 bits
// each (exact for fewer than 2^61 terms) and returns A + 2M + 2^64 B mod q.
func dotM127(a, b []Elem, stride int) (r0, r1 uint64) {
	var a0, a1, b0, b1, m0, m1 uint64
	for k := range a {
		x, y := &a[k], &b[k*stride]
		h00, l00 := bits.Mul64(x[0], y[0])
		h01, l01 := bits.Mul64(x[0], y[1])
		h10, l10 := bits.Mul64(x[1], y[0])
		h11, l11 := bits.Mul64(x[1], y[1])
		var c uint64
		a0, c = bits.Add64(a0, l00, 0)
		a1, _ = bits.Add64(a1, 0, c)
		b0, c = bits.Add64(b0, h00, 0)
		b1, _ = bits.Add64(b1, 0, c)
		b0, c = bits.Add64(b0, l01, 0)
		b1, _ = bits.Add64(b1, 0, c)
		b0, c = bits.Add64(b0, l10, 0)
		b1, _ = bits.Add64(b1, 0, c)
		b0, c = bits.Add64(b0, h11<<1, 0)
		b1, _ = bits.Add64(b1, 0, c)
		m0, c = bits.Add64(m0, h01+h10, 0)
		m1, _ = bits.Add64(m1, 0, c)
		m0, c = bits.Add64(m0, l11, 0)
		m1, _ = bits.Add64(m1, 0, c)
	}
	// w = A + 2M + 2^64 B < 2^192, with w2 < 2^63 for fewer than 2^61 terms.
	var w0, w1, w2, c uint64
	w0, c = bits.Add64(a0, m0<<1, 0)
	w1, c = bits.Add64(a1, m1<<1|m0>>63, c)
	w2 = m1>>63 + c
	w1, c = bits.Add64(w1, b0, 0)
	w2 += b1 + c
	return foldM127(w0, w1, w2)
}

// ---------------------------------------------------------------------------
// Four-limb products, shared by q = 2^255 - 19 and the Montgomery path.

// mul256 returns the 512-bit product of a, b < 2^256, computed row by row:
// each row a_i b is formed with one carry chain and added with another.
func mul256(a0, a1, a2, a3, b0, b1, b2, b3 uint64) (t0, t1, t2, t3, t4, t5, t6, t7 uint64) {
	var c uint64
	// Row 0.
	h0, l0 := bits.Mul64(a0, b0)
	h1, l1 := bits.Mul64(a0, b1)
	h2, l2 := bits.Mul64(a0, b2)
	h3, l3 := bits.Mul64(a0, b3)
	t0 = l0
	t1, c = bits.Add64(h0, l1, 0)
	t2, c = bits.Add64(h1, l2, c)
	t3, c = bits.Add64(h2, l3, c)
	t4 = h3 + c
	// Rows 1-3: r = a_i b (five limbs), then t[i..i+4] += r.
	t1, t2, t3, t4, t5 = mulAddRow(a1, b0, b1, b2, b3, t1, t2, t3, t4)
	t2, t3, t4, t5, t6 = mulAddRow(a2, b0, b1, b2, b3, t2, t3, t4, t5)
	t3, t4, t5, t6, t7 = mulAddRow(a3, b0, b1, b2, b3, t3, t4, t5, t6)
	return
}

// mulAddRow returns x + a (b0 + b1 2^64 + b2 2^128 + b3 2^192) for a four-limb
// x, as five limbs (the sum is below 2^320).
func mulAddRow(a, b0, b1, b2, b3, x0, x1, x2, x3 uint64) (r0, r1, r2, r3, r4 uint64) {
	h0, l0 := bits.Mul64(a, b0)
	h1, l1 := bits.Mul64(a, b1)
	h2, l2 := bits.Mul64(a, b2)
	h3, l3 := bits.Mul64(a, b3)
	var c uint64
	l1, c = bits.Add64(l1, h0, 0)
	l2, c = bits.Add64(l2, h1, c)
	l3, c = bits.Add64(l3, h2, c)
	h3 += c // a b < 2^320: no carry out
	r0, c = bits.Add64(x0, l0, 0)
	r1, c = bits.Add64(x1, l1, c)
	r2, c = bits.Add64(x2, l2, c)
	r3, c = bits.Add64(x3, l3, c)
	r4 = h3 + c
	return
}

// ---------------------------------------------------------------------------
// q = 2^255 - 19: 2^255 = 19 and 2^256 = 38 (mod q).

// reduceP25519 returns t mod 2^255-19 for any t < 2^512.
func reduceP25519(t0, t1, t2, t3, t4, t5, t6, t7 uint64) (r0, r1, r2, r3 uint64) {
	// r = lo + 38 hi < 39 2^256: five limbs, r4 < 39.
	h4, l4 := bits.Mul64(t4, 38)
	h5, l5 := bits.Mul64(t5, 38)
	h6, l6 := bits.Mul64(t6, 38)
	h7, l7 := bits.Mul64(t7, 38)
	var c, r4 uint64
	r0, c = bits.Add64(t0, l4, 0)
	r1, c = bits.Add64(t1, l5, c)
	r2, c = bits.Add64(t2, l6, c)
	r3, c = bits.Add64(t3, l7, c)
	r4 = c
	r1, c = bits.Add64(r1, h4, 0)
	r2, c = bits.Add64(r2, h5, c)
	r3, c = bits.Add64(r3, h6, c)
	r4 += h7 + c
	return canonP25519(r0, r1, r2, r3, r4)
}

// canonP25519 returns r mod 2^255-19 for r = r0 + ... + r4 2^256, r4 < 2^57.
func canonP25519(r0, r1, r2, r3, r4 uint64) (v0, v1, v2, v3 uint64) {
	// v = (r mod 2^255) + 19 (r >> 255) < 2^255 + 2^64.
	top := r4<<1 | r3>>63
	var c uint64
	v0, c = bits.Add64(r0, 19*top, 0)
	v1, c = bits.Add64(r1, 0, c)
	v2, c = bits.Add64(r2, 0, c)
	v3 = r3&m63 + c
	// v >= q iff v + 19 >= 2^255, and then v - q = (v + 19) mod 2^255.
	_, c = bits.Add64(v0, 19, 0)
	_, c = bits.Add64(v1, 0, c)
	_, c = bits.Add64(v2, 0, c)
	t := (v3 + c) >> 63
	v0, c = bits.Add64(v0, 19*t, 0)
	v1, c = bits.Add64(v1, 0, c)
	v2, c = bits.Add64(v2, 0, c)
	v3 = (v3 + c) & m63
	return
}

// dot512 returns sum_k a[k] b[k*stride] exactly, in nine limbs (exact for
// up to 2^64 terms): the lazily reduced core of dotP25519 and dotMont.
func dot512(a, b []Elem, stride int) (s0, s1, s2, s3, s4, s5, s6, s7, s8 uint64) {
	for k := range a {
		x, y := &a[k], &b[k*stride]
		t0, t1, t2, t3, t4, t5, t6, t7 := mul256(x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3])
		var c uint64
		s0, c = bits.Add64(s0, t0, 0)
		s1, c = bits.Add64(s1, t1, c)
		s2, c = bits.Add64(s2, t2, c)
		s3, c = bits.Add64(s3, t3, c)
		s4, c = bits.Add64(s4, t4, c)
		s5, c = bits.Add64(s5, t5, c)
		s6, c = bits.Add64(s6, t6, c)
		s7, c = bits.Add64(s7, t7, c)
		s8 += c
	}
	return
}

// dotP25519 returns sum_k a[k] b[k*stride] mod 2^255-19 with one reduction.
func dotP25519(a, b []Elem, stride int) (r0, r1, r2, r3 uint64) {
	return reduceP25519Wide(dot512(a, b, stride))
}

// reduceP25519Wide returns s mod 2^255-19 for any s < 2^576.
func reduceP25519Wide(s0, s1, s2, s3, s4, s5, s6, s7, s8 uint64) (r0, r1, r2, r3 uint64) {
	// r = lo + 38 hi with hi = s4..s8 < 2^320: r < 2^327, six limbs.
	h4, l4 := bits.Mul64(s4, 38)
	h5, l5 := bits.Mul64(s5, 38)
	h6, l6 := bits.Mul64(s6, 38)
	h7, l7 := bits.Mul64(s7, 38)
	h8, l8 := bits.Mul64(s8, 38)
	var c, r4, r5 uint64
	r0, c = bits.Add64(s0, l4, 0)
	r1, c = bits.Add64(s1, l5, c)
	r2, c = bits.Add64(s2, l6, c)
	r3, c = bits.Add64(s3, l7, c)
	r4, c = bits.Add64(l8, 0, c)
	r5 = c
	r1, c = bits.Add64(r1, h4, 0)
	r2, c = bits.Add64(r2, h5, c)
	r3, c = bits.Add64(r3, h6, c)
	r4, c = bits.Add64(r4, h7, c)
	r5 += h8 + c
	// Once more with hi = r4 + r5 2^64 < 2^71: the result is below 2^257.
	g4, k4 := bits.Mul64(r4, 38)
	k5 := r5 * 38 // < 2^13
	r0, c = bits.Add64(r0, k4, 0)
	r1, c = bits.Add64(r1, g4+k5, c) // g4 < 38, no overflow
	r2, c = bits.Add64(r2, 0, c)
	r3, c = bits.Add64(r3, 0, c)
	return canonP25519(r0, r1, r2, r3, c)
}

// ---------------------------------------------------------------------------
// Generic odd q: Montgomery arithmetic with R = 2^256.

// redc is Montgomery reduction: for t < q 2^256 it returns t 2^-256 mod q,
// fully reduced.
func (f *Field) redc(t0, t1, t2, t3, t4, t5, t6, t7 uint64) (r0, r1, r2, r3 uint64) {
	q0, q1, q2, q3 := f.q[0], f.q[1], f.q[2], f.q[3]
	var c, u uint64
	// Round i adds m q 2^(64 i) with m = t_i (-q^-1) mod 2^64, which clears
	// limb i; the fifth limb u of t[i..i+3] + m q is carried upwards.
	_, t1, t2, t3, u = mulAddRow(t0*f.m0inv, q0, q1, q2, q3, t0, t1, t2, t3)
	t4, c = bits.Add64(t4, u, 0)
	t5, c = bits.Add64(t5, 0, c)
	t6, c = bits.Add64(t6, 0, c)
	t7, _ = bits.Add64(t7, 0, c)
	_, t2, t3, t4, u = mulAddRow(t1*f.m0inv, q0, q1, q2, q3, t1, t2, t3, t4)
	t5, c = bits.Add64(t5, u, 0)
	t6, c = bits.Add64(t6, 0, c)
	t7, _ = bits.Add64(t7, 0, c)
	_, t3, t4, t5, u = mulAddRow(t2*f.m0inv, q0, q1, q2, q3, t2, t3, t4, t5)
	t6, c = bits.Add64(t6, u, 0)
	t7, _ = bits.Add64(t7, 0, c)
	_, t4, t5, t6, u = mulAddRow(t3*f.m0inv, q0, q1, q2, q3, t3, t4, t5, t6)
	t7 += u
	// (t + sum m_i q 2^(64 i)) / 2^256 < (q 2^256 + 2^256 q) / 2^256 = 2q,
	// which is below 2^256 (q < 2^255): no carry leaves limb 7 in any round.
	return condSubQ(t4, t5, t6, t7, q0, q1, q2, q3)
}

// condSubQ returns x - q if x >= q, else x, for x < 2q.
func condSubQ(x0, x1, x2, x3, q0, q1, q2, q3 uint64) (r0, r1, r2, r3 uint64) {
	var b uint64
	r0, b = bits.Sub64(x0, q0, 0)
	r1, b = bits.Sub64(x1, q1, b)
	r2, b = bits.Sub64(x2, q2, b)
	r3, b = bits.Sub64(x3, q3, b)
	// b = 1: x < q, keep x. Select without a branch (the borrow is random).
	mask := -b
	r0 ^= (r0 ^ x0) & mask
	r1 ^= (r1 ^ x1) & mask
	r2 ^= (r2 ^ x2) & mask
	r3 ^= (r3 ^ x3) & mask
	return
}

// mulMont returns a b mod q for the generic path: redc(a b) = a b R^-1, and
// a second Montgomery product with R^2 mod q restores the factor R.
func (f *Field) mulMont(a0, a1, a2, a3, b0, b1, b2, b3 uint64) (r0, r1, r2, r3 uint64) {
	r0, r1, r2, r3 = f.redc(mul256(a0, a1, a2, a3, b0, b1, b2, b3))
	return f.redc(mul256(r0, r1, r2, r3, f.r2[0], f.r2[1], f.r2[2], f.r2[3]))
}

// dotMont returns sum_k a[k] b[k*stride] mod q for the generic path. The
// exact sum s = lo + 2^256 mid + 2^512 top (dot512) is reduced with three
// Montgomery reductions, each of an input below q 2^256 as redc requires:
// redc(lo (R mod q)) = lo, redc(mid (R^2 mod q)) = mid R and
// redc(top (R^3 mod q)) = top R^2 (mod q), with R = 2^256.
func (f *Field) dotMont(a, b []Elem, stride int) (r0, r1, r2, r3 uint64) {
	s0, s1, s2, s3, s4, s5, s6, s7, s8 := dot512(a, b, stride)
	r0, r1, r2, r3 = f.redc(mul256(s0, s1, s2, s3, f.r1[0], f.r1[1], f.r1[2], f.r1[3]))
	x0, x1, x2, x3 := f.redc(mul256(s4, s5, s6, s7, f.r2[0], f.r2[1], f.r2[2], f.r2[3]))
	r0, r1, r2, r3 = f.addLimbs(r0, r1, r2, r3, x0, x1, x2, x3)
	if s8 != 0 {
		x0, x1, x2, x3 = f.redc(mul256(s8, 0, 0, 0, f.r3[0], f.r3[1], f.r3[2], f.r3[3]))
		r0, r1, r2, r3 = f.addLimbs(r0, r1, r2, r3, x0, x1, x2, x3)
	}
	return
}

// addLimbs returns x + y mod q for x, y < q (any field: x + y < 2q < 2^256).
func (f *Field) addLimbs(x0, x1, x2, x3, y0, y1, y2, y3 uint64) (r0, r1, r2, r3 uint64) {
	var c uint64
	x0, c = bits.Add64(x0, y0, 0)
	x1, c = bits.Add64(x1, y1, c)
	x2, c = bits.Add64(x2, y2, c)
	x3, _ = bits.Add64(x3, y3, c)
	return condSubQ(x0, x1, x2, x3, f.q[0], f.q[1], f.q[2], f.q[3])
}

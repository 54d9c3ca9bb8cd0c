package mpc

import (
	"errors"
	"fmt"
	"testing"
)

// Benchmarks for the hot paths. Run with
//
//	go test -run '^$' -bench . -benchmem ./pkg/mpc/
//
// The "generic" fields are fixed random odd moduli of the given size, served
// by the Montgomery path.

// benchFields are the fields every arithmetic benchmark runs over.
func benchFields(b *testing.B) []*Field {
	return []*Field{
		mustField(b, PresetM127),
		mustField(b, PresetP25519),
		namedField(b, "generic127", oddModulus(127, 127)),
		namedField(b, "generic255", oddModulus(255, 255)),
	}
}

// namedField builds a generic field and relabels it for sub-benchmark names.
func namedField(tb testing.TB, label string, q Elem) *Field {
	tb.Helper()
	f, err := NewField(q)
	if err != nil {
		tb.Fatal(err)
	}
	f.name = label
	return f
}

// BenchmarkMul is the cost of one modular multiplication in a loop over
// independent operands (throughput, the case of every vector operation
// here), through the pointer form MulTo that the matrix code uses. The
// operands cycle through 256 pairs that stay in L1 cache.
func BenchmarkMul(b *testing.B) {
	for _, f := range benchFields(b) {
		b.Run(f.Name(), func(b *testing.B) {
			r := seeded(1)
			x := mustRandomMatrix(b, f, r, 256, 1).Data
			y := mustRandomMatrix(b, f, r, 256, 1).Data
			z := make([]Elem, 256)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i & 255
				f.MulTo(&z[k], &x[k], &y[k])
				i++
			}
		})
	}
}

// BenchmarkMulValue is BenchmarkMul through the value form Mul: the
// difference is Go copying 32-byte arrays in and out.
func BenchmarkMulValue(b *testing.B) {
	for _, f := range benchFields(b) {
		b.Run(f.Name(), func(b *testing.B) {
			r := seeded(1)
			x := mustRandomMatrix(b, f, r, 256, 1).Data
			y := mustRandomMatrix(b, f, r, 256, 1).Data
			z := make([]Elem, 256)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i & 255
				z[k] = f.Mul(x[k], y[k])
				i++
			}
		})
	}
}

// BenchmarkMulLatency is the latency of MulTo: each product feeds the next.
func BenchmarkMulLatency(b *testing.B) {
	for _, f := range benchFields(b) {
		b.Run(f.Name(), func(b *testing.B) {
			r := seeded(1)
			x := mustRandom(b, f, r)
			y := mustRandom(b, f, r)
			b.ReportAllocs()
			for b.Loop() {
				f.MulTo(&x, &x, &y)
			}
			sinkElem = x
		})
	}
}

var sinkElem Elem

func BenchmarkMatVec(b *testing.B) {
	for _, f := range benchFields(b) {
		for d := 10; d <= 100; d += 10 {
			b.Run(fmt.Sprintf("%s/d=%d", f.Name(), d), func(b *testing.B) {
				r := seeded(2)
				a := mustRandomMatrix(b, f, r, d, d)
				v := mustRandomMatrix(b, f, r, d, 1)
				dst := NewMatrix(d, 1)
				b.ReportAllocs()
				for b.Loop() {
					f.MatMul(dst, a, v)
				}
			})
		}
	}
}

// BenchmarkProtocol1 is both parties' local computation of one Protocol 1
// run of a d x d shared matrix by a shared d-vector (the wire is not
// included): step 1 (openings), the reconstruction of S and T, and step 2.
// The fixed variant opens only T; S was opened at set-up. "fixed-prepared" is the fixed mask with
// S [[V]]_i + [[W]]_i precomputed (MulPrepare, not timed: the party does it
// between ticks), i.e. what remains on a tick's critical path.
func BenchmarkProtocol1(b *testing.B) {
	f := mustField(b, PresetM127)
	for _, name := range []string{"per-tick", "fixed", "fixed-prepared"} {
		v, prepared := FixedMask, name == "fixed-prepared"
		if name == "per-tick" {
			v = PerTick
		}
		for d := 10; d <= 100; d += 10 {
			b.Run(fmt.Sprintf("%s/d=%d", name, d), func(b *testing.B) {
				r := seeded(3)
				var x, y [2]Matrix
				x[0], x[1] = mustShare(b, f, r, mustRandomMatrix(b, f, r, d, d))
				y[0], y[1] = mustShare(b, f, r, mustRandomMatrix(b, f, r, d, 1))
				t0, t1, err := f.GenTriple(r, r, d, d, 1)
				if err != nil {
					b.Fatal(err)
				}
				tr := [2]TripleShare{t0, t1}
				var sOut, tOut, z, tmp [2]Matrix
				for i := range 2 {
					sOut[i], tOut[i] = NewMatrix(d, d), NewMatrix(d, 1)
					z[i], tmp[i] = NewMatrix(d, 1), NewMatrix(d, 1)
				}
				s, t := NewMatrix(d, d), NewMatrix(d, 1)
				if v == FixedMask {
					for i := range 2 {
						f.MulOpen(sOut[i], x[i], tr[i].U)
					}
					f.Reconst(s, sOut[0], sOut[1])
				}
				var pre, us [2]Matrix
				if prepared {
					for i := range 2 {
						pre[i], us[i] = NewMatrix(d, 1), f.FixedUS(i, tr[i].U, s)
						f.MulPrepare(pre[i], s, tr[i])
					}
				}
				b.ReportAllocs()
				for b.Loop() {
					for i := range 2 {
						if v == PerTick {
							f.MulOpen(sOut[i], x[i], tr[i].U)
						}
						f.MulOpen(tOut[i], y[i], tr[i].V)
					}
					if v == PerTick {
						f.Reconst(s, sOut[0], sOut[1])
					}
					f.Reconst(t, tOut[0], tOut[1])
					for i := range 2 {
						if prepared {
							f.MulClosePrepared(z[i], us[i], t, pre[i])
						} else {
							f.MulClose(z[i], i, s, t, tr[i], tr[i].U, tmp[i])
						}
					}
				}
			})
		}
	}
}

// BenchmarkProtocol2 is the local computation of both parties in one
// Protocol 2 truncation of a shared d-vector: step 1, P1's reconstruction of
// Y, and step 3.
func BenchmarkProtocol2(b *testing.B) {
	f := mustField(b, PresetM127)
	const l, lambda = 9, 40
	kappa := f.BitLen() - 2 - lambda
	for d := 10; d <= 100; d += 10 {
		b.Run(fmt.Sprintf("d=%d", d), func(b *testing.B) {
			r := seeded(4)
			x := NewMatrix(d, 1)
			if err := f.FillSigned(r, x.Data, kappa); err != nil {
				b.Fatal(err)
			}
			var xs, ys, zs [2]Matrix
			xs[0], xs[1] = mustShare(b, f, r, x)
			m0, m1, err := f.GenMask(r, r, d, 1, kappa, l, lambda)
			if err != nil {
				b.Fatal(err)
			}
			ms := [2]MaskShare{m0, m1}
			for i := range 2 {
				ys[i], zs[i] = NewMatrix(d, 1), NewMatrix(d, 1)
			}
			y := NewMatrix(d, 1)
			inv := f.InvPow2(l)
			b.ReportAllocs()
			for b.Loop() {
				for i := range 2 {
					f.TruncOpen(ys[i], i, xs[i], ms[i], l)
				}
				f.Reconst(y, ys[0], ys[1])
				for i := range 2 {
					f.TruncClose(zs[i], i, xs[i], y, ms[i], l, inv)
				}
			}
		})
	}
}

// BenchmarkDealer measures dealer throughput: Items (triple and mask for one
// tick, both parties) per second, with and without seed compression.
func BenchmarkDealer(b *testing.B) {
	f := mustField(b, PresetM127)
	shapes := []struct {
		name    string
		n, m, p int
	}{
		{"pendulum", 3, 1, 2}, // Φ is 4 x 5
		{"d100", 90, 10, 10},  // Φ is 100 x 100
	}
	for _, sh := range shapes {
		for _, compress := range []bool{true, false} {
			name := "plain"
			if compress {
				name = "compress"
			}
			b.Run(sh.name+"/"+name, func(b *testing.B) {
				prm := Params{Field: f, N: sh.n, M: sh.m, P: sh.p, K: 18, L: 9, Lambda: 40}
				d, err := NewDealer(prm, NewSession([32]byte{5}), compress)
				if err != nil {
					b.Fatal(err)
				}
				r := seeded(5)
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.Next(r); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
				b.ReportMetric(float64(DealerBytesPerTick(prm, compress)), "B/item")
			})
		}
	}
}

// TestHotPathsDoNotAllocate: the per-tick arithmetic allocates nothing.
func TestHotPathsDoNotAllocate(t *testing.T) {
	for _, name := range []string{PresetM127, PresetP25519, "1000000000000000000000000000000000000000000000000000000000007"} {
		f := mustField(t, name)
		r := seeded(131)
		const d = 10
		a, b := mustRandomMatrix(t, f, r, d, d), mustRandomMatrix(t, f, r, d, 1)
		x, y := mustRandom(t, f, r), mustRandom(t, f, r)
		dst, tmp := NewMatrix(d, 1), NewMatrix(d, 1)
		t0, t1, err := f.GenTriple(r, r, d, d, 1)
		if err != nil {
			t.Fatal(err)
		}
		m0, m1, err := f.GenMask(r, r, d, 1, f.BitLen()-42, 9, 40)
		if err != nil {
			t.Fatal(err)
		}
		inv := f.InvPow2(9)
		prg := NewPRG([32]byte{}, [16]byte{})
		buf := make([]Elem, 64)
		for op, fn := range map[string]func(){
			"Mul":              func() { sinkElem = f.Mul(x, y) },
			"MulTo":            func() { f.MulTo(&sinkElem, &x, &y) },
			"Add":              func() { sinkElem = f.Add(x, y) },
			"Sub":              func() { sinkElem = f.Sub(x, y) },
			"MatMul":           func() { f.MatMul(dst, a, b) },
			"MatMulAdd":        func() { f.MatMulAdd(dst, a, b) },
			"MulOpen":          func() { f.MulOpen(dst, b, t0.V) },
			"MulClose 0":       func() { f.MulClose(dst, 0, a, b, t0, t0.U, tmp) },
			"MulClose 1":       func() { f.MulClose(dst, 1, a, b, t1, t1.U, tmp) },
			"TruncOpen":        func() { f.TruncOpen(dst, 1, b, m1, 9) },
			"TruncClose":       func() { f.TruncClose(dst, 1, b, b, m1, 9, inv) },
			"TruncClose0":      func() { f.TruncClose(dst, 0, b, Matrix{}, m0, 9, inv) },
			"FillRandom (PRG)": func() { f.FillRandom(prg, buf) },
			"FillSigned (PRG)": func() { f.FillSigned(prg, buf, 40) },
		} {
			if n := testing.AllocsPerRun(50, fn); n != 0 {
				t.Errorf("%s: %s allocates %.1f times per call", name, op, n)
			}
		}
	}
	// A whole tick of Protocol 3 on both parties, both variants.
	f := mustField(t, PresetM127)
	for _, v := range []Variant{PerTick, FixedMask} {
		p0, p1, d, sess := twoParties(t, f, v, true)
		r := seeded(132)
		y0, y1 := mustShare(t, f, r, NewMatrix(2, 1))
		mat0, mat1 := tickMaterial(t, d, sess, r)
		tick := func() {
			msg0, err0 := p0.Begin(y0, mat0)
			msg1, err1 := p1.Begin(y1, mat1)
			_, tr, err2 := p0.Multiply(msg1)
			_, _, err3 := p1.Multiply(msg0)
			err4 := p0.Finish(nil)
			err5 := p1.Finish(tr)
			if err := errors.Join(err0, err1, err2, err3, err4, err5); err != nil {
				t.Fatal(err)
			}
		}
		if n := testing.AllocsPerRun(50, tick); n != 0 {
			t.Errorf("%v: Party.Begin/Multiply/Finish allocate %.1f times per tick", v, n)
		}
	}
}

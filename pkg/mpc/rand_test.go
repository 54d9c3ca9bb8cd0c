package mpc

import (
	"bytes"
	"errors"
	"io"
	"math/big"
	"strings"
	"testing"
	"testing/iotest"
)

// TestFillRandomToyUniform: on toy moduli every value appears, with counts
// that pass a chi-square test (fixed seed: deterministic).
func TestFillRandomToyUniform(t *testing.T) {
	for _, q := range []uint64{3, 15, 251} {
		f := toyField(t, q)
		xs := make([]Elem, 200*int(q))
		if err := f.FillRandom(seeded(41), xs); err != nil {
			t.Fatal(err)
		}
		counts := make([]int, q)
		for _, x := range xs {
			if x[0] >= q || x[1]|x[2]|x[3] != 0 {
				t.Fatalf("q=%d: FillRandom gave %v", q, x)
			}
			counts[x[0]]++
		}
		if chi := chiSquare(counts); chi > chiThreshold(int(q)-1) {
			t.Errorf("q=%d: chi-square %.1f over %d values exceeds %.1f", q, chi, q, chiThreshold(int(q)-1))
		}
	}
}

// TestFillRandomRejects draws from moduli where rejection is frequent
// (q just above a power of two) and where it is rare (the presets, fed a
// candidate equal to q), and checks every output is below q.
func TestFillRandomRejects(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		xs := make([]Elem, 1000)
		if err := f.FillRandom(seeded(42), xs); err != nil {
			t.Fatal(err)
		}
		for _, x := range xs {
			if cmp(x, f.Modulus()) >= 0 {
				t.Fatalf("%s: FillRandom gave %s >= q", tf.name, toBig(x))
			}
		}
	}
	// 2^127-1 has the encoding ff..ff 7f; a candidate of all ones is q.
	f := mustField(t, PresetM127)
	src := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte{0xff}, 16)), seeded(43))
	xs := make([]Elem, 3)
	if err := f.FillRandom(src, xs); err != nil {
		t.Fatal(err)
	}
	want := make([]Elem, 3)
	if err := f.FillRandom(seeded(43), want); err != nil {
		t.Fatal(err)
	}
	// For the presets FillRandom reads exactly one candidate per missing
	// element, so after the rejected one the stream continues unbroken.
	for i := range xs {
		if xs[i] != want[i] {
			t.Errorf("after rejecting q: element %d = %s, want %s", i, toBig(xs[i]), toBig(want[i]))
		}
	}
}

func TestFillRandomDeterministic(t *testing.T) {
	f := mustField(t, PresetP25519)
	a := mustRandomMatrix(t, f, seeded(44), 7, 9)
	b := mustRandomMatrix(t, f, seeded(44), 7, 9)
	c := mustRandomMatrix(t, f, seeded(45), 7, 9)
	if !a.Equal(b) {
		t.Errorf("same seed, different matrices")
	}
	if a.Equal(c) {
		t.Errorf("different seeds, same matrix")
	}
	// A reader returning one byte per call gives the same elements as the
	// PRG read in bulk.
	d := mustRandomMatrix(t, f, iotest.OneByteReader(seeded(44)), 7, 9)
	if !a.Equal(d) {
		t.Errorf("one-byte reads changed the elements")
	}
	// Nonces separate streams under one seed.
	var p, q [32]byte
	NewPRG([32]byte{1}, [16]byte{1}).Read(p[:])
	NewPRG([32]byte{1}, [16]byte{2}).Read(q[:])
	if p == q {
		t.Errorf("different nonces, same keystream")
	}
}

func TestFillSigned(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		for _, b := range []int{1, 2, 3, 8, 9, 40, 64, 65, f.BitLen() - 1} {
			if b > f.BitLen()-1 {
				continue
			}
			xs := make([]Elem, 2000)
			if err := f.FillSigned(seeded(46), xs, b); err != nil {
				t.Fatalf("%s: FillSigned(%d): %v", tf.name, b, err)
			}
			sawMin, sawNeg, sawPos := false, false, false
			for _, x := range xs {
				if !f.InSigned(x, b) {
					t.Fatalf("%s: FillSigned(%d) gave %s outside Z<%d>", tf.name, b, f.String(x), b)
				}
				c := centeredBig(f, x)
				sawNeg = sawNeg || c.Sign() < 0
				sawPos = sawPos || c.Sign() > 0
				sawMin = sawMin || c.Cmp(new(big.Int).Neg(pow2Big(b-1))) == 0
			}
			if !sawNeg || (b > 1 && !sawPos) || (b <= 8 && !sawMin) {
				t.Errorf("%s: FillSigned(%d) misses part of Z<%d> (neg %v, pos %v, min %v)", tf.name, b, b, sawNeg, sawPos, sawMin)
			}
		}
		for _, b := range []int{0, -1, f.BitLen(), 300} {
			if err := f.FillSigned(seeded(46), make([]Elem, 1), b); !errors.Is(err, ErrParams) {
				t.Errorf("%s: FillSigned(%d) error = %v, want ErrParams", tf.name, b, err)
			}
		}
	}
	// Small widths are uniform: Z<3> has 8 values.
	f := mustField(t, PresetM127)
	xs := make([]Elem, 8000)
	if err := f.FillSigned(seeded(47), xs, 3); err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 8)
	for _, x := range xs {
		v, _ := f.Int64(x)
		counts[v+4]++
	}
	if chi := chiSquare(counts); chi > chiThreshold(7) {
		t.Errorf("FillSigned(3): chi-square %.1f exceeds %.1f (counts %v)", chi, chiThreshold(7), counts)
	}
}

func TestRandomnessErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	boom := errors.New("entropy ran out")
	for name, fn := range map[string]func(io.Reader) error{
		"FillRandom": func(r io.Reader) error { return f.FillRandom(r, make([]Elem, 4)) },
		"FillSigned": func(r io.Reader) error { return f.FillSigned(r, make([]Elem, 4), 40) },
		"Random":     func(r io.Reader) error { _, err := f.Random(r); return err },
	} {
		err := fn(iotest.ErrReader(boom))
		if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "mpc: reading randomness") {
			t.Errorf("%s with a failing reader: %v", name, err)
		}
		// A reader that ends early is an error too, never a short result.
		err = fn(bytes.NewReader(make([]byte, 3)))
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			t.Errorf("%s with a short reader: %v", name, err)
		}
	}
}

package mpc

import (
	"io"
	"testing"
)

// protocol1 runs Protocol 1 between two in-process parties on shares of X
// and Y with the triple shares tr (U taken from u[i], which is tr[i].U in the
// per-tick form and the fixed mask's shares in the fixed form). It returns the
// parties' shares of Z and the opened S and T.
func protocol1(f *Field, x, y [2]Matrix, tr [2]TripleShare, u [2]Matrix) (z [2]Matrix, s, t Matrix) {
	var sOut, tOut [2]Matrix
	for i := range 2 {
		sOut[i], tOut[i] = NewMatrix(x[i].Rows, x[i].Cols), NewMatrix(y[i].Rows, y[i].Cols)
		f.MulOpen(sOut[i], x[i], u[i])    // step 1: [[S]]_i = [[X]]_i - [[U]]_i
		f.MulOpen(tOut[i], y[i], tr[i].V) //         [[T]]_i = [[Y]]_i - [[V]]_i
	}
	s, t = f.ReconstNew(sOut[0], sOut[1]), f.ReconstNew(tOut[0], tOut[1])
	for i := range 2 {
		z[i] = NewMatrix(x[i].Rows, y[i].Cols)
		f.MulClose(z[i], i, s, t, tr[i], u[i], NewMatrix(y[i].Rows, y[i].Cols)) // step 2
	}
	return z, s, t
}

func TestGenTriple(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		r := seeded(71)
		for _, sh := range [][3]int{{1, 1, 1}, {4, 5, 1}, {3, 2, 4}, {10, 10, 1}} {
			seed := [32]byte{7, byte(sh[0])}
			t0, t1, err := f.GenTriple(r, NewPRG(seed, [16]byte{}), sh[0], sh[1], sh[2])
			if err != nil {
				t.Fatal(err)
			}
			u, v, w := f.ReconstNew(t0.U, t1.U), f.ReconstNew(t0.V, t1.V), f.ReconstNew(t0.W, t1.W)
			if u.Rows != sh[0] || u.Cols != sh[1] || v.Rows != sh[1] || v.Cols != sh[2] || w.Rows != sh[0] || w.Cols != sh[2] {
				t.Fatalf("%s %v: triple shapes U %dx%d V %dx%d W %dx%d", tf.name, sh, u.Rows, u.Cols, v.Rows, v.Cols, w.Rows, w.Cols)
			}
			if !w.Equal(bigMatMul(f, u, v)) {
				t.Fatalf("%s %v: W != U V", tf.name, sh)
			}
			// P0's shares are the r0 stream, in the order U0, V0, W0.
			r0 := NewPRG(seed, [16]byte{})
			for _, want := range []Matrix{t0.U, t0.V, t0.W} {
				if got := mustRandomMatrix(t, f, r0, want.Rows, want.Cols); !got.Equal(want) {
					t.Fatalf("%s %v: P0's shares are not the r0 stream", tf.name, sh)
				}
			}
		}
	}
}

func TestGenFixedTriple(t *testing.T) {
	f := mustField(t, PresetP25519)
	r := seeded(72)
	u := mustRandomMatrix(t, f, r, 4, 5)
	var vs []Matrix
	for range 5 {
		t0, t1, err := f.GenFixedTriple(r, r, u, 1)
		if err != nil {
			t.Fatal(err)
		}
		if t0.U.Data != nil || t1.U.Data != nil {
			t.Fatalf("fixed-mask triple shares carry U")
		}
		v, w := f.ReconstNew(t0.V, t1.V), f.ReconstNew(t0.W, t1.W)
		if !w.Equal(bigMatMul(f, u, v)) {
			t.Fatalf("W != U V for the fixed U")
		}
		for _, old := range vs {
			if old.Equal(v) {
				t.Fatalf("V repeated")
			}
		}
		vs = append(vs, v)
	}
}

// TestProtocol1 checks Reconst(Z) = X Y against math/big for random shares,
// in the per-tick form and in the fixed-mask form (one U, several Y).
func TestProtocol1(t *testing.T) {
	for _, tf := range bigFields(t) {
		f := tf.f
		r := seeded(73)
		for _, sh := range [][3]int{{1, 1, 1}, {4, 5, 1}, {3, 2, 4}, {1, 6, 1}, {6, 1, 2}} {
			x := mustRandomMatrix(t, f, r, sh[0], sh[1])
			var xs [2]Matrix
			xs[0], xs[1] = mustShare(t, f, r, x)
			// Per-tick: a fresh triple each multiplication.
			for range 3 {
				y := mustRandomMatrix(t, f, r, sh[1], sh[2])
				var ys [2]Matrix
				ys[0], ys[1] = mustShare(t, f, r, y)
				t0, t1, err := f.GenTriple(r, r, sh[0], sh[1], sh[2])
				if err != nil {
					t.Fatal(err)
				}
				z, _, _ := protocol1(f, xs, ys, [2]TripleShare{t0, t1}, [2]Matrix{t0.U, t1.U})
				if got := f.ReconstNew(z[0], z[1]); !got.Equal(bigMatMul(f, x, y)) {
					t.Fatalf("%s %v per-tick: Reconst(Z) != X Y", tf.name, sh)
				}
			}
			// Fixed mask: S = X - U is opened once; each Y gets a fresh (V, U V).
			u := mustRandomMatrix(t, f, r, sh[0], sh[1])
			var us [2]Matrix
			us[0], us[1] = mustShare(t, f, r, u)
			var firstS Matrix
			for k := range 3 {
				y := mustRandomMatrix(t, f, r, sh[1], sh[2])
				var ys [2]Matrix
				ys[0], ys[1] = mustShare(t, f, r, y)
				t0, t1, err := f.GenFixedTriple(r, r, u, sh[2])
				if err != nil {
					t.Fatal(err)
				}
				z, s, tOpen := protocol1(f, xs, ys, [2]TripleShare{t0, t1}, us)
				if got := f.ReconstNew(z[0], z[1]); !got.Equal(bigMatMul(f, x, y)) {
					t.Fatalf("%s %v fixed: Reconst(Z) != X Y", tf.name, sh)
				}
				// The prepared form gives each party the same share, bit for bit.
				for i, tr := range []TripleShare{t0, t1} {
					pre, zp := NewMatrix(sh[0], sh[2]), NewMatrix(sh[0], sh[2])
					f.MulPrepare(pre, s, tr)
					f.MulClosePrepared(zp, f.FixedUS(i, us[i], s), tOpen, pre)
					if !zp.Equal(z[i]) {
						t.Fatalf("%s %v fixed: P%d's prepared share differs from MulClose's", tf.name, sh, i)
					}
				}
				if k == 0 {
					firstS = s
				} else if !s.Equal(firstS) {
					t.Fatalf("%s %v fixed: S changed between ticks", tf.name, sh)
				}
			}
		}
	}
}

// TestProtocol1OpeningsUniform: with the same secrets X and Y in every run,
// the opened S = X - U and T = Y - V are uniform in Z_q (chi-square on the
// top slices and the low byte, fixed seed, generous bound): what a party
// sees does not depend on the secrets.
func TestProtocol1OpeningsUniform(t *testing.T) {
	const runs, d = 1500, 4
	for _, tf := range bigFields(t)[:4] {
		f := tf.f
		r := seeded(74)
		x := mustRandomMatrix(t, f, r, d, d)
		y := NewMatrix(d, 1) // a secret with structure: all entries (q-1)/2
		for i := range y.Data {
			y.Data[i] = f.Half()
		}
		var ss, ts []Elem
		for range runs {
			var xs, ys [2]Matrix
			xs[0], xs[1] = mustShare(t, f, r, x)
			ys[0], ys[1] = mustShare(t, f, r, y)
			t0, t1, err := f.GenTriple(r, r, d, d, 1)
			if err != nil {
				t.Fatal(err)
			}
			_, s, tt := protocol1(f, xs, ys, [2]TripleShare{t0, t1}, [2]Matrix{t0.U, t1.U})
			ss, ts = append(ss, s.Data...), append(ts, tt.Data...)
		}
		for name, xs := range map[string][]Elem{"S": ss, "T": ts} {
			top, low := uniformityChi(f, xs)
			if top > chiThreshold(15) || low > chiThreshold(255) {
				t.Errorf("%s: opened %s not uniform: chi-square top %.1f (bound %.1f), low byte %.1f (bound %.1f)",
					tf.name, name, top, chiThreshold(15), low, chiThreshold(255))
			}
		}
	}
}

func TestGenTripleReaderErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	for _, n := range []int{0, 16, 16 * 20, 16 * 25, 16 * 45, 16 * 50} {
		// A reader that runs dry part way through any of the five draws.
		short := io.LimitReader(seeded(75), int64(n))
		if _, _, err := f.GenTriple(short, short, 4, 5, 1); err == nil {
			t.Errorf("GenTriple with %d bytes of randomness: no error", n)
		}
		short = io.LimitReader(seeded(75), int64(n))
		if _, _, err := f.GenFixedTriple(short, short, NewMatrix(4, 5), 1); err == nil && n < 16*14 {
			t.Errorf("GenFixedTriple with %d bytes of randomness: no error", n)
		}
	}
}

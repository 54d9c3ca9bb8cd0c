package codec

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

func TestMatrixRoundTrip(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{2})
	for _, q := range testModuli {
		f := testField(t, q)
		for _, shape := range [][2]int{{0, 0}, {1, 1}, {3, 1}, {4, 6}, {0, 5}} {
			m := randomMatrix(t, f, rng, shape[0], shape[1])
			w := PutMatrix(f, m)
			if len(w.Data) != len(m.Data)*f.ByteLen() {
				t.Fatalf("%s %v: %d data bytes", q, shape, len(w.Data))
			}
			b, err := Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			var w2 MatrixWire
			if err := Unmarshal(b, &w2); err != nil {
				t.Fatal(err)
			}
			got, err := w2.Decode(f, shape[0], shape[1])
			if err != nil || !got.Equal(m) {
				t.Fatalf("%s %v: Decode = %v, %v", q, shape, got, err)
			}
			dst := mpc.NewMatrix(shape[0], shape[1])
			if err := w2.DecodeInto(f, dst); err != nil || !dst.Equal(m) {
				t.Fatalf("%s %v: DecodeInto = %v", q, shape, err)
			}
		}
	}
}

// TestMatrixEdgeElements round-trips 0, 1, q-1 and the centered extremes.
func TestMatrixEdgeElements(t *testing.T) {
	for _, q := range testModuli {
		f := testField(t, q)
		qm1 := f.Sub(f.Zero(), f.One())
		m := mpc.Matrix{Rows: 1, Cols: 5, Data: []mpc.Elem{f.Zero(), f.One(), qm1, f.Half(), f.Add(f.Half(), f.One())}}
		got, err := PutMatrix(f, m).Decode(f, 1, 5)
		if err != nil || !got.Equal(m) {
			t.Errorf("%s: %v, %v", q, got, err)
		}
	}
}

func TestMatrixDecodeRejects(t *testing.T) {
	for _, q := range testModuli {
		f := testField(t, q)
		bl := f.ByteLen()
		m := randomMatrix(t, f, rand.NewChaCha8([32]byte{3}), 3, 2)
		good := PutMatrix(f, m)
		edit := func(fn func(w *MatrixWire)) MatrixWire {
			w := MatrixWire{Rows: good.Rows, Cols: good.Cols, Data: append([]byte(nil), good.Data...)}
			fn(&w)
			return w
		}
		// The modulus itself, little-endian, in entry (1,0).
		qBytes := make([]byte, 32)
		for i, limb := range f.Modulus() {
			for j := 0; j < 8; j++ {
				qBytes[8*i+j] = byte(limb >> (8 * j))
			}
		}
		for _, c := range []struct {
			name       string
			w          MatrixWire
			rows, cols int
			want       error
		}{
			{"transposed", good, 2, 3, ErrDimension},
			{"more rows", good, 4, 2, ErrDimension},
			{"fewer cols", good, 3, 1, ErrDimension},
			{"negative", good, -3, -2, ErrDimension},
			{"declared 2^32-1 rows", edit(func(w *MatrixWire) { w.Rows = 1<<32 - 1 }), 1<<32 - 1, 2, ErrMalformed},
			{"huge shape", edit(func(w *MatrixWire) { w.Rows, w.Cols = 1<<32-1, 1<<32-1 }), 1<<32 - 1, 1<<32 - 1, ErrMalformed},
			{"one byte short", edit(func(w *MatrixWire) { w.Data = w.Data[:len(w.Data)-1] }), 3, 2, ErrMalformed},
			{"one byte long", edit(func(w *MatrixWire) { w.Data = append(w.Data, 0) }), 3, 2, ErrMalformed},
			{"no data", edit(func(w *MatrixWire) { w.Data = nil }), 3, 2, ErrMalformed},
			{"entry = q", edit(func(w *MatrixWire) { copy(w.Data[2*bl:3*bl], qBytes) }), 3, 2, ErrRange},
			{"entry all ones", edit(func(w *MatrixWire) {
				for i := range w.Data[5*bl:] {
					w.Data[5*bl+i] = 0xff
				}
			}), 3, 2, ErrRange},
		} {
			if _, err := c.w.Decode(f, c.rows, c.cols); !errors.Is(err, c.want) {
				t.Errorf("%s %s: Decode err = %v, want %v", q, c.name, err, c.want)
			}
			if c.rows >= 0 && c.cols >= 0 && c.rows <= 100 && c.cols <= 100 {
				if err := c.w.DecodeInto(f, mpc.NewMatrix(c.rows, c.cols)); !errors.Is(err, c.want) {
					t.Errorf("%s %s: DecodeInto err = %v, want %v", q, c.name, err, c.want)
				}
			}
		}
		if err := good.DecodeInto(f, mpc.Matrix{Rows: 3, Cols: 2, Data: make([]mpc.Elem, 5)}); !errors.Is(err, ErrDimension) {
			t.Errorf("%s: DecodeInto a short destination: %v", q, err)
		}
	}
}

func TestMatrixDecodeIntoAllocs(t *testing.T) {
	f := testField(t, mpc.PresetM127)
	m := randomMatrix(t, f, rand.NewChaCha8([32]byte{4}), 5, 5)
	w := PutMatrix(f, m)
	dst := mpc.NewMatrix(5, 5)
	if n := testing.AllocsPerRun(100, func() {
		if err := w.DecodeInto(f, dst); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("DecodeInto allocates %v times", n)
	}
}

func TestPutMatrixPanicsOnBadMatrix(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	PutMatrix(testField(t, mpc.PresetM127), mpc.Matrix{Rows: 2, Cols: 2, Data: make([]mpc.Elem, 3)})
}

package mpc

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"
)

// refEncode is round(2^l x) = floor(2^l x + 1/2) computed exactly with
// big.Float (x is a float64, so 2^l x + 1/2 is exact at 2000 bits).
func refEncode(x float64, l int) *big.Int {
	v := new(big.Float).SetPrec(2000).SetFloat64(x)
	v.SetMantExp(v, l)
	v.Add(v, big.NewFloat(0.5))
	z, acc := v.Int(nil)  // truncates toward zero
	if acc == big.Above { // v < 0 and not an integer: floor is one less
		z.Sub(z, big.NewInt(1))
	}
	return z
}

// fixedFormats are the Q<k,l> formats under test; the pendulum's Q<18,9>
// first.
var fixedFormats = []struct{ k, l int }{{18, 9}, {8, 3}, {12, 0}, {12, 11}, {2, 1}, {2, 0}, {32, 16}, {62, 30}, {62, 0}, {62, 61}}

// TestEncodeGridRoundTrip: every point of the grid Q<k,l> encodes to its
// integer and decodes back exactly (exhaustively for k <= 18).
func TestEncodeGridRoundTrip(t *testing.T) {
	f := mustField(t, PresetM127)
	r := seeded(51)
	for _, fm := range fixedFormats {
		k, l := fm.k, fm.l
		lo, hi := -(int64(1) << (k - 1)), int64(1)<<(k-1)-1
		var zs []int64
		if k <= 18 {
			for z := lo; z <= hi; z++ {
				zs = append(zs, z)
			}
		} else {
			zs = []int64{lo, lo + 1, -1, 0, 1, hi - 1, hi}
			for range 20000 {
				e := mustRandom(t, f, r)
				z := int64(e[0]>>(64-k)) + lo // uniform in Z<k>
				if k > 53 {
					z &^= 1<<(k-53) - 1 // keep it a float64
				}
				zs = append(zs, z)
			}
		}
		for _, z := range zs {
			if int64(float64(z)) != z {
				continue // not a float64 (k > 53): no grid value to pass
			}
			x := math.Ldexp(float64(z), -l)
			got, err := EncodeInt(x, k, l)
			if err != nil || got != z {
				t.Fatalf("Q<%d,%d>: EncodeInt(%v) = %d, %v; want %d", k, l, x, got, err, z)
			}
			e, err := f.Ecd(x, k, l)
			if err != nil || e != f.FromInt64(z) {
				t.Fatalf("Q<%d,%d>: Ecd(%v) = %s, %v; want %d", k, l, x, f.String(e), err, z)
			}
			if back := f.Dcd(e, l); back != x {
				t.Fatalf("Q<%d,%d>: Dcd(Ecd(%v)) = %v", k, l, x, back)
			}
		}
	}
}

// TestEncodeRounding pins the rule round(x) = floor(x + 1/2): ties go up, for
// negative values too, and nothing is lost to float64 rounding of x + 1/2.
func TestEncodeRounding(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		k, l int
		want int64
	}{
		{0.5, 18, 0, 1},
		{-0.5, 18, 0, 0},
		{1.5, 18, 0, 2},
		{-1.5, 18, 0, -1},
		{2.5, 18, 0, 3},
		{0.25, 18, 0, 0},
		{0.75, 18, 0, 1},
		{-0.75, 18, 0, -1},
		{0.49999999999999994, 18, 0, 0}, // x + 0.5 rounds to 1 in float64
		{-0.5000000000000001, 18, 0, -1},
		{1.0 / 1024, 18, 9, 1},         // half a grid step: rounds up
		{-1.0 / 1024, 18, 9, 0},        // ties go up, towards +inf
		{3.0 / 1024, 18, 9, 2},         // 1.5 steps
		{1.0/1024 - 1e-12, 18, 9, 0},   // just under half a step
		{0x1p52 + 1, 62, 0, 1<<52 + 1}, // (2^52+1) + 0.5 is a tie that float64 rounds to even
		{0x1p51 + 0.5, 62, 0, 1<<51 + 1},
		{-(0x1p51 + 0.5), 62, 0, -(1 << 51)},
		{0x1p60 + 256, 62, 0, 1<<60 + 256},
	} {
		got, err := EncodeInt(tc.x, tc.k, tc.l)
		if err != nil || got != tc.want {
			t.Errorf("EncodeInt(%v, %d, %d) = %d, %v; want %d", tc.x, tc.k, tc.l, got, err, tc.want)
		}
		if ref := refEncode(tc.x, tc.l); ref.Int64() != tc.want {
			t.Errorf("test case %v: reference gives %s", tc.x, ref)
		}
	}
}

// TestEncodeRandomAgainstBig compares EncodeInt with the exact big.Float
// reference on random doubles across the whole range, including values whose
// rounding crosses the bounds.
func TestEncodeRandomAgainstBig(t *testing.T) {
	r := seeded(52)
	var b [8]byte
	for _, fm := range fixedFormats {
		k, l := fm.k, fm.l
		bound := math.Ldexp(1, k-1-l)
		for i := range 20000 {
			r.Read(b[:])
			u := float64(uint64(b[0])|uint64(b[1])<<8|uint64(b[2])<<16|uint64(b[3])<<24|uint64(b[4])<<32|uint64(b[5])<<40|uint64(b[6])<<48) / 0x1p56
			x := (2*u - 1) * bound * 1.01 // a little beyond both ends
			if i%4 == 0 {
				// Near a tie: (z + 1/2) 2^-l, nudged by a few ulps.
				x = math.Ldexp(math.Floor(math.Ldexp(x, l))+0.5, -l)
				for range int(b[7] % 5) {
					x = math.Nextafter(x, math.Inf(int(b[7]%2)*2-1))
				}
			}
			want := refEncode(x, l)
			got, err := EncodeInt(x, k, l)
			inRange := want.Cmp(big.NewInt(-(1<<(k-1)))) >= 0 && want.Cmp(big.NewInt(1<<(k-1))) < 0
			if !inRange {
				if !errors.Is(err, ErrOutOfRange) {
					t.Fatalf("Q<%d,%d>: EncodeInt(%v) = %d, %v; want ErrOutOfRange (rounds to %s)", k, l, x, got, err, want)
				}
				continue
			}
			if err != nil || got != want.Int64() {
				t.Fatalf("Q<%d,%d>: EncodeInt(%v) = %d, %v; want %s", k, l, x, got, err, want)
			}
		}
	}
}

func TestEncodeBounds(t *testing.T) {
	for _, fm := range fixedFormats {
		k, l := fm.k, fm.l
		top := math.Ldexp(1, k-1-l) // 2^(k-1-l)
		step := math.Ldexp(1, -l)
		type boundCase struct {
			x    float64
			want int64
			ok   bool
		}
		cases := []boundCase{
			{-top, -(1 << (k - 1)), true}, // the least value of Q<k,l>
			{top, 0, false},               // 2^(k-1-l) is just outside
			{math.MaxFloat64, 0, false},
			{-math.MaxFloat64, 0, false},
			{math.SmallestNonzeroFloat64, 0, true},
			{-math.SmallestNonzeroFloat64, 0, true},
		}
		if k <= 53 { // the grid's neighbours of the bounds are float64s
			cases = append(cases,
				boundCase{top - step, 1<<(k-1) - 1, true},       // the greatest value
				boundCase{-top - step, 0, false},                // one step below the least
				boundCase{-top - step/2, -(1 << (k - 1)), true}, // a tie that rounds up into range
				boundCase{top - step/2, 0, false})               // a tie that rounds up out of range
		}
		for _, tc := range cases {
			got, err := EncodeInt(tc.x, k, l)
			if tc.ok {
				if err != nil || got != tc.want {
					t.Errorf("Q<%d,%d>: EncodeInt(%v) = %d, %v; want %d", k, l, tc.x, got, err, tc.want)
				}
				continue
			}
			if !errors.Is(err, ErrOutOfRange) {
				t.Errorf("Q<%d,%d>: EncodeInt(%v) error = %v, want ErrOutOfRange", k, l, tc.x, err)
				continue
			}
			// The message names the value and the bounds.
			msg := err.Error()
			for _, part := range []string{fmt.Sprint(tc.x), fmt.Sprintf("Q<%d,%d>", k, l), fmt.Sprint(-top), fmt.Sprint(top - step)} {
				if !strings.Contains(msg, part) {
					t.Errorf("Q<%d,%d>: error %q does not mention %q", k, l, msg, part)
				}
			}
		}
	}
	// The exact message for the pendulum's format.
	_, err := EncodeInt(256, 18, 9)
	if want := "mpc: value out of range: 256 is outside Q<18,9> = [-256, 255.998046875]"; err == nil || err.Error() != want {
		t.Errorf("EncodeInt(256, 18, 9) error = %v, want %q", err, want)
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := EncodeInt(x, 18, 9)
		if !errors.Is(err, ErrNotFinite) || !strings.Contains(err.Error(), fmt.Sprint(x)) {
			t.Errorf("EncodeInt(%v) error = %v, want ErrNotFinite naming the value", x, err)
		}
	}
	for _, kl := range [][2]int{{1, 0}, {0, 0}, {63, 9}, {18, 18}, {18, 19}, {18, -1}} {
		if _, err := EncodeInt(1, kl[0], kl[1]); !errors.Is(err, ErrParams) {
			t.Errorf("EncodeInt(1, %d, %d) error = %v, want ErrParams", kl[0], kl[1], err)
		}
	}
	f := mustField(t, PresetM127)
	if _, err := f.Ecd(math.NaN(), 18, 9); !errors.Is(err, ErrNotFinite) {
		t.Errorf("Ecd(NaN) error = %v", err)
	}
}

func TestEcdVectorsAndMatrices(t *testing.T) {
	f := mustField(t, PresetP25519)
	v, err := f.EcdVec([]float64{1.5, -2, 0.001953125}, 18, 9)
	if err != nil {
		t.Fatal(err)
	}
	if v.Rows != 3 || v.Cols != 1 {
		t.Fatalf("EcdVec shape %dx%d", v.Rows, v.Cols)
	}
	for i, want := range []int64{768, -1024, 1} {
		if got, _ := f.Int64(v.Data[i]); got != want {
			t.Errorf("EcdVec entry %d = %d, want %d", i, got, want)
		}
	}
	_, err = f.EcdVec([]float64{0, 300, 0}, 18, 9)
	if !errors.Is(err, ErrOutOfRange) || !strings.HasPrefix(err.Error(), "entry 1: ") {
		t.Errorf("EcdVec out of range error = %v, want entry 1 and ErrOutOfRange", err)
	}
	if err := f.EcdInto(make([]Elem, 2), []float64{1, 2, 3}, 18, 9); !errors.Is(err, ErrDimension) {
		t.Errorf("EcdInto length mismatch error = %v", err)
	}
	m, err := f.EcdMatrix([][]float64{{1, 2}, {-0.5, 0.25}}, 18, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{512, 1024, -256, 128} {
		if got, _ := f.Int64(m.Data[i]); got != want {
			t.Errorf("EcdMatrix entry %d = %d, want %d", i, got, want)
		}
	}
	for _, tc := range []struct {
		x    [][]float64
		err  error
		text string
	}{
		{nil, ErrDimension, "empty"},
		{[][]float64{{1, 2}, {3}}, ErrDimension, "row 1 has 1 columns, want 2"},
		{[][]float64{{1, 2}, {3, math.Inf(1)}}, ErrNotFinite, "entry (1,1)"},
	} {
		if _, err := f.EcdMatrix(tc.x, 18, 9); !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("EcdMatrix(%v) error = %v, want %v with %q", tc.x, err, tc.err, tc.text)
		}
	}
	out := make([]float64, 3)
	f.DcdInto(out, v.Data, 9)
	if out[0] != 1.5 || out[1] != -2 || out[2] != 0.001953125 {
		t.Errorf("DcdInto = %v", out)
	}
}

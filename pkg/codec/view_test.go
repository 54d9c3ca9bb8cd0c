package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
	"unsafe"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestUnmarshalView: for every payload a party decodes on the tick's path,
// UnmarshalView decodes what Unmarshal decodes, with the matrices aliasing
// the input (Unmarshal's are copies); it refuses what Unmarshal refuses;
// other types are copies as with Unmarshal.
func TestUnmarshalView(t *testing.T) {
	p := testParams(t, mpc.PresetM127, mpc.PerTick)
	f := p.Field
	rng := rand.NewChaCha8([32]byte{5})
	r, c := p.PhiShape()
	mul := PutMul(f, 77, mpc.MulMsg{S: randomMatrix(t, f, rng, r, c), T: randomMatrix(t, f, rng, c, 1)})
	vec := func() MatrixWire { return PutMatrix(f, randomMatrix(t, f, rng, p.N, 1)) }
	mat := PutMaterial(f, [16]byte{3}, mpc.TickMaterial{
		Triple: mpc.TripleShare{U: randomMatrix(t, f, rng, r, c), V: randomMatrix(t, f, rng, c, 1), W: randomMatrix(t, f, rng, r, 1)},
		Mask:   mpc.MaskShare{M: randomMatrix(t, f, rng, p.N, 1), L: randomMatrix(t, f, rng, p.N, 1)}})
	for _, c := range []struct {
		name  string
		in    any
		fresh func() any
	}{
		{"MulPayload", mul, func() any { return new(MulPayload) }},
		{"MaterialPayload", mat, func() any { return new(MaterialPayload) }},
		{"MeasurePayload", MeasurePayload{Y: vec(), SentUnixNano: -3}, func() any { return new(MeasurePayload) }},
		{"MeasureMaskedPayload", MeasureMaskedPayload{Item: 9, T: vec(), SentUnixNano: 11}, func() any { return new(MeasureMaskedPayload) }},
		{"MaskYPayload", MaskYPayload{Item: 1 << 63, V: vec(), Epoch: 7}, func() any { return new(MaskYPayload) }},
		{"TruncPayload", TruncPayload{Item: 4, Y: vec()}, func() any { return new(TruncPayload) }},
		{"OutputPayload", OutputPayload{Item: 5, U: vec()}, func() any { return new(OutputPayload) }},
	} {
		data, err := Marshal(c.in)
		if err != nil {
			t.Fatal(err)
		}
		want := c.fresh()
		if err := Unmarshal(data, want); err != nil {
			t.Fatal(err)
		}
		got := c.fresh()
		if err := UnmarshalView(data, got); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: view %+v, want %+v", c.name, got, want)
		}
		// Every matrix of the view lies inside data; none of the copy's does.
		for _, d := range matrixData(got) {
			if len(d) > 0 && !inside(d, data) {
				t.Errorf("%s: a view matrix does not alias the input", c.name)
			}
		}
		for _, d := range matrixData(want) {
			if len(d) > 0 && inside(d, data) {
				t.Errorf("%s: Unmarshal's matrix aliases the input", c.name)
			}
		}
		// Malformed input: the same error class, and v untouched.
		bad := append(bytes.Clone(data), 0)
		got2 := c.fresh()
		if err := UnmarshalView(bad, got2); !errors.Is(err, ErrMalformed) || !reflect.DeepEqual(got2, c.fresh()) {
			t.Errorf("%s: trailing byte: %v, %+v", c.name, err, got2)
		}
		if err := UnmarshalView(make([]byte, MaxEnvelope+1), got2); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: oversize: %v", c.name, err)
		}
	}
	// A type without a view is decoded by Unmarshal: copies.
	data, _ := Marshal(vec())
	var got MatrixWire
	if err := UnmarshalView(data, &got); err != nil || got.Rows != uint32(p.N) || inside(got.Data, data) {
		t.Errorf("MatrixWire: %+v, %v", got, err)
	}
	if err := UnmarshalView(data, (*MulPayload)(nil)); err == nil {
		t.Error("nil *MulPayload accepted")
	}
}

func matrixData(v any) [][]byte {
	switch v := v.(type) {
	case *MulPayload:
		return [][]byte{v.S.Data, v.T.Data}
	case *MaterialPayload:
		return [][]byte{v.U.Data, v.V.Data, v.W.Data, v.M.Data, v.L.Data}
	case *MeasurePayload:
		return [][]byte{v.Y.Data}
	case *MeasureMaskedPayload:
		return [][]byte{v.T.Data}
	case *MaskYPayload:
		return [][]byte{v.V.Data}
	case *TruncPayload:
		return [][]byte{v.Y.Data}
	case *OutputPayload:
		return [][]byte{v.U.Data}
	}
	return nil
}

// inside reports whether b's bytes lie within data's.
func inside(b, data []byte) bool {
	if len(b) == 0 || len(data) == 0 {
		return false
	}
	lo, hi := uintptr(unsafe.Pointer(&data[0])), uintptr(unsafe.Pointer(&data[len(data)-1]))
	first, last := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[len(b)-1]))
	return first >= lo && last <= hi
}

package codec

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// samplePayloads returns one filled value of every payload type.
func samplePayloads(t testing.TB) []any {
	f := testField(t, mpc.PresetP25519)
	rng := rand.NewChaCha8([32]byte{5})
	mw := func(r, c int) MatrixWire { return PutMatrix(f, randomMatrix(t, f, rng, r, c)) }
	p := testParams(t, mpc.PresetP25519, mpc.PerTick)
	seed := bytes.Repeat([]byte{0xa5}, 32)
	return []any{
		&MeasurePayload{Y: mw(2, 1), SentUnixNano: 1700000000123456789},
		&MulPayload{Item: 1<<40 + 3, S: mw(4, 5), T: mw(5, 1)},
		&MulPayload{Item: 7, T: mw(5, 1)}, // fixed-mask: S is 0x0
		&TruncPayload{Item: 9, Y: mw(3, 1)},
		&OutputPayload{Item: 1<<64 - 1, U: mw(1, 1)},
		&MaskYPayload{Item: 1<<63 | 1<<8 | 3, V: mw(2, 1)},
		&MaskYPayload{Item: 5, V: mw(2, 1), Epoch: 1700000000123456789},
		&MeasureMaskedPayload{Item: 12, T: mw(2, 1), SentUnixNano: 1700000000987654321},
		&TickPayload{SentUnixNano: -1},
		&SetupPayload{Epoch: 2, Params: PutParams(p), Phi: mw(4, 5), X0: mw(3, 1), P0Seed: seed, Stream: "DUET_ITEMS"},
		&SetupPayload{Epoch: 2, Params: PutParams(p), Phi: mw(4, 5), X0: mw(3, 1), P0Seed: seed, Stream: "DUET_ITEMS", P0Sealed: true},
		&SetupPayload{Epoch: 3, Params: PutParams(p), Phi: mw(4, 5), X0: mw(3, 1), FixedU: mw(4, 5), Stream: "s"},
		&DealerSetupPayload{Epoch: 1, Params: PutParams(p), Secret: seed, Compress: true, Stream: "DUET", Subject: "duet.items.l1"},
		&MaterialPayload{Nonce: [16]byte{1, 2, 3, 15: 16}, U: mw(4, 5), V: mw(5, 1), W: mw(4, 1), M: mw(3, 1), L: mw(3, 1)},
		&ItemMsg{Loop: "l1", Epoch: 4, Nonce: [16]byte{9}, P0: []byte("env0"), P1: []byte("env1")},
		&ItemMsg{Loop: "l1", Epoch: 4, Nonce: [16]byte{9}, P1: []byte("env1")},
		&PlantYPayload{Y: []float64{0.5, -1e300, math.SmallestNonzeroFloat64, math.Copysign(0, -1)}},
		&PlantYPayload{},
		&PlantUPayload{U: []float64{3.25}, FailSafe: true},
		&PlantUPayload{U: []float64{3.25}, Epoch: 1700000000123456789},
		&PlantYPayload{Y: []float64{0.5}, Epoch: 1},
		&PlantReadPayload{Epoch: 1700000000123456789},
		&PlantReadPayload{},
		&ParamsWire{Modulus: "1000003", N: 1, M: 2, P: 3, K: 4, L: 5, Lambda: 6, Variant: 1},
		&MatrixWire{},
		&StateRecord{Instance: 1<<63 | 5, Epoch: 2, Version: 1803, Tick: 1 << 20, HWM: 77, X: mw(4, 1), Prev: mw(4, 1), HasPrev: true},
		&StateRecord{Instance: 1, HWM: 77, HWMIdx: 7, X: mw(4, 1)},
		&StateRecord{Instance: 1, HWM: 77, X: mw(4, 1), Serials: []byte("floor...instance....ctr.")},
		&StateRecord{Instance: 1, HWM: 77, HWMIdx: 7, X: mw(4, 1), HasPrev: true, Serials: []byte{1}},
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	for _, v := range samplePayloads(t) {
		b, err := Marshal(v)
		if err != nil {
			t.Fatalf("Marshal(%T): %v", v, err)
		}
		got := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		if err := Unmarshal(b, got); err != nil {
			t.Fatalf("Unmarshal(%T): %v", v, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%T: round trip\n got %+v\nwant %+v", v, got, v)
		}
		b2, err := Marshal(got)
		if err != nil || !bytes.Equal(b2, b) {
			t.Errorf("%T: re-encoding differs", v)
		}
	}
}

func TestParamsWire(t *testing.T) {
	for _, q := range testModuli {
		for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
			p := testParams(t, q, v)
			w := PutParams(p)
			if w.Modulus != p.Field.Name() {
				t.Errorf("modulus %q, want %q", w.Modulus, p.Field.Name())
			}
			got, err := w.Params()
			if err != nil {
				t.Fatalf("%s %v: %v", q, v, err)
			}
			if got.Field.Modulus() != p.Field.Modulus() || got.N != p.N || got.M != p.M || got.P != p.P ||
				got.K != p.K || got.L != p.L || got.Lambda != p.Lambda || got.Variant != p.Variant {
				t.Errorf("%s %v: Params() = %+v, want %+v", q, v, got, p)
			}
		}
	}
	good := PutParams(testParams(t, mpc.PresetM127, mpc.PerTick))
	for _, c := range []struct {
		name string
		edit func(*ParamsWire)
		want error
	}{
		{"n over 1000", func(w *ParamsWire) { w.N = 1001 }, ErrDimension},
		{"p huge", func(w *ParamsWire) { w.P = 1 << 40 }, ErrDimension},
		{"n zero", func(w *ParamsWire) { w.N = 0 }, ErrMalformed},
		{"m negative", func(w *ParamsWire) { w.M = -1 }, ErrMalformed},
		{"l >= k", func(w *ParamsWire) { w.L = w.K }, ErrMalformed},
		{"lambda too big", func(w *ParamsWire) { w.Lambda = 120 }, ErrMalformed},
		{"even modulus", func(w *ParamsWire) { w.Modulus = "1000000" }, ErrMalformed},
		{"modulus text", func(w *ParamsWire) { w.Modulus = "2^61-1" }, ErrMalformed},
		{"modulus empty", func(w *ParamsWire) { w.Modulus = "" }, ErrMalformed},
		{"modulus long", func(w *ParamsWire) { w.Modulus = strings.Repeat("9", 5000) }, ErrMalformed},
		{"variant 2", func(w *ParamsWire) { w.Variant = 2 }, ErrMalformed},
	} {
		w := good
		c.edit(&w)
		if _, err := w.Params(); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := (ParamsWire{Modulus: "2^127-1", N: 1, M: 1, P: 1, K: 18, L: 9, Lambda: 40}).Params(); err != nil {
		t.Errorf("minimal params: %v", err)
	}
}

// TestMaterialRoundTrip carries real dealer items of both variants, with and
// without seed compression, through the wire.
func TestMaterialRoundTrip(t *testing.T) {
	for _, q := range testModuli {
		for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
			for _, compress := range []bool{false, true} {
				p := testParams(t, q, v)
				d, err := mpc.NewDealer(p, mpc.NewSession([32]byte{7}), compress)
				if err != nil {
					t.Fatal(err)
				}
				it, err := d.Next(rand.NewChaCha8([32]byte{8}))
				if err != nil {
					t.Fatal(err)
				}
				mats := []mpc.TickMaterial{it.P1}
				if it.P0 != nil {
					mats = append(mats, *it.P0)
				}
				for _, m := range mats {
					b, err := Marshal(PutMaterial(p.Field, it.Nonce, m))
					if err != nil {
						t.Fatal(err)
					}
					var w MaterialPayload
					if err := Unmarshal(b, &w); err != nil {
						t.Fatal(err)
					}
					if w.Nonce != it.Nonce {
						t.Errorf("nonce %x, want %x", w.Nonce, it.Nonce)
					}
					got, err := w.Material(p)
					if err != nil {
						t.Fatalf("%s %v: Material: %v", q, v, err)
					}
					if !got.Triple.U.Equal(m.Triple.U) || !got.Triple.V.Equal(m.Triple.V) || !got.Triple.W.Equal(m.Triple.W) ||
						!got.Mask.M.Equal(m.Mask.M) || !got.Mask.L.Equal(m.Mask.L) {
						t.Errorf("%s %v: material differs", q, v)
					}
					// MaterialInto a material holding another item's entries
					// gives the same, in that material's storage; into the
					// zero material, the same too.
					it2, err := d.Next(rand.NewChaCha8([32]byte{9}))
					if err != nil {
						t.Fatal(err)
					}
					var zero mpc.TickMaterial
					for i, rec := range []mpc.TickMaterial{it2.P1, zero} {
						before := rec
						if err := w.MaterialInto(p, &rec); err != nil {
							t.Fatalf("%s %v: MaterialInto: %v", q, v, err)
						}
						if !rec.Triple.U.Equal(m.Triple.U) || !rec.Triple.V.Equal(m.Triple.V) || !rec.Triple.W.Equal(m.Triple.W) ||
							!rec.Mask.M.Equal(m.Mask.M) || !rec.Mask.L.Equal(m.Mask.L) {
							t.Errorf("%s %v: MaterialInto differs (case %d)", q, v, i)
						}
						if i == 0 && (&rec.Triple.V.Data[0] != &before.Triple.V.Data[0] || &rec.Mask.M.Data[0] != &before.Mask.M.Data[0]) {
							t.Errorf("%s %v: MaterialInto did not reuse the storage", q, v)
						}
					}
					// The same bytes under other parameters must fail on shape.
					other := p
					other.N++
					if _, err := w.Material(other); !errors.Is(err, ErrDimension) {
						t.Errorf("%s %v: Material(n+1) = %v, want ErrDimension", q, v, err)
					}
					other = p
					other.Variant = 1 - p.Variant
					if _, err := w.Material(other); !errors.Is(err, ErrDimension) {
						t.Errorf("%s %v: Material(other variant) = %v, want ErrDimension", q, v, err)
					}
				}
			}
		}
	}
	if _, err := (MaterialPayload{}).Material(mpc.Params{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("Material without a field: %v", err)
	}
	bad := testParams(t, testModuli[0], mpc.PerTick)
	bad.N = -4
	if _, err := (MaterialPayload{}).Material(bad); !errors.Is(err, ErrDimension) {
		t.Errorf("Material with n = -4: %v, want ErrDimension", err)
	}
}

func TestMulPayload(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{9})
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		p := testParams(t, mpc.PresetM127, v)
		r, c := p.PhiShape()
		msg := mpc.MulMsg{T: randomMatrix(t, p.Field, rng, c, 1)}
		if v == mpc.PerTick {
			msg.S = randomMatrix(t, p.Field, rng, r, c)
		}
		w := PutMul(p.Field, 42, msg)
		got, err := w.Msg(p)
		if err != nil || !got.T.Equal(msg.T) || !got.S.Equal(msg.S) {
			t.Errorf("%v: Msg = %v", v, err)
		}
		other := p
		other.Variant = 1 - v
		if _, err := w.Msg(other); !errors.Is(err, ErrDimension) {
			t.Errorf("%v: Msg(other variant) = %v, want ErrDimension", v, err)
		}
		other = p
		other.P++
		if _, err := w.Msg(other); !errors.Is(err, ErrDimension) {
			t.Errorf("%v: Msg(p+1) = %v, want ErrDimension", v, err)
		}
	}
}

func TestBytes32(t *testing.T) {
	b := bytes.Repeat([]byte{3}, 32)
	if got, err := Bytes32(b); err != nil || got != [32]byte(b) {
		t.Errorf("Bytes32 = %x, %v", got, err)
	}
	for _, n := range []int{0, 31, 33} {
		if _, err := Bytes32(make([]byte, n)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Bytes32(%d bytes): %v", n, err)
		}
	}
}

// With one item per stream message the set-up records carry no
// items_per_msg field, so releases that reject unknown fields still read
// them; with several they carry it, and out-of-range counts are refused.
func TestSetupItemsPerMsgCompat(t *testing.T) {
	for _, c := range []struct {
		v     any
		field bool
	}{
		{SetupPayload{Stream: "s"}, false},
		{DealerSetupPayload{Secret: make([]byte, 32), Stream: "s"}, false},
		{SetupPayload{Stream: "s", ItemsPerMsg: 8}, true},
		{DealerSetupPayload{Secret: make([]byte, 32), Stream: "s", ItemsPerMsg: 8}, true},
	} {
		b, err := Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte("items_per_msg")); got != c.field {
			t.Errorf("%+v: items_per_msg in the encoding %v, want %v", c.v, got, c.field)
		}
	}
	for _, n := range []int{-1, MaxItemsPerMsg + 1} {
		b, err := Marshal(SetupPayload{Stream: "s", ItemsPerMsg: n})
		if err != nil {
			t.Fatal(err)
		}
		var sp SetupPayload
		if err := Unmarshal(b, &sp); !errors.Is(err, ErrMalformed) {
			t.Errorf("%d items per message: err %v, want ErrMalformed", n, err)
		}
	}
}

// AppendMaterial encodes exactly as PutMaterial, its matrices in the buffer
// it was given (after what the buffer held), reused from item to item.
func TestAppendMaterial(t *testing.T) {
	for _, q := range testModuli {
		for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
			p := testParams(t, q, v)
			d, err := mpc.NewDealer(p, mpc.NewSession([32]byte{7}), false)
			if err != nil {
				t.Fatal(err)
			}
			buf := []byte("prefix")
			for i := 0; i < 3; i++ {
				it, err := d.Next(rand.NewChaCha8([32]byte{byte(i)}))
				if err != nil {
					t.Fatal(err)
				}
				want, err := Marshal(PutMaterial(p.Field, it.Nonce, it.P1))
				if err != nil {
					t.Fatal(err)
				}
				var pm MaterialPayload
				pm, buf = AppendMaterial(p.Field, buf[:len("prefix")], it.Nonce, it.P1)
				got, err := Marshal(&pm)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s %v item %d: AppendMaterial encodes differently from PutMaterial", q, v, i)
				}
				all := slices.Concat(pm.U.Data, pm.V.Data, pm.W.Data, pm.M.Data, pm.L.Data)
				if string(buf[:len("prefix")]) != "prefix" || !bytes.Equal(buf[len("prefix"):], all) {
					t.Fatalf("%s %v item %d: the matrices are not in the buffer after its contents", q, v, i)
				}
			}
		}
	}
}

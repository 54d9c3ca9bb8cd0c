package codec

import (
	"bytes"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// lax encodes v with the library's defaults: valid MessagePack, but not
// necessarily our canonical form.
func lax(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnmarshalStrict(t *testing.T) {
	good, err := Marshal(&MulPayload{Item: 5, T: MatrixWire{Rows: 1, Cols: 1, Data: []byte{1}}})
	if err != nil {
		t.Fatal(err)
	}
	var mp MulPayload
	if err := Unmarshal(good, &mp); err != nil {
		t.Fatal(err)
	}
	nan, _ := Marshal(&PlantYPayload{Y: []float64{1}})
	nan = append(nan[:len(nan)-8], 0x7f, 0xf8, 0, 0, 0, 0, 0, 1) // a NaN
	inf, _ := Marshal(&PlantUPayload{U: []float64{math.Inf(-1)}})
	for _, c := range []struct {
		name string
		data []byte
		v    any
		want error
	}{
		{"oversize", make([]byte, MaxEnvelope+1), &MulPayload{}, ErrTooLarge},
		{"empty", nil, &MulPayload{}, ErrMalformed},
		{"trailing byte", append(bytes.Clone(good), 0xc0), &MulPayload{}, ErrMalformed},
		{"two values", append(bytes.Clone(good), good...), &MulPayload{}, ErrMalformed},
		{"truncated", good[:len(good)-1], &MulPayload{}, ErrMalformed},
		{"nil", []byte{0xc0}, &MulPayload{}, ErrMalformed},
		{"unknown field", lax(t, map[string]any{"item": 1, "x": 2}), &MulPayload{}, ErrMalformed},
		{"wrong field type", lax(t, map[string]any{"item": "one"}), &MulPayload{}, ErrMalformed},
		{"array form", lax(t, []any{5, nil, nil}), &MulPayload{}, ErrMalformed},
		{"missing fields", lax(t, map[string]any{"item": 5}), &MulPayload{}, ErrMalformed},
		{"uint32 overflow", lax(t, map[string]any{"r": uint64(1<<32 + 1), "c": 1, "d": []byte{1}}), &MatrixWire{}, ErrMalformed},
		{"negative into uint", lax(t, map[string]any{"r": -1, "c": 1, "d": []byte{1}}), &MatrixWire{}, ErrMalformed},
		{"non-minimal int", lax(t, &struct {
			R uint64 `msgpack:"r"`
			C uint32 `msgpack:"c"`
			D []byte `msgpack:"d"`
		}{R: 1, C: 1, D: []byte{1}}), &MatrixWire{}, ErrMalformed},
		{"string for bytes", lax(t, map[string]any{"r": 0, "c": 0, "d": "x"}), &MatrixWire{}, ErrMalformed},
		{"reordered fields", lax(t, &struct {
			C uint32 `msgpack:"c"`
			R uint32 `msgpack:"r"`
			D []byte `msgpack:"d"`
		}{}), &MatrixWire{}, ErrMalformed},
		{"short nonce", lax(t, map[string]any{"loop": "l", "epoch": 0, "nonce": []byte{1, 2}, "p0": nil, "p1": []byte{1}}), &ItemMsg{}, ErrMalformed},
		{"huge array32", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, &PlantYPayload{}, ErrMalformed},
		{"huge map32", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xc0}, &PlantYPayload{}, ErrMalformed},
		{"huge bin32", []byte{0xc6, 0x7f, 0xff, 0xff, 0xff}, &MatrixWire{}, ErrMalformed},
		{"huge str32", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, &ItemMsg{}, ErrMalformed},
		{"deep nesting", append(bytes.Repeat([]byte{0x91}, 100), 0xc0), &PlantYPayload{}, ErrMalformed},
		{"extension", lax(t, time.Unix(0, 0)), &TickPayload{}, ErrMalformed},
		{"never-used code", []byte{0xc1}, &TickPayload{}, ErrMalformed},
		{"bad loop id", mustMarshal(t, &ItemMsg{Loop: "a.b", P1: []byte{1}}), &ItemMsg{}, ErrLoopID},
		{"item without P1", mustMarshal(t, &ItemMsg{Loop: "a"}), &ItemMsg{}, ErrMalformed},
		{"31-byte secret", mustMarshal(t, &DealerSetupPayload{Secret: make([]byte, 31)}), &DealerSetupPayload{}, ErrMalformed},
		{"no secret", mustMarshal(t, &DealerSetupPayload{}), &DealerSetupPayload{}, ErrMalformed},
		{"16-byte P0 seed", mustMarshal(t, &SetupPayload{P0Seed: make([]byte, 16)}), &SetupPayload{}, ErrMalformed},
		{"NaN measurement", nan, &PlantYPayload{}, ErrMalformed},
		{"infinite input", inf, &PlantUPayload{}, ErrMalformed},
	} {
		err := Unmarshal(c.data, c.v)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "codec: ") {
			t.Errorf("%s: %q lacks the prefix", c.name, err)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMarshalTooLarge(t *testing.T) {
	if _, err := Marshal(&ItemMsg{Loop: "l", P1: make([]byte, MaxEnvelope)}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("err = %v, want ErrTooLarge", err)
	}
	if _, err := Marshal(make(chan int)); err == nil {
		t.Error("Marshal(chan) succeeded")
	}
}

// TestUnmarshalHugeDeclaredLengthIsCheap checks that a few bytes declaring a
// huge container are refused without a large allocation.
func TestUnmarshalHugeDeclaredLengthIsCheap(t *testing.T) {
	data := []byte{0x81, 0xa1, 'y', 0xdd, 0x7f, 0xff, 0xff, 0xff, 0xcb}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 10; i++ {
		var v PlantYPayload
		if Unmarshal(data, &v) == nil {
			t.Fatal("accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if perCall := (after.TotalAlloc - before.TotalAlloc) / 10; perCall > 64<<10 {
		t.Errorf("%d bytes allocated per call", perCall)
	}
}

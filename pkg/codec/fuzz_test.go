package codec

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// FuzzOpen feeds arbitrary bytes to Open. It must never panic; whatever
// parses as an envelope must re-encode to the input byte for byte; whatever
// opens must have a consistent header.
func FuzzOpen(f *testing.F) {
	sensor, p0 := testSealer(f, RoleSensor), testSealer(f, RoleParty0)
	for i, n := range []int{0, 1, 30, 200, 300} {
		env, err := sensor.Seal(Header{Kind: KindMeasure, Loop: "fuzz", Tick: uint64(i) * 1000, From: RoleSensor, To: RoleParty1}, bytes.Repeat([]byte{byte(i)}, n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(env)
	}
	mul, _ := p0.Seal(Header{Kind: KindMul, Loop: "l", Tick: 1 << 33, From: RoleParty0, To: RoleParty1}, []byte("mul"))
	f.Add(mul)
	wrong, _ := sensor.Seal(Header{Kind: KindSetup, Loop: "l", Tick: 1, From: RoleSensor, To: RoleParty0}, nil)
	f.Add(wrong)
	f.Add([]byte{})
	f.Add([]byte{0x98, 0x01})
	f.Add([]byte{0x98, 0x01, 0x01, 0xa1, 'l', 0x01, 0x01, 0x03, 0xc4, 0x18})
	f.Add([]byte{0x98, 0x02})

	p1 := testSealer(f, RoleParty1)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, perr := parseEnvelope(data)
		if perr == nil {
			if got := e.appendTo(nil); !bytes.Equal(got, data) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", got, data)
			}
		}
		h, payload, err := p1.Open(data)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("error without a sentinel: %v", err)
			}
			if h != (Header{}) || payload != nil {
				t.Fatal("error with a header or payload")
			}
			return
		}
		if perr != nil {
			t.Fatalf("Open accepted what parseEnvelope rejects: %v", perr)
		}
		if h != e.h || h.To != RoleParty1 || !Allowed(h.Kind, h.From, h.To) || ValidLoopID(h.Loop) != nil {
			t.Fatalf("opened header %v, envelope header %v", h, e.h)
		}
		if peek, err := PeekHeader(data); err != nil || peek != h {
			t.Fatalf("PeekHeader = %v, %v", peek, err)
		}
	})
}

// FuzzUnmarshalPayloads decodes arbitrary bytes as every payload type. It
// must never panic, and whatever decodes must re-encode to the input. For the
// types with a fast path, it must agree with the reflection path: both accept
// or both reject with the same sentinel, decode the same value and encode it
// to the same bytes.
func FuzzUnmarshalPayloads(f *testing.F) {
	for _, v := range samplePayloads(f) {
		b, err := Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 0xa1, 'y', 0x91, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0})
	types := []reflect.Type{}
	for _, v := range samplePayloads(f) {
		if typ := reflect.TypeOf(v).Elem(); !slices.Contains(types, typ) {
			types = append(types, typ)
		}
	}
	p := testParams(f, mpc.PresetP25519, mpc.PerTick)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range types {
			v := reflect.New(typ).Interface()
			err := Unmarshal(data, v)
			_, fast := v.(fastDecoder)
			if fast {
				ref := reflect.New(typ).Interface()
				refErr := unmarshalReflect(data, ref)
				if (err == nil) != (refErr == nil) || Reason(err) != Reason(refErr) {
					t.Fatalf("%v: fast path: %v; reflection: %v", typ, err, refErr)
				}
				if err == nil && !reflect.DeepEqual(v, ref) {
					t.Fatalf("%v: fast path decodes %+v; reflection %+v", typ, v, ref)
				}
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrLoopID) {
					t.Fatalf("%v: error %v wraps no expected sentinel", typ, err)
				}
				continue
			}
			b, err := Marshal(v)
			if err != nil || !bytes.Equal(b, data) {
				t.Fatalf("%v: decode-then-encode differs (%v)", typ, err)
			}
			if fast {
				if ref, err := marshalReflect(v); err != nil || !bytes.Equal(ref, b) {
					t.Fatalf("%v: Marshal differs from the reflection path (%v)", typ, err)
				}
			}
			// Exercise the decoders behind the payloads.
			switch v := v.(type) {
			case *MaterialPayload:
				_, _ = v.Material(p)
			case *MulPayload:
				_, _ = v.Msg(p)
			case *SetupPayload:
				_, _ = v.Params.Params()
			case *DealerSetupPayload:
				_, _ = v.Params.Params()
			case *ParamsWire:
				_, _ = v.Params()
			case *MatrixWire:
				_, _ = v.Decode(p.Field, int(v.Rows), int(v.Cols))
			}
		}
	})
}

// FuzzMatrixDecode decodes arbitrary matrices for three field sizes. It must
// never panic; a successful decode must encode back to the same wire matrix
// with every entry below q.
func FuzzMatrixDecode(f *testing.F) {
	f.Add(uint32(2), uint32(1), []byte{1, 0, 0, 2, 0, 0}, 2, 1)
	f.Add(uint32(1), uint32(1), bytes.Repeat([]byte{0xff}, 16), 1, 1)
	f.Add(uint32(0), uint32(0), []byte{}, 0, 0)
	f.Add(uint32(1<<32-1), uint32(1<<32-1), []byte{1}, -1, 7)
	f.Add(uint32(3), uint32(3), bytes.Repeat([]byte{0x7f}, 9*32), 3, 3)
	fields := []*mpc.Field{}
	for _, q := range testModuli {
		fields = append(fields, testField(f, q))
	}
	f.Fuzz(func(t *testing.T, r, c uint32, data []byte, rows, cols int) {
		w := MatrixWire{Rows: r, Cols: c, Data: data}
		for _, fld := range fields {
			m, err := w.Decode(fld, rows, cols)
			if err != nil {
				if Reason(err) != "dimension" && Reason(err) != "malformed" && Reason(err) != "range" {
					t.Fatalf("error %v wraps no expected sentinel", err)
				}
				continue
			}
			if got := PutMatrix(fld, m); got.Rows != r || got.Cols != c || !bytes.Equal(got.Data, data) {
				t.Fatalf("re-encoding differs")
			}
			if rows <= 64 && cols <= 64 {
				dst := mpc.NewMatrix(rows, cols)
				if err := w.DecodeInto(fld, dst); err != nil || !dst.Equal(m) {
					t.Fatalf("DecodeInto = %v", err)
				}
			}
		}
	})
}

// FuzzPeekItems reads arbitrary stream messages as a party does. It must
// never panic; what it accepts must be items that each encode back to their
// bytes, in order, with the message's one loop and epoch.
func FuzzPeekItems(f *testing.F) {
	one, err := Marshal(ItemMsg{Loop: "pendulum", Epoch: 3, Nonce: [16]byte{7}, P1: []byte{1, 2, 3}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(one)
	f.Add(append(bytes.Clone(one), one...))
	f.Add(append(bytes.Clone(one), 0x85))
	f.Fuzz(func(t *testing.T, data []byte) {
		its, err := PeekItems(data, MaxItemsPerMsg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrLoopID) && !errors.Is(err, ErrHeader) {
				t.Fatalf("error %v wraps no expected sentinel", err)
			}
			return
		}
		var back []byte
		for _, it := range its {
			if it.Loop != its[0].Loop || it.Epoch != its[0].Epoch || len(it.P1) == 0 {
				t.Fatalf("accepted %+v in a message of loop %q epoch %d", it, its[0].Loop, its[0].Epoch)
			}
			b, err := Marshal(it)
			if err != nil {
				t.Fatal(err)
			}
			back = append(back, b...)
		}
		if !bytes.Equal(back, data) {
			t.Fatal("the items do not encode back to the message")
		}
	})
}

// FuzzSplitBatch: a batch arrives from the broker before anything in it is
// authenticated. SplitBatch never panics; what it accepts is MaxBatchEnvelopes
// or fewer non-empty envelopes that are sub-slices of the input, in order,
// with nothing between them but their length prefixes, so re-encoding them
// is no longer than the input; what it refuses, it refuses whole.
func FuzzSplitBatch(f *testing.F) {
	f.Add(AppendBatch(AppendBatch(nil, []byte("one")), []byte("two")))
	f.Add([]byte{BatchMagic})
	f.Add([]byte{BatchMagic, 0x80, 0x00})                // an overlong zero length
	f.Add([]byte{BatchMagic, 0x81, 0x00, 'x'})           // an overlong length of one
	f.Add([]byte{BatchMagic, 0xff, 0xff, 0xff, 0x0f, 1}) // a length past the end
	f.Fuzz(func(t *testing.T, data []byte) {
		var envs [][]byte
		err := SplitBatch(data, func(env []byte) { envs = append(envs, env) })
		if err != nil {
			if len(envs) != 0 {
				t.Fatalf("refused (%v) after delivering %d envelopes", err, len(envs))
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is neither ErrMalformed nor ErrTooLarge", err)
			}
			return
		}
		if len(envs) == 0 || len(envs) > MaxBatchEnvelopes || data[0] != BatchMagic {
			t.Fatalf("accepted %d envelopes from a batch starting %#x", len(envs), data[0])
		}
		var again []byte
		end := 1 // the end of the previous envelope in data
		for i, e := range envs {
			if len(e) == 0 {
				t.Fatalf("envelope %d is empty", i)
			}
			// A sub-slice of data shares its backing array: its offset is
			// the difference of the capacities.
			off := cap(data) - cap(e)
			if off <= end || off+len(e) > len(data) || &data[off] != &e[0] {
				t.Fatalf("envelope %d is not in data after envelope %d's end and a length prefix", i, i-1)
			}
			end = off + len(e)
			again = AppendBatch(again, e)
		}
		if end != len(data) || len(again) > len(data) {
			t.Fatalf("envelopes end at %d of %d bytes (re-encoded: %d bytes)", end, len(data), len(again))
		}
		var back [][]byte
		if err := SplitBatch(again, func(env []byte) { back = append(back, env) }); err != nil || len(back) != len(envs) {
			t.Fatalf("re-encoded batch: %v, %d envelopes, want %d", err, len(back), len(envs))
		}
		for i := range envs {
			if !bytes.Equal(back[i], envs[i]) {
				t.Fatalf("envelope %d changed when re-encoded", i)
			}
		}
	})
}

// FuzzOpenRecord feeds arbitrary bytes to OpenRecord as a party's state
// record: the broker stores these records, so it chooses them. It must
// never panic; every refusal names its sentinel (a stale key, a forgery or
// a malformed record); whatever opens seals and opens again to the same
// record.
func FuzzOpenRecord(f *testing.F) {
	key := [32]byte{1, 2, 3}
	rec := StateRecord{Instance: 3, Epoch: 7, Version: 9, Tick: 11}
	cur, err := SealRecord(&key, "loop", rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cur)
	other := [32]byte{9}
	stale, _ := SealRecord(&other, "loop", rec)
	f.Add(stale)
	moved, _ := SealRecord(&key, "another", rec)
	f.Add(moved)
	f.Add(cur[:recordHead+3])
	f.Add(append([]byte(recordMagic), make([]byte, 60)...))
	f.Add(make([]byte, 40))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var got StateRecord
		err := OpenRecord(&key, "loop", data, &got)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrAuth) && !errors.Is(err, ErrOtherKey) {
				t.Fatalf("refused without a sentinel: %v", err)
			}
			return
		}
		again, err := SealRecord(&key, "loop", got)
		if err != nil {
			t.Fatal(err)
		}
		var back StateRecord
		if err := OpenRecord(&key, "loop", again, &back); err != nil || !reflect.DeepEqual(back, got) {
			t.Fatalf("sealed again: %+v, %v; want %+v", back, err, got)
		}
	})
}

package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// The buffer-reusing variants (SealAppend, OpenScratch, MarshalAppend,
// PeekItem) must produce exactly what their allocating counterparts do.

func TestSealAppendMatchesSeal(t *testing.T) {
	a, b := testSealer(t, RoleParty0), testSealer(t, RoleParty0) // same nonce sequence
	open := testSealer(t, RoleParty1)
	prefix := []byte("kept")
	buf := append([]byte(nil), prefix...)
	for i, n := range []int{0, 10, 300, 70000, 5} { // grows, then reuses
		payload := bytes.Repeat([]byte{byte(i + 1)}, n)
		h := Header{Kind: KindMul, Loop: "loop", Tick: uint64(i + 1), From: RoleParty0, To: RoleParty1}
		want, err := a.Seal(h, payload)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.SealAppend(buf[:len(prefix)], h, payload)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:len(prefix)], prefix) {
			t.Fatalf("SealAppend overwrote dst's contents: %q", got[:len(prefix)])
		}
		if !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("payload %d bytes: SealAppend differs from Seal", n)
		}
		if cap(want) != len(want) {
			t.Fatalf("Seal's envelope has spare capacity %d (appending to it could expose the staged plaintext)", cap(want)-len(want))
		}
		if _, p, err := open.Open(got[len(prefix):]); err != nil || !bytes.Equal(p, payload) {
			t.Fatalf("Open(SealAppend) = %d bytes, %v", len(p), err)
		}
		// The staged plaintext past the envelope is cleared.
		if tail := got[len(got):cap(got)]; bytes.Contains(tail, payload[:min(len(payload), 8)]) && n > 0 {
			t.Fatalf("payload %d bytes: plaintext left in the buffer past the envelope", n)
		}
		buf = got
	}
	h := Header{Kind: KindMul, Loop: "loop", Tick: 9, From: RoleParty0, To: RoleParty1}
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		if buf, err = b.SealAppend(buf[:0], h, []byte("steady state")); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("SealAppend into a large enough buffer: %.0f allocations, want 0", allocs)
	}
	if _, err := b.SealAppend(nil, Header{Kind: KindMul, Loop: "loop", Tick: 1, From: RoleParty1, To: RoleParty0}, nil); !errors.Is(err, ErrRole) {
		t.Errorf("SealAppend as another role: %v, want ErrRole", err)
	}
}

func TestOpenScratch(t *testing.T) {
	s, o := testSealer(t, RoleSensor), testSealer(t, RoleParty0)
	var scratch []byte
	for i, n := range []int{100, 2000, 50} {
		payload := bytes.Repeat([]byte{byte(i + 1)}, n)
		h := Header{Kind: KindMeasure, Loop: "loop", Tick: uint64(i + 1), From: RoleSensor, To: RoleParty0}
		env, err := s.Seal(h, payload)
		if err != nil {
			t.Fatal(err)
		}
		wh, wp, werr := o.Open(env)
		gh, gp, gerr := o.OpenScratch(&scratch, env)
		if werr != nil || gerr != nil || gh != wh || !bytes.Equal(gp, wp) {
			t.Fatalf("OpenScratch = %v, %d bytes, %v; Open = %v, %d bytes, %v", gh, len(gp), gerr, wh, len(wp), werr)
		}
		if cap(scratch) < n {
			t.Fatalf("scratch not kept: cap %d after a %d-byte payload", cap(scratch), n)
		}
	}
	// A forged envelope: the same error as Open, and the scratch stays usable.
	env, _ := s.Seal(Header{Kind: KindMeasure, Loop: "loop", Tick: 7, From: RoleSensor, To: RoleParty0}, []byte("x"))
	env[len(env)-1] ^= 1
	if _, _, err := o.OpenScratch(&scratch, env); !errors.Is(err, ErrAuth) {
		t.Fatalf("OpenScratch(forged) = %v, want ErrAuth", err)
	}
	env, _ = s.Seal(Header{Kind: KindMeasure, Loop: "loop", Tick: 8, From: RoleSensor, To: RoleParty0}, []byte("after"))
	allocs := testing.AllocsPerRun(20, func() {
		if _, p, err := o.OpenScratch(&scratch, env); err != nil || string(p) != "after" {
			t.Fatalf("OpenScratch after a rejection: %q, %v", p, err)
		}
	})
	opened := testing.AllocsPerRun(20, func() { o.Open(env) })
	if allocs != opened-1 { // both make the header's loop id string; Open also the plaintext
		t.Errorf("OpenScratch with a large enough scratch: %.0f allocations, Open %.0f: want one fewer", allocs, opened)
	}
}

func TestMarshalAppendMatchesMarshal(t *testing.T) {
	for _, v := range []any{
		MulPayload{Item: 3, Version: 9, T: MatrixWire{Rows: 1, Cols: 1, Data: make([]byte, 16)}},
		&OutputPayload{Item: 1},
		ItemMsg{Loop: "l", Epoch: 2, P1: []byte("env")},
		struct{ A int }{7}, // no fast path: the library's encoding
	} {
		want, err := Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MarshalAppend([]byte("pre"), v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:3]) != "pre" || !bytes.Equal(got[3:], want) {
			t.Errorf("%T: MarshalAppend = %x, want pre + %x", v, got, want)
		}
	}
	big := MulPayload{T: MatrixWire{Rows: 1, Cols: 1, Data: make([]byte, MaxEnvelope)}}
	if _, err := MarshalAppend(nil, big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("MarshalAppend over MaxEnvelope: %v, want ErrTooLarge", err)
	}
}

func TestPeekItemMatchesUnmarshal(t *testing.T) {
	msg := ItemMsg{Loop: "loop", Epoch: 5, Nonce: [16]byte{1, 2}, P0: []byte("zero"), P1: []byte("one")}
	data, err := Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var want ItemMsg
	if err := Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	got, err := PeekItem(data)
	if err != nil || got.Loop != want.Loop || got.Epoch != want.Epoch || got.Nonce != want.Nonce ||
		!bytes.Equal(got.P0, want.P0) || !bytes.Equal(got.P1, want.P1) {
		t.Fatalf("PeekItem = %+v, %v; Unmarshal = %+v", got, err, want)
	}
	// P1 aliases the message (no copy); Unmarshal's does not.
	i := bytes.Index(data, []byte("one"))
	data[i] = 'O'
	if string(got.P1) != "One" || string(want.P1) != "one" {
		t.Errorf("after changing the message: PeekItem P1 %q (want aliasing), Unmarshal P1 %q (want a copy)", got.P1, want.P1)
	}
	// Every rejection Unmarshal makes, PeekItem makes with the same error.
	noP1, _ := Marshal(ItemMsg{Loop: "loop", P0: []byte("zero")})
	badLoop, _ := Marshal(ItemMsg{Loop: "a b", P1: []byte("one")})
	for name, in := range map[string][]byte{
		"truncated": data[:len(data)-2], "trailing": append(bytes.Clone(data), 0), "empty": nil,
		"no P1": noP1, "bad loop": badLoop, "too large": make([]byte, MaxEnvelope+1),
	} {
		var v ItemMsg
		uerr := Unmarshal(in, &v)
		_, perr := PeekItem(in)
		if uerr == nil || perr == nil || uerr.Error() != perr.Error() {
			t.Errorf("%s: PeekItem error %v, Unmarshal error %v", name, perr, uerr)
		}
	}
}

// PeekItems reads concatenated items (one item is PeekItem's message) and
// rejects, as a whole, a message with a bad item, trailing bytes, items of
// different loops or epochs, or more items than allowed.
func TestPeekItems(t *testing.T) {
	var data []byte
	var want []ItemMsg
	for i := range 3 {
		m := ItemMsg{Loop: "loop", Epoch: 5, Nonce: [16]byte{byte(i)}, P1: []byte{byte(10 + i), 1, 2}}
		b, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		data, want = append(data, b...), append(want, m)
	}
	got, err := PeekItems(data, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("PeekItems: %d items, %v; want 3", len(got), err)
	}
	for i := range got {
		if got[i].Nonce != want[i].Nonce || !bytes.Equal(got[i].P1, want[i].P1) || got[i].Loop != "loop" || got[i].Epoch != 5 {
			t.Errorf("item %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// A single-item message reads as PeekItem reads it.
	single, _ := Marshal(want[0])
	if its, err := PeekItems(single, 1); err != nil || len(its) != 1 || its[0].Nonce != want[0].Nonce {
		t.Errorf("single item: %+v, %v", its, err)
	}
	other, _ := Marshal(ItemMsg{Loop: "loop", Epoch: 6, P1: []byte{1}})
	for name, c := range map[string]struct {
		in    []byte
		limit int
		want  error
	}{
		"too many":    {data, 2, ErrMalformed},
		"trailing":    {append(bytes.Clone(data), 0xc0), 3, ErrMalformed},
		"truncated":   {data[:len(data)-1], 3, ErrMalformed},
		"empty":       {nil, 3, ErrMalformed},
		"other epoch": {append(bytes.Clone(single), other...), 3, ErrHeader},
		"too large":   {make([]byte, MaxEnvelope+1), 3, ErrTooLarge},
	} {
		if its, err := PeekItems(c.in, c.limit); !errors.Is(err, c.want) || its != nil {
			t.Errorf("%s: %d items, err %v; want %v", name, len(its), err, c.want)
		}
	}
}

// PeekItemsAppend decodes what PeekItems does after dst's items, into dst's
// storage once it has room; an item naming the given loop carries that very
// string, so that decoding a loop's messages allocates nothing; an error
// leaves dst as it was.
func TestPeekItemsAppend(t *testing.T) {
	var data []byte
	for i := range 3 {
		b, err := Marshal(ItemMsg{Loop: "loop-a", Epoch: 2, Nonce: [16]byte{byte(i)}, P1: []byte{byte(i), 9}})
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	want, err := PeekItems(data, 3)
	if err != nil {
		t.Fatal(err)
	}
	loop := strings.Clone("loop-a")
	head := ItemMsg{Loop: "kept", P1: []byte{7}}
	got, err := PeekItemsAppend([]ItemMsg{head}, data, 3, loop)
	if err != nil || !reflect.DeepEqual(got[0], head) || !reflect.DeepEqual(got[1:], want) {
		t.Fatalf("PeekItemsAppend: %+v, %v; want %+v after %+v", got, err, want, head)
	}
	for i, it := range got[1:] {
		if unsafe.StringData(it.Loop) != unsafe.StringData(loop) {
			t.Errorf("item %d: Loop is a copy, not the loop passed", i)
		}
	}
	// Another loop's message decodes the same, with copies of its ID.
	if got, err := PeekItemsAppend(nil, data, 3, "loop-b"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("other loop: %+v, %v", got, err)
	}
	buf := make([]ItemMsg, 0, 3)
	if n := testing.AllocsPerRun(50, func() {
		buf, _ = PeekItemsAppend(buf[:0], data, 3, loop)
	}); n != 0 {
		t.Errorf("PeekItemsAppend into room allocates %.0f times per message", n)
	}
	bad := append(bytes.Clone(data), 0xc0)
	dst := []ItemMsg{head}
	if got, err := PeekItemsAppend(dst, bad, 3, loop); !errors.Is(err, ErrMalformed) || len(got) != 1 || !reflect.DeepEqual(got[0], head) {
		t.Errorf("trailing byte: %+v, %v; want dst back and ErrMalformed", got, err)
	}
}

// AppendMatrix encodes what PutMatrix does, into a reused buffer: two
// matrices in one buffer keep their own bytes (a wire's Data cannot be
// appended into the next one's), and the buffer is reused once it has room.
func TestAppendMatrixMatchesPutMatrix(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{7})
	for _, q := range testModuli {
		f := testField(t, q)
		var buf []byte
		for i, shape := range [][2]int{{3, 1}, {4, 3}, {1, 1}, {0, 2}, {2, 2}} {
			a := randomMatrix(t, f, rng, shape[0], shape[1])
			b := randomMatrix(t, f, rng, shape[1], shape[0])
			var wa, wb MatrixWire
			wa, buf = AppendMatrix(f, buf[:0], a)
			wb, buf = AppendMatrix(f, buf, b)
			pa, pb := PutMatrix(f, a), PutMatrix(f, b)
			if wa.Rows != pa.Rows || wa.Cols != pa.Cols || !bytes.Equal(wa.Data, pa.Data) ||
				wb.Rows != pb.Rows || wb.Cols != pb.Cols || !bytes.Equal(wb.Data, pb.Data) {
				t.Fatalf("%s, step %d: AppendMatrix differs from PutMatrix", q, i)
			}
			if cap(wa.Data) != len(wa.Data) {
				t.Errorf("%s, step %d: a wire's Data has room to grow into the next one's", q, i)
			}
			if len(buf) != len(pa.Data)+len(pb.Data) {
				t.Errorf("%s, step %d: buffer holds %d bytes, want %d", q, i, len(buf), len(pa.Data)+len(pb.Data))
			}
			got, err := wb.Decode(f, b.Rows, b.Cols)
			if err != nil || !got.Equal(b) {
				t.Fatalf("%s, step %d: round trip: %v", q, i, err)
			}
		}
	}
	// Once the buffer is large enough, encoding allocates nothing.
	f := testField(t, mpc.PresetM127)
	m := randomMatrix(t, f, rng, 6, 6)
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { _, buf = AppendMatrix(f, buf[:0], m) }); n != 0 {
		t.Errorf("AppendMatrix into a large enough buffer: %v allocations", n)
	}
}

package party

import (
	"errors"
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func serialNonce(inst uint64, ctr uint32) [16]byte {
	return mpc.ItemSerial{Instance: inst, Counter: ctr}.Nonce()
}

// An item is taken once: again, or one its dealer drew before the last one
// taken, is a replay; dealers interleave freely; a nonce that is not a
// serial is refused as another release's.
func TestItemSerialsTake(t *testing.T) {
	var s itemSerials
	for _, c := range []struct {
		inst uint64
		ctr  uint32
		want error
	}{
		{100, 1, nil},
		{100, 2, nil},
		{200, 1, nil}, // another dealer, interleaved
		{100, 5, nil}, // a gap: items another party's resync or a full stream skipped
		{200, 2, nil},
		{100, 5, codec.ErrReplay}, // the same item again
		{100, 3, codec.ErrReplay}, // an earlier one, passed over
		{200, 1, codec.ErrReplay},
		{300, 7, nil},
	} {
		if err := s.take(serialNonce(c.inst, c.ctr)); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("take(%d/%d) = %v, want %v", c.inst, c.ctr, err, c.want)
		}
	}
	if err := s.take([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}); !errors.Is(err, codec.ErrVersion) {
		t.Errorf("a random nonce: %v, want ErrVersion", err)
	}
	// The record keeps it across a restart.
	b := s.marshal(nil)
	var r itemSerials
	if err := r.unmarshal(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inst uint64
		ctr  uint32
	}{{100, 5}, {200, 2}, {300, 7}, {300, 1}} {
		if err := r.take(serialNonce(c.inst, c.ctr)); !errors.Is(err, codec.ErrReplay) {
			t.Errorf("restored: take(%d/%d) = %v, want ErrReplay", c.inst, c.ctr, err)
		}
	}
	if err := r.take(serialNonce(200, 3)); err != nil {
		t.Errorf("restored: the next item refused: %v", err)
	}
	var empty itemSerials
	if b := empty.marshal(nil); len(b) != 0 {
		t.Errorf("nothing taken encodes to %d bytes, want none (the record omits it)", len(b))
	}
}

// Past maxDealerInstances the oldest instance is forgotten, and its items
// are refused from then on, not taken again.
func TestItemSerialsForgetOldest(t *testing.T) {
	var s itemSerials
	for i := range maxDealerInstances + 1 {
		if err := s.take(serialNonce(uint64(1000+i), 1)); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
	if len(s.last) != maxDealerInstances || s.floor != 1000 {
		t.Fatalf("%d instances held, floor %d; want %d, 1000", len(s.last), s.floor, maxDealerInstances)
	}
	for _, n := range [][16]byte{serialNonce(1000, 2), serialNonce(999, 9)} {
		if err := s.take(n); !errors.Is(err, codec.ErrReplay) {
			t.Errorf("an item of a forgotten instance: %v, want ErrReplay", err)
		}
	}
	if err := s.take(serialNonce(1001, 2)); err != nil {
		t.Errorf("the oldest instance still held: %v", err)
	}
	var r itemSerials
	if err := r.unmarshal(s.marshal(nil)); err != nil || r.floor != 1000 || len(r.last) != maxDealerInstances {
		t.Fatalf("round trip: %v, floor %d, %d instances", err, r.floor, len(r.last))
	}
}

func TestItemSerialsUnmarshalRejects(t *testing.T) {
	var ok itemSerials
	_ = ok.take(serialNonce(5, 1))
	_ = ok.take(serialNonce(9, 1))
	good := ok.marshal(nil)
	swapped := append(append(append([]byte(nil), good[:8]...), good[20:32]...), good[8:20]...)
	floorAbove := append([]byte(nil), good...)
	floorAbove[7] = 6
	zeroCtr := append([]byte(nil), good...)
	zeroCtr[19] = 0
	for name, b := range map[string][]byte{
		"short":              good[:7],
		"partial entry":      good[:len(good)-1],
		"out of order":       swapped,
		"entry at its floor": floorAbove,
		"zero counter":       zeroCtr,
	} {
		var s itemSerials
		if err := s.unmarshal(b); !errors.Is(err, codec.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// The check per item taken, with three dealer instances interleaved, and the
// record's encoding per state write (0 allocations each).
func BenchmarkItemSerials(b *testing.B) {
	b.Run("take", func(b *testing.B) {
		var s itemSerials
		b.ReportAllocs()
		for i := range b.N {
			if err := s.take(serialNonce(uint64(100+i%3), uint32(1+i/3))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		var s itemSerials
		for i := range 3 {
			_ = s.take(serialNonce(uint64(100+i), 1))
		}
		buf := s.marshal(nil)
		b.ReportAllocs()
		for range b.N {
			buf = s.marshal(buf[:0])
		}
	})
}

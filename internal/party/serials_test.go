package party

import (
	"errors"
	"slices"
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

// Past maxDealerInstances the instance taken from least recently is
// forgotten, and its items are refused from then on, not taken again. A
// long-lived instance that goes on being taken from keeps its place however
// many others come and go; a restored party keeps the order, so the two
// parties forget the same instances.
func TestItemSerialsForgetLeastRecent(t *testing.T) {
	var s itemSerials
	take := func(inst uint64, ctr uint32) {
		t.Helper()
		if err := s.take(serialNonce(inst, ctr)); err != nil {
			t.Fatalf("take(%d/%d): %v", inst, ctr, err)
		}
	}
	// Instance 1000 lives on; 1001, 1002, ... each deal a few items and go.
	for i := range 2*maxDealerInstances + 10 {
		take(1000, uint32(1+i))
		take(uint64(1001+i), 1)
		take(uint64(1001+i), 2)
	}
	if len(s.last) != maxDealerInstances {
		t.Fatalf("%d instances held, want %d", len(s.last), maxDealerInstances)
	}
	if s.find(1000) < 0 {
		t.Error("the long-lived instance was forgotten")
	}
	// The short-lived ones taken from least recently were forgotten, up to
	// floor: the oldest held is the one after it.
	oldestHeld := uint64(1001 + 2*maxDealerInstances + 10 - maxDealerInstances + 1)
	if s.floor != oldestHeld-1 {
		t.Errorf("floor %d, want %d", s.floor, oldestHeld-1)
	}
	for _, n := range [][16]byte{serialNonce(oldestHeld-1, 3), serialNonce(1001, 9), serialNonce(999, 9)} {
		if err := s.take(n); !errors.Is(err, codec.ErrReplay) {
			t.Errorf("an item of a forgotten instance, or of one older than floor not held: %v, want ErrReplay", err)
		}
	}
	take(1000, 2*maxDealerInstances+11) // below floor, and still held
	take(oldestHeld, 3)                 // the oldest short-lived one still held
	if err := s.take(serialNonce(1000, 5)); !errors.Is(err, codec.ErrReplay) {
		t.Errorf("the long-lived instance's earlier item again: %v, want ErrReplay", err)
	}

	// A restore keeps what is held, in its order, and floor.
	var r itemSerials
	if err := r.unmarshal(s.marshal(nil)); err != nil || r.floor != s.floor || !slices.Equal(r.last, s.last) {
		t.Fatalf("round trip: %v, floor %d, %d instances", err, r.floor, len(r.last))
	}
	if err := r.take(serialNonce(1000, 2*maxDealerInstances+11)); !errors.Is(err, codec.ErrReplay) {
		t.Errorf("restored: the long-lived instance's last item again: %v, want ErrReplay", err)
	}
	// So the restored party forgets the instance the other forgets.
	for _, x := range []*itemSerials{&s, &r} {
		if err := x.take(serialNonce(1<<40, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// (oldestHeld was taken from since, so the next one went.)
	if r.floor != oldestHeld+1 || !slices.Equal(r.last, s.last) {
		t.Errorf("after a restore: floor %d, want %d, and the instances held as the party that went on", r.floor, oldestHeld+1)
	}
}

func TestItemSerialsUnmarshalRejects(t *testing.T) {
	var ok itemSerials
	_ = ok.take(serialNonce(5, 1))
	_ = ok.take(serialNonce(9, 1))
	good := ok.marshal(nil)
	twice := append(append([]byte(nil), good...), good[8:20]...)
	zeroInst := append(append([]byte(nil), good[:8]...), make([]byte, 8)...)
	zeroInst = append(zeroInst, good[16:]...)
	zeroCtr := append([]byte(nil), good...)
	zeroCtr[19] = 0
	for name, b := range map[string][]byte{
		"short":             good[:7],
		"partial entry":     good[:len(good)-1],
		"an instance twice": twice,
		"instance zero":     zeroInst,
		"zero counter":      zeroCtr,
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

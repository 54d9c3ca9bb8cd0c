package sensor

import (
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
)

// TestResumable: a record of this wire version and digest resumes; one of
// another wire version (or of a release that did not record it) or another
// digest starts a new set-up, saying why.
func TestResumable(t *testing.T) {
	d, k := [32]byte{1}, [32]byte{3}
	for _, c := range []struct {
		name string
		rec  record
		ok   bool
		why  string
	}{
		{"same", record{Digest: d, Wire: codec.Version}, true, ""},
		{"wire version 1 (not recorded)", record{Digest: d}, false, "wire version 0 (0: version 1), this build speaks"},
		{"another wire version", record{Digest: d, Wire: codec.Version + 1}, false, "wire version"},
		{"other controller", record{Digest: [32]byte{2}, Wire: codec.Version}, false, "controller or options changed"},
		{"same keys", record{Digest: d, Wire: codec.Version, Keys: k[:]}, true, ""},
		{"no keys recorded (an earlier release)", record{Digest: d, Wire: codec.Version}, true, ""},
		{"a recipient's key changed", record{Digest: d, Wire: codec.Version, Keys: []byte{9}}, false, "public key of a role the set-up is sealed to"},
	} {
		ok, why := resumable(c.rec, d, k)
		if ok != c.ok || !strings.Contains(why, c.why) || (!ok && why == "") {
			t.Errorf("%s: resumable = %v, %q; want %v, %q", c.name, ok, why, c.ok, c.why)
		}
	}
}

// TestRecordCarriesWire: the record a sensor writes round-trips the wire
// version it was sealed with.
func TestRecordCarriesWire(t *testing.T) {
	var k [32]byte
	data, err := codec.SealRecord(&k, "loop/sensor", record{Epoch: 3, Digest: [32]byte{1}, NextTick: 9, Wire: codec.Version})
	if err != nil {
		t.Fatal(err)
	}
	var got record
	if err := codec.OpenRecord(&k, "loop/sensor", data, &got); err != nil || got.Wire != codec.Version || got.Epoch != 3 {
		t.Fatalf("record %+v, %v", got, err)
	}
}

// The resume record's writer takes the newest next tick: one waiting is
// replaced, never queued behind (an older number written after a newer one
// would send a resumed sensor back over tick numbers already used).
func TestLatestReplaces(t *testing.T) {
	ch := make(chan uint64, 1)
	latest(ch, 25)
	latest(ch, 50)
	latest(ch, 75)
	if got := <-ch; got != 75 {
		t.Fatalf("got %d, want the newest, 75", got)
	}
	select {
	case v := <-ch:
		t.Fatalf("%d still queued", v)
	default:
	}
}

// No tick at or above the stored record's next tick plus resumeMargin is
// sent: a sensor restarted from that record starts there, so it can never
// send a tick number again (with the broker replaying the parties' old mask
// shares to it, one item's mask would pad two measurements). Without a
// record (no StateKey) there is no restart to guard against.
func TestResumeCovers(t *testing.T) {
	var key [32]byte
	s := &Sensor{opt: Options{StateKey: &key}}
	s.savedNext.Store(50)
	if !s.resumeCovers(50+resumeMargin-1) || s.resumeCovers(50+resumeMargin) {
		t.Errorf("stored next tick 50: covers %d %v, %d %v; want true, false", 50+resumeMargin-1, s.resumeCovers(50+resumeMargin-1), 50+resumeMargin, s.resumeCovers(50+resumeMargin))
	}
	s.opt.StateKey = nil
	if !s.resumeCovers(1 << 40) {
		t.Error("without a resume record, a tick was held back")
	}
}

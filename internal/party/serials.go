package party

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// maxDealerInstances bounds the dealer instances a loop remembers in an
// epoch (itemSerials). Each dealer process draws a loop's items as one
// instance, so this is the dealer starts a set-up epoch sees before one is
// forgotten: the one whose items this party took least recently. A
// forgotten instance's items are refused.
const maxDealerInstances = 256

// itemSerials is what keeps a party from using an offline item twice when
// the broker delivers it again: the stream sequence that pairs the items
// (hwm) is the broker's to assign, the item's serial is not. For each dealer
// instance it holds the counter of the last item this party took in the
// epoch; an item is taken only if its counter is above it. An instance's
// items reach the stream in counter order (one goroutine draws and publishes
// them, internal/dealer), so an honest queue passes the check.
//
// The instances are held in the order their items were last taken, the
// least recent first, and persisted in that order. When more than
// maxDealerInstances are held, the least recent is forgotten and floor rises
// to it if it is below: no item of an instance at or below floor is taken
// unless that instance is still held. So a long-lived dealer replica keeps
// its place however many others come and go in the epoch (rolling updates,
// a replica that restarts in a loop). Both parties take the same items in
// the same order, and a restarted party gets the order back from its record,
// so both forget the same instance and refuse the same items. (A record of
// an earlier release holds the instances by start time, the order in which
// it forgot them.)
//
// The serial is sealed into each party's share of the item and checked
// against the item's nonce (material), except P0's seed-compressed items,
// which carry no envelope: P0 then checks the nonce by its tag (the
// dealer's, under P0's seed) before it expands it, and records the nonce it
// expands, so it never uses one twice either. Before the tag, a forged
// nonce was recorded too (it must be: P0's message reveals something of its
// V), and one with a high counter, or a few hundred with new instances,
// had P0 refuse the dealers' genuine items until a new set-up. The parties
// also compare serials in the tick's exchange (sameItem): a tick on items
// that differ (a broker that swaps one party's) is abandoned as an item
// mismatch. With compression off, an item
// whose P0 envelope the broker stripped would have P0 expand the genuine
// nonce as if it were compressed, under a serial both agree on: P0 refuses
// such an item (material, worker.p0Sealed).
type itemSerials struct {
	last  []serialMark // by the last take, the least recent first
	floor uint64
}

// serialMark is a dealer instance and the counter of the last item of it
// taken.
type serialMark struct {
	inst uint64
	ctr  uint32
}

// find is the index of inst in last, or -1. It looks from the most recent
// end, where the live dealers are.
func (s *itemSerials) find(inst uint64) int {
	for i := len(s.last) - 1; i >= 0; i-- {
		if s.last[i].inst == inst {
			return i
		}
	}
	return -1
}

// errItemSerial is why an item without a serial is refused.
var errItemSerial = fmt.Errorf("%w: offline item nonce is not a dealer serial (an item from a dealer of an earlier release?)", codec.ErrVersion)

// take checks that the item with this nonce has not been taken (nor passed
// over within its instance), and records it as taken.
func (s *itemSerials) take(nonce [16]byte) error {
	sr, ok := mpc.SerialOf(nonce)
	if !ok {
		return errItemSerial
	}
	i := s.find(sr.Instance)
	switch {
	case i >= 0 && sr.Counter <= s.last[i].ctr:
		return fmt.Errorf("%w: offline item %v was delivered again (this party has taken up to %d of that dealer's items)", codec.ErrReplay, sr, s.last[i].ctr)
	case i >= 0:
		copy(s.last[i:], s.last[i+1:]) // the most recent to the end
		s.last[len(s.last)-1] = serialMark{sr.Instance, sr.Counter}
		return nil
	case sr.Instance <= s.floor:
		return fmt.Errorf("%w: offline item %v is from a dealer instance this party no longer remembers (it keeps the %d taken from most recently)", codec.ErrReplay, sr, maxDealerInstances)
	}
	s.last = append(s.last, serialMark{sr.Instance, sr.Counter})
	if len(s.last) > maxDealerInstances {
		s.floor = max(s.floor, s.last[0].inst)
		s.last = slices.Delete(s.last, 0, 1)
	}
	return nil
}

// serialsLen is the encoded size of one remembered instance.
const serialsLen = 12

// marshal appends the record's encoding to b: floor, then each instance and
// its counter, the least recently taken first (8 + 12 bytes per instance,
// big-endian). An instance may lie below floor (still held: see
// itemSerials). Nothing taken yet appends nothing.
func (s *itemSerials) marshal(b []byte) []byte {
	if len(s.last) == 0 && s.floor == 0 {
		return b
	}
	b = binary.BigEndian.AppendUint64(b, s.floor)
	for _, m := range s.last {
		b = binary.BigEndian.AppendUint64(b, m.inst)
		b = binary.BigEndian.AppendUint32(b, m.ctr)
	}
	return b
}

// unmarshal replaces s by a record's encoding (marshal); empty is nothing
// taken.
func (s *itemSerials) unmarshal(b []byte) error {
	*s = itemSerials{}
	if len(b) == 0 {
		return nil
	}
	if len(b) < 8 || (len(b)-8)%serialsLen != 0 || (len(b)-8)/serialsLen > maxDealerInstances {
		return fmt.Errorf("%w: item serials of %d bytes", codec.ErrMalformed, len(b))
	}
	floor := binary.BigEndian.Uint64(b)
	last := make([]serialMark, 0, (len(b)-8)/serialsLen)
	for e := b[8:]; len(e) > 0; e = e[serialsLen:] {
		m := serialMark{binary.BigEndian.Uint64(e), binary.BigEndian.Uint32(e[8:])}
		if m.inst == 0 || m.ctr == 0 || slices.ContainsFunc(last, func(o serialMark) bool { return o.inst == m.inst }) {
			return fmt.Errorf("%w: item serials with instance %d twice, or a zero instance or counter", codec.ErrMalformed, m.inst)
		}
		last = append(last, m)
	}
	s.floor, s.last = floor, last
	return nil
}

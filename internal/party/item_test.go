package party

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func itemMsgs(t *testing.T, ms ...codec.ItemMsg) []byte {
	t.Helper()
	var b []byte
	for _, m := range ms {
		e, err := codec.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, e...)
	}
	return b
}

// trimItems keeps only this party's part of a stream message's items, and
// rejects items of another loop or epoch before they are buffered.
func TestTrimItems(t *testing.T) {
	const loop, epoch, seq = "pend-1", 7, 41
	nonce := [16]byte{1, 2, 3}
	env0, env1 := bytes.Repeat([]byte{0xa0}, 300), bytes.Repeat([]byte{0xa1}, 300)
	msg := func(ms ...codec.ItemMsg) []byte { return itemMsgs(t, ms...) }
	one := func(w *worker, data []byte) rawItem {
		t.Helper()
		rs := w.trimItems(data, seq)
		if len(rs) != 1 {
			t.Fatalf("%d items from a single-item message", len(rs))
		}
		if rs[0].seq != itemID(seq, 0) {
			t.Errorf("id %#x, want %#x", rs[0].seq, itemID(seq, 0))
		}
		return rs[0]
	}
	compressed := msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P1: env1})
	full := msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P0: env0, P1: env1})
	p0, p1 := &worker{id: 0, loop: loop, epoch: epoch, perMsg: 1}, &worker{id: 1, loop: loop, epoch: epoch, perMsg: 1}

	if r := one(p0, compressed); r.err != nil || r.env != nil || r.nonce != nonce {
		t.Errorf("P0, compressed: %+v; want the nonce alone", r)
	}
	if r := one(p1, compressed); r.err != nil || !bytes.Equal(r.env, env1) || r.nonce != nonce {
		t.Errorf("P1, compressed: err %v, %d-byte envelope; want its own", r.err, len(r.env))
	}
	for _, c := range []struct {
		w    *worker
		want []byte
	}{{p0, env0}, {p1, env1}} {
		data := bytes.Clone(full)
		r := one(c.w, data)
		if r.err != nil || !bytes.Equal(r.env, c.want) {
			t.Fatalf("P%d, uncompressed: err %v; want its own envelope", c.w.id, r.err)
		}
		// A copy: the message's buffer (with the other party's share) is not kept.
		clear(data)
		if !bytes.Equal(r.env, c.want) {
			t.Errorf("P%d: the kept envelope aliases the message", c.w.id)
		}
	}

	for name, data := range map[string][]byte{
		"other loop":                msg(codec.ItemMsg{Loop: "pend-2", Epoch: epoch, Nonce: nonce, P1: env1}),
		"later epoch":               msg(codec.ItemMsg{Loop: loop, Epoch: epoch + 1, Nonce: nonce, P1: env1}),
		"other loop, earlier epoch": msg(codec.ItemMsg{Loop: "pend-2", Epoch: epoch - 1, Nonce: nonce, P1: env1}),
	} {
		if r := one(p0, data); !errors.Is(r.err, codec.ErrHeader) {
			t.Errorf("%s: err %v, want ErrHeader", name, r.err)
		}
	}
	// An earlier set-up's item, left in the queue: discarded, not a reject.
	if r := one(p0, msg(codec.ItemMsg{Loop: loop, Epoch: epoch - 1, Nonce: nonce, P1: env1})); !errors.Is(r.err, errEarlierEpoch) || errors.Is(r.err, codec.ErrHeader) {
		t.Errorf("earlier epoch: err %v, want errEarlierEpoch alone", r.err)
	}
	if r := one(p1, []byte{0xc1, 0x00}); r.err == nil {
		t.Error("malformed bytes accepted")
	}
	if r := one(p1, msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P0: env0})); r.err == nil {
		t.Error("item without P1's material accepted")
	}
}

// A multi-item message gives one raw item per item, numbered in order; more
// items than the set-up allows, or an item of another loop or epoch among
// them, reject the whole message.
func TestTrimItemsMulti(t *testing.T) {
	const loop, epoch, seq = "pend-1", 7, 9
	var ms []codec.ItemMsg
	for i := range 4 {
		ms = append(ms, codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: [16]byte{byte(i)}, P1: bytes.Repeat([]byte{byte(0xb0 + i)}, 200)})
	}
	p1 := &worker{id: 1, loop: loop, epoch: epoch, perMsg: 4}
	data := itemMsgs(t, ms...)
	rs := p1.trimItems(data, seq)
	if len(rs) != 4 {
		t.Fatalf("%d items, want 4", len(rs))
	}
	for i, r := range rs {
		if r.err != nil || r.seq != itemID(seq, i) || r.nonce != ms[i].Nonce || !bytes.Equal(r.env, ms[i].P1) {
			t.Errorf("item %d: id %#x err %v nonce %v; want id %#x and its own envelope", i, r.seq, r.err, r.nonce[0], itemID(seq, i))
		}
		if i > 0 && rs[i-1].seq >= r.seq {
			t.Errorf("ids not increasing: %#x then %#x", rs[i-1].seq, r.seq)
		}
	}
	// P1's envelopes are all of the message: kept without copying.
	if &rs[0].env[0] != &data[bytes.Index(data, ms[0].P1)] {
		t.Error("P1's envelopes were copied although they are most of the message")
	}
	p1.perMsg = 3
	if rs := p1.trimItems(data, seq); len(rs) != 1 || !errors.Is(rs[0].err, codec.ErrMalformed) {
		t.Errorf("4 items with 3 allowed: %d items, err %v; want one ErrMalformed", len(rs), rs[0].err)
	}
	p1.perMsg = 4
	bad := append([]codec.ItemMsg{}, ms...)
	bad[2].Epoch++
	if rs := p1.trimItems(itemMsgs(t, bad...), seq); len(rs) != 1 || !errors.Is(rs[0].err, codec.ErrHeader) {
		t.Errorf("an item of another epoch inside: %d items, err %v; want one ErrHeader", len(rs), rs[0].err)
	}
	// An earlier set-up's message, discarded whole, stands for its four
	// items in duet_items_discarded_total (it counted one a message).
	old := append([]codec.ItemMsg{}, ms...)
	for i := range old {
		old[i].Epoch--
	}
	if rs := p1.trimItems(itemMsgs(t, old...), seq); len(rs) != 1 || !errors.Is(rs[0].err, errEarlierEpoch) || rs[0].items != 4 {
		t.Errorf("an earlier set-up's message: %d items, err %v, standing for %d; want one errEarlierEpoch for 4", len(rs), rs[0].err, rs[0].items)
	}
	// ... also with more items than this set-up's limit (a new set-up with
	// fewer items a message): before, refused as malformed, counted as one.
	p1.perMsg = 1
	if rs := p1.trimItems(itemMsgs(t, old...), seq); len(rs) != 1 || !errors.Is(rs[0].err, errEarlierEpoch) || rs[0].items != 4 {
		t.Errorf("an earlier set-up's 4-item message, 1 allowed now: %d items, err %v, standing for %d; want one errEarlierEpoch for 4", len(rs), rs[0].err, rs[0].items)
	}
	if rs := p1.trimItems(data, seq); len(rs) != 1 || !errors.Is(rs[0].err, codec.ErrMalformed) || rs[0].items != 4 {
		t.Errorf("this set-up's 4-item message, 1 allowed: %d items, err %v, standing for %d; want one ErrMalformed for 4", len(rs), rs[0].err, rs[0].items)
	}
	p1.perMsg = 4
	if rs := p1.trimItems(append(bytes.Clone(data), 0xc0), seq); len(rs) != 1 || rs[0].err == nil {
		t.Error("trailing byte after the items accepted")
	}
}

// The payloads carry a message's first item as its stream sequence alone,
// as releases without multi-item messages do, and every id maps back.
func TestWireItem(t *testing.T) {
	for _, id := range []uint64{itemID(1, 0), itemID(1, 1), itemID(77, 0), itemID(77, 127), itemID(1<<40, 5)} {
		if got := fromWire(wireItem(id)); got != id {
			t.Errorf("id %#x: wire %#x maps back to %#x", id, wireItem(id), got)
		}
	}
	if w := wireItem(itemID(1234, 0)); w != 1234 {
		t.Errorf("first item of message 1234 on the wire: %d, want 1234", w)
	}
	if wireItem(itemID(1234, 1)) == wireItem(itemID(1234, 0)) || wireItem(itemID(1234, 1)) == 1234<<8|1 {
		t.Error("second item's wire id collides")
	}
}

// A restored record never lets a party take an item at or below the one it
// had taken: without an index (earlier releases, or index 0) the whole
// message counts as taken.
func TestRestoredHWM(t *testing.T) {
	for _, c := range []struct {
		rec  stateRecord
		next uint64 // the first id that may be taken after the restore
	}{
		{stateRecord{HWM: 10}, itemID(11, 0)},
		{stateRecord{HWM: 10, HWMIdx: 3}, itemID(10, 4)},
	} {
		h := restoredHWM(c.rec)
		if h >= c.next || h < itemID(c.rec.HWM, int(c.rec.HWMIdx)) {
			t.Errorf("record hwm %d idx %d: restored %#x, want in [%#x, %#x)", c.rec.HWM, c.rec.HWMIdx, h, itemID(c.rec.HWM, int(c.rec.HWMIdx)), c.next)
		}
	}
	// What record() writes restores to what was taken, or beyond within the
	// same message.
	w := &worker{hwm: itemID(50, 2)}
	rec := stateRecord{HWM: w.hwm >> 8, HWMIdx: w.hwm & 0xff}
	if got := restoredHWM(rec); got != w.hwm {
		t.Errorf("round trip of %#x: %#x", w.hwm, got)
	}
}

// A record whose item is a message's first carries no hwm_idx field, so a
// release without multi-item messages (which rejects unknown fields) still
// restores it; one inside a message carries it.
func TestStateRecordHWMCompat(t *testing.T) {
	for _, c := range []struct {
		rec   stateRecord
		field bool
	}{{stateRecord{HWM: 5}, false}, {stateRecord{HWM: 5, HWMIdx: 3}, true}} {
		b, err := codec.Marshal(c.rec)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(b, []byte("hwm_idx")); got != c.field {
			t.Errorf("%+v: hwm_idx in the encoding %v, want %v", c.rec, got, c.field)
		}
	}
}

// takeRaw hands out the queued stream messages' items one by one, in order,
// across messages (an empty one included), releases each item's bytes from
// the message it came in, and canInline sees an item left in the message
// being used as well as one still queued.
func TestTakeRawBatches(t *testing.T) {
	w := &worker{items: make(chan []rawItem, 4), subjMeasure: "m"}
	raw := func(seq uint64) rawItem { return rawItem{seq: seq, env: []byte{byte(seq)}} }
	first := []rawItem{raw(1), raw(2), raw(3)}
	w.items <- first
	w.items <- nil
	w.items <- []rawItem{raw(4)}
	if !w.canInline("m") {
		t.Fatal("items queued: a measurement must be handled inline")
	}
	var got []uint64
	for {
		r, ok := w.takeRaw()
		if !ok {
			break
		}
		if len(r.env) != 1 || r.env[0] != byte(r.seq) {
			t.Fatalf("item %d carries %v", r.seq, r.env)
		}
		got = append(got, r.seq)
		if r.seq == 1 {
			if first[0].env != nil {
				t.Error("a taken item's bytes are still referenced by its message")
			}
			if !w.canInline("m") {
				t.Error("two items left in the message in use: a measurement must be handled inline")
			}
		}
	}
	if want := []uint64{1, 2, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v", got, want)
	}
	if w.canInline("m") {
		t.Error("no item left: a measurement may wait for one, so it must not be handled inline")
	}
	if !w.canInline("other") {
		t.Error("only a measurement can block")
	}
}

// noMetaMsg is a stream message whose metadata cannot be read.
type noMetaMsg struct{ jetstream.Msg }

func (noMetaMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }
func (noMetaMsg) Data() []byte                              { return []byte("junk") }

// TestMessageWithoutMetadataRefused: a delivery of the offline consumer
// whose metadata cannot be read (no stream sequence) is refused when taken,
// counted as a malformed reject and a discarded item, and the next item is
// taken. Before, it was discarded as an item at or below the high-water
// mark (its id 0), with no reject counted.
func TestMessageWithoutMetadataRefused(t *testing.T) {
	r := newTwoHopRig(t, 1)
	w, m := r.w[0], r.m[0]
	item := <-w.items
	w.items = make(chan []rawItem, 2)
	w.items <- w.rawBatch(noMetaMsg{})
	w.items <- item
	seq, _, _, err := w.takeItem(t.Context(), false)
	if err != nil || seq != itemID(1, 0) {
		t.Fatalf("took item %d (%v), want item %d", seq, err, itemID(1, 0))
	}
	if n := testutil.ToFloat64(m.Rejects.WithLabelValues("malformed")); n != 1 {
		t.Errorf("%v malformed rejects, want 1", n)
	}
	if n := metrics.Sum(m.Rejects); n != 1 {
		t.Errorf("%v rejects in all, want 1", n)
	}
	if d, c := testutil.ToFloat64(m.ItemsDiscarded.WithLabelValues(rigLoop)), testutil.ToFloat64(m.ItemsConsumed.WithLabelValues(rigLoop)); d != 1 || c != 1 {
		t.Errorf("%v discarded, %v consumed; want 1 and 1", d, c)
	}
}

// TestNoInlineWithoutAUsableItem: a measurement is not handled on the
// shared dispatcher when the items at hand cannot be used: all below
// minSeq (a resynchronization skipped them) or at the high-water mark, a
// pre-opened item ruled out, or one to burn first. Its tick would wait for
// the next pull (ItemWait), every loop's messages with it; before, any item
// in the batch counted.
func TestNoInlineWithoutAUsableItem(t *testing.T) {
	w := &worker{items: make(chan []rawItem, 1), subjMeasure: "m"}
	w.batch = []rawItem{{seq: 10}, {seq: 11}, {seq: 12}}
	if !w.canInline("m") {
		t.Fatal("usable items in the batch: a measurement must be handled inline")
	}
	w.minSeq = 13
	if w.canInline("m") {
		t.Error("every item in the batch below minSeq: handled inline")
	}
	w.minSeq, w.hwm = 0, 12
	if w.canInline("m") {
		t.Error("every item in the batch at or below the high-water mark: handled inline")
	}
	w.hwm, w.burn = 0, 1
	if w.canInline("m") {
		t.Error("an item to burn first: handled inline")
	}
	w.burn, w.batch = 0, nil
	w.pre = preOpen{ok: true, seq: 5}
	w.minSeq = 6
	if w.canInline("m") {
		t.Error("the pre-opened item below minSeq, nothing else at hand: handled inline")
	}
	w.minSeq = 5
	if !w.canInline("m") {
		t.Error("the pre-opened item usable: a measurement must be handled inline")
	}
}

// TestEarlyMessagesBeyondTheBufferCounted: the other party's Protocol 1
// and 2 messages of ticks this party has not started are kept up to
// maxPending of each kind; one more is dropped and counted as an overload
// reject (it was dropped silently), the kept ones unchanged.
func TestEarlyMessagesBeyondTheBufferCounted(t *testing.T) {
	r := newTwoHopRig(t, 1)
	w, m := r.w[1], r.m[1]
	y := mpc.NewMatrix(r.prm.N, 1)
	for tick := uint64(1); tick <= maxPending+1; tick++ {
		w.onMul(tick, peerMul{item: itemID(tick, 0), msg: mpc.MulMsg{T: y}})
		w.onTrunc(tick, peerTrunc{item: itemID(tick, 0), y: y})
	}
	if n := testutil.ToFloat64(m.Rejects.WithLabelValues("overload")); n != 2 {
		t.Errorf("%v overload rejects, want 2 (one message of each kind beyond the buffer)", n)
	}
	if len(w.pendMul) != maxPending || len(w.pendTrunc) != maxPending {
		t.Errorf("kept %d Protocol 1 and %d Protocol 2 messages, want %d of each", len(w.pendMul), len(w.pendTrunc), maxPending)
	}
	if _, ok := w.pendMul[maxPending+1]; ok {
		t.Error("the message beyond the buffer was kept")
	}
	// This party passes the kept messages' ticks without starting them
	// (each failed before it began, say its state not persisted): they are
	// dropped, uncounted, to make room for a later tick's, but for tick
	// cur's Protocol 2 message, which its tick may still take.
	w.cur = maxPending
	next := uint64(maxPending + 2)
	w.onMul(next, peerMul{item: itemID(next, 0), msg: mpc.MulMsg{T: y}})
	w.onTrunc(next, peerTrunc{item: itemID(next, 0), y: y})
	if n := testutil.ToFloat64(m.Rejects.WithLabelValues("overload")); n != 2 {
		t.Errorf("after the kept ticks were passed: %v overload rejects, want still 2", n)
	}
	_, mul := w.pendMul[next]
	_, trunc := w.pendTrunc[next]
	_, cur := w.pendTrunc[maxPending]
	if !mul || !trunc || !cur || len(w.pendMul) != 1 || len(w.pendTrunc) != 2 {
		t.Errorf("kept %d Protocol 1 and %d Protocol 2 messages (tick %d's: %v, %v; tick %d's Protocol 2: %v); want those three only", len(w.pendMul), len(w.pendTrunc), next, mul, trunc, maxPending, cur)
	}
}

// A Protocol 1 message decoded ahead of its tick is kept as a copy: the
// next message, decoded into the same matrices, does not change it.
func TestEarlyMulKeepsItsOwnCopy(t *testing.T) {
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	prm := mpc.Params{Field: f, N: 2, M: 1, P: 1, Variant: mpc.PerTick}
	w := &worker{prm: prm, cur: 5, st: begun, pendMul: map[uint64]peerMul{}}
	r, c := prm.PhiShape()
	payload := func() (codec.MulPayload, mpc.MulMsg) {
		s, err := f.RandomMatrix(rand.Reader, r, c)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := f.RandomMatrix(rand.Reader, c, 1)
		if err != nil {
			t.Fatal(err)
		}
		return codec.MulPayload{Item: 1, S: codec.PutMatrix(f, s), T: codec.PutMatrix(f, tm)}, mpc.MulMsg{S: s, T: tm}
	}
	early, earlyWant := payload()
	in, err := w.decodeMul(early)
	if err != nil {
		t.Fatal(err)
	}
	w.onMul(7, in) // tick 7 while tick 5 is open: kept for later
	next, nextWant := payload()
	in, err = w.decodeMul(next)
	if err != nil {
		t.Fatal(err)
	}
	if !in.msg.T.Equal(nextWant.T) || !in.msg.S.Equal(nextWant.S) {
		t.Fatal("the second message did not decode")
	}
	kept, ok := w.pendMul[7]
	if !ok {
		t.Fatal("the early message was not kept")
	}
	if !kept.msg.T.Equal(earlyWant.T) || !kept.msg.S.Equal(earlyWant.S) {
		t.Error("the kept early message was overwritten by the next one")
	}
	// A malformed message is refused with its shape named, as before.
	bad := next
	bad.T.Rows++
	if _, err := w.decodeMul(bad); !errors.Is(err, codec.ErrDimension) {
		t.Errorf("a %dx%d T decoded: %v", bad.T.Rows, bad.T.Cols, err)
	}
}

// pendulumParams are the pendulum's parameters (per-tick, 2^127-1).
func pendulumParams(t *testing.T) mpc.Params {
	t.Helper()
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	return mpc.Params{Field: f, N: 3, M: 1, P: 2, K: 18, L: 9, Lambda: 40, Variant: mpc.PerTick}
}

// pendulumParty is party 0 of the pendulum's shape (per-tick, zero shares).
func pendulumParty(t *testing.T) (mpc.Params, *mpc.Party) {
	t.Helper()
	prm := pendulumParams(t)
	r, c := prm.PhiShape()
	p, err := mpc.NewParty(prm, 0, mpc.NewMatrix(r, c), mpc.NewMatrix(prm.N, 1))
	if err != nil {
		t.Fatal(err)
	}
	return prm, p
}

// TestMaterialRecycling: items are decoded into recycled materials, never
// into the one the party holds since its latest Begin; the material of a
// Begin the party refuses and that of an item that fails to decode return to
// the spares, which stay bounded; a recycled material decodes to what a new
// one does.
func TestMaterialRecycling(t *testing.T) {
	prm, p := pendulumParty(t)
	seed := [32]byte{5}
	w := &worker{id: 0, prm: prm, p: p, expander: mpc.NewExpander(prm, seed)}
	y := mpc.NewMatrix(prm.P, 1)
	decoded := func(n byte) mpc.TickMaterial {
		t.Helper()
		it := item{rawItem: tagged(seed, rawItem{seq: uint64(n), nonce: [16]byte{n}})}
		w.decode(&it)
		if it.err != nil {
			t.Fatal(it.err)
		}
		want, err := mpc.ExpandP0(prm, seed, [16]byte{n})
		if err != nil {
			t.Fatal(err)
		}
		if !it.mat.Triple.U.Equal(want.Triple.U) || !it.mat.Triple.V.Equal(want.Triple.V) || !it.mat.Triple.W.Equal(want.Triple.W) ||
			!it.mat.Mask.M.Equal(want.Mask.M) || !it.mat.Mask.L.Equal(want.Mask.L) {
			t.Fatalf("item %d: the decoded material differs from a new one's", n)
		}
		return it.mat
	}
	same := func(a, b mpc.TickMaterial) bool { return &a.Triple.U.Data[0] == &b.Triple.U.Data[0] }
	begin := func(m mpc.TickMaterial) {
		t.Helper()
		if _, err := w.begin(y, m); err != nil {
			t.Fatal(err)
		}
	}

	m1 := decoded(1)
	begin(m1)
	m2 := decoded(2) // the staged item, while the party holds m1
	if same(m2, m1) {
		t.Fatal("an item was decoded into the material the party holds")
	}
	begin(m2) // m1 is free now
	m3 := decoded(3)
	if !same(m3, m1) {
		t.Error("the material freed by the next Begin was not reused")
	}
	if same(m3, m2) {
		t.Fatal("an item was decoded into the material the party holds")
	}
	// A Begin the party refuses: the party keeps m2, m3 is free.
	if _, err := w.begin(mpc.NewMatrix(prm.P+1, 1), m3); err == nil {
		t.Fatal("Begin took a measurement of the wrong shape")
	}
	if !same(w.begun, m2) {
		t.Fatal("a refused Begin replaced the party's material")
	}
	if m4 := decoded(4); !same(m4, m3) || same(m4, m2) {
		t.Error("the material of a refused Begin was not reused")
	} else {
		w.recycle(m4)
	}
	// An item that fails to decode (P1 material missing for party 1) frees
	// its material.
	w.id = 1
	bad := item{rawItem: rawItem{seq: 5}}
	w.decode(&bad)
	if bad.err == nil || bad.mat.Triple.V.Data != nil || len(w.spare) != 1 {
		t.Fatalf("a failed decode: err %v, material kept %v, %d spares", bad.err, bad.mat.Triple.V.Data != nil, len(w.spare))
	}
	w.id = 0
	// The spares stay bounded.
	for n := range 10 {
		w.recycle(decoded(byte(10 + n)))
	}
	for range 10 {
		var m mpc.TickMaterial
		m.Recycle(prm)
		w.recycle(m)
	}
	if len(w.spare) > maxSpare {
		t.Errorf("%d spare materials, at most %d expected", len(w.spare), maxSpare)
	}
}

// TestItemSerialCrossCheck: the other party's Protocol 1 message of the open
// tick with the same item id but another serial (a broker that handed the
// parties different stream messages under one sequence, or P0 a forged
// nonce) abandons the tick as an item mismatch and skips past the id,
// before the output share or the state update is computed on it (the worker
// here has no mpc.Party: a tick that went on would panic). sameItem takes a message without a serial
// (a party of an earlier release) on its id alone.
func TestItemSerialCrossCheck(t *testing.T) {
	own := mpc.ItemSerial{Instance: 0x1234, Counter: 7}.Nonce()
	other := mpc.ItemSerial{Instance: 0x1234, Counter: 8}.Nonce()
	for _, c := range []struct {
		peer       uint64
		peerSerial codec.Serial
		want       bool
	}{
		{9, own, true},
		{9, codec.Serial{}, true}, // an earlier release's message
		{9, other, false},
		{10, own, false},
		{10, codec.Serial{}, false},
	} {
		if got := sameItem(c.peer, c.peerSerial, 9, own); got != c.want {
			t.Errorf("sameItem(%d, %x, 9, %x) = %v, want %v", c.peer, c.peerSerial[:4], own[:4], got, c.want)
		}
	}

	m := metrics.New("party")
	s := &Service{opt: Options{Metrics: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	w := &worker{s: s, loop: "l", cur: 5, st: begun, item: 9, itemSerial: own, pendMul: map[uint64]peerMul{}, pendTrunc: map[uint64]peerTrunc{}}
	w.onMul(5, peerMul{item: 9, serial: other, msg: mpc.MulMsg{T: mpc.NewMatrix(2, 1)}})
	if w.st != idle || w.minSeq != 10 {
		t.Fatalf("after a message of another serial: stage %v, minSeq %d; want the tick abandoned and the id skipped", w.st, w.minSeq)
	}
	if got := testutil.ToFloat64(m.Abandoned.WithLabelValues("l", missItem)); got != 1 {
		t.Errorf("%v ticks abandoned as %s, want 1", got, missItem)
	}
	if got := testutil.ToFloat64(m.Mismatches.WithLabelValues("l", "item")); got != 1 {
		t.Errorf("%v item mismatches counted, want 1", got)
	}
}

// TestP0RefusesStrippedItem: in a set-up without seed compression
// (P0Sealed), party 0 refuses an item that comes without its sealed share,
// which a broker could strip so that party 0 expanded the genuine nonce into
// material party 1 does not have, under a serial both parties agree on; with
// compression it expands the nonce, as before.
func TestP0RefusesStrippedItem(t *testing.T) {
	prm := pendulumParams(t)
	w := &worker{id: 0, prm: prm, expander: mpc.NewExpander(prm, [32]byte{1})}
	r := tagged([32]byte{1}, rawItem{seq: 1 << 8, nonce: mpc.ItemSerial{Instance: 5, Counter: 1}.Nonce()})
	var m mpc.TickMaterial
	if err := w.material(r, &m); err != nil {
		t.Fatalf("compressed set-up: %v, want the nonce expanded", err)
	}
	untagged := r
	untagged.tagged = false
	if err := w.material(untagged, &m); !errors.Is(err, codec.ErrVersion) {
		t.Fatalf("compressed set-up, item without a tag: %v, want it refused as an earlier release's", err)
	}
	forged := r
	forged.nonce[11]++
	if err := w.material(forged, &m); !errors.Is(err, codec.ErrAuth) {
		t.Fatalf("compressed set-up, nonce changed: %v, want it refused as forged", err)
	}
	w.p0Sealed = true
	if err := w.material(r, &m); !errors.Is(err, codec.ErrMalformed) {
		t.Fatalf("set-up without compression, item without party0's share: %v, want it refused as malformed", err)
	}
}

// tagged gives a compressed item party0's tag of its nonce under seed, as
// the dealer does.
func tagged(seed [32]byte, r rawItem) rawItem {
	r.tag, r.tagged = mpc.ItemTag(seed, r.nonce), true
	return r
}

// TestForgedNonceRefusedByTag: party0 takes a compressed item's nonce only
// with the dealer's tag of it. The broker rewrites the nonce of party0's
// copy of items (it travels in the clear): to the live dealer's last
// counter, and to 300 new dealer instances, more than party0 remembers.
// Each is refused as forged (auth) before it is expanded or recorded, an
// item without a tag as an earlier release's (version), and the dealer's
// next genuine item is taken. Before the tag, the forged nonces were
// recorded as used, and every later genuine item of the dealer was refused
// as a replay.
func TestForgedNonceRefusedByTag(t *testing.T) {
	const loop, epoch = "tagged", 3
	prm := pendulumParams(t)
	sess := mpc.NewSession([32]byte{'f', 'o', 'r', 'g', 'e'})
	d, err := mpc.NewDealer(prm, sess, true)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New("party0")
	w := &worker{s: &Service{opt: Options{ID: 0, Metrics: m, ItemWait: time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}},
		id: 0, loop: loop, epoch: epoch, perMsg: 1, prm: prm, expander: mpc.NewExpander(prm, sess.P0Seed()), items: make(chan []rawItem, 400)}
	var seq uint64
	publish := func(nonce [16]byte, tag []byte) {
		seq++ // one item per stream message, as trimmed by the consumer
		w.items <- w.trimItems(itemMsgs(t, codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P0: tag, P1: []byte{1}}), seq)
	}
	next := func() mpc.Item {
		t.Helper()
		it, err := d.Next(mpc.NewPRG([32]byte{9}, [16]byte{byte(seq)}))
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	take := func(want mpc.Item) {
		t.Helper()
		_, serial, mat, err := w.takeItem(context.Background(), true)
		if err != nil {
			t.Fatalf("taking %x: %v", want.Nonce, err)
		}
		exp, _ := mpc.ExpandP0(prm, sess.P0Seed(), want.Nonce)
		if serial != codec.Serial(want.Nonce) || !mat.Triple.V.Equal(exp.Triple.V) {
			t.Fatalf("took %x, want the genuine item %x expanded", serial, want.Nonce)
		}
	}

	g1 := next()
	publish(g1.Nonce, g1.Tag[:])
	take(g1)

	g2 := next()
	sr, _ := mpc.SerialOf(g2.Nonce)
	high := mpc.ItemSerial{Instance: sr.Instance, Counter: math.MaxUint32}.Nonce()
	publish(high, g2.Tag[:]) // a genuine item's tag on a forged nonce
	for i := range 300 {
		forged := mpc.ItemSerial{Instance: sr.Instance + uint64(i+1)<<20, Counter: 1}.Nonce()
		tag := mpc.ItemTag([32]byte{byte(i)}, forged) // under a seed not party0's
		publish(forged, tag[:])
	}
	publish(high, nil) // no tag: a dealer of an earlier release
	publish(g2.Nonce, g2.Tag[:])
	take(g2)
	g3 := next()
	publish(g3.Nonce, g3.Tag[:])
	take(g3)

	if a, v := testutil.ToFloat64(m.Rejects.WithLabelValues("auth")), testutil.ToFloat64(m.Rejects.WithLabelValues("version")); a != 301 || v != 1 {
		t.Errorf("rejects: %.0f auth, %.0f version; want 301 forged, 1 without a tag", a, v)
	}
	if len(w.serials.last) != 1 || w.serials.floor != 0 || w.serials.last[0] != (serialMark{sr.Instance, sr.Counter + 1}) {
		t.Errorf("party0's item serials %+v (floor %d); want the dealer's alone, at g3's counter %d", w.serials.last, w.serials.floor, sr.Counter+1)
	}
}

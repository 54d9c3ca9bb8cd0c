package party

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// twoHopRig drives the two parties' workers of one loop by hand, over a real
// NATS server and real sealing: the test plays the sensor (it reads the
// parties' mask shares and sends masked measurements), the actuator (it
// opens the output shares) and the network (it delivers each party's
// messages to the other, or drops them). Every tick's u is checked against
// a reference pair of mpc parties run the three-hop way on the same items.
type twoHopRig struct {
	t        *testing.T
	prm      mpc.Params
	w        [2]*worker
	m        [2]*metrics.Set
	ref      [2]*mpc.Party
	mats     map[uint64][2]mpc.TickMaterial // by item id
	sensor   *codec.Sealer
	actuator *codec.Sealer
	peek     [2]*codec.Sealer // open what is sent to party i, to see its kind
	capture  chan *nats.Msg
	masks    map[int]codec.MaskYPayload
	maskTick map[int]uint64
	maskSent [2]int                   // mask shares each party has sent
	outs     map[uint64][2]mpc.Matrix // output shares by tick
	// truncs counts P0's Protocol 2 messages seen, each after P0's output
	// share of its tick (the output leaves first, network checks it).
	truncs int
	rng    io.Reader
	// drop, if set, says whether to drop a message of kind to party i.
	drop func(to int, kind codec.Kind) bool
	// measureTo, if set, says whether measure delivers to party i;
	// measureSubject, if set, the subject it delivers on (else the loop's
	// measure subject).
	measureTo      func(i int) bool
	measureSubject string
	// early, if set, stamps measure's measurements before the set-up's
	// epoch, as an earlier set-up's are.
	early bool
	// mulItems are the items of the Protocol 1 messages each party sent,
	// by tick.
	mulItems [2]map[uint64]uint64
	// lastPreT and lastMeasure are the last pre-opening and measurement
	// delivered to each party, to deliver again.
	lastPreT, lastMeasure [2]*nats.Msg
}

const rigLoop = "l"

func newTwoHopRig(t *testing.T, items int) *twoHopRig {
	t.Helper()
	prm := pendulumParams(t)
	f := prm.Field
	rc, cc := prm.PhiShape()
	rng := mpc.NewPRG([32]byte{42}, [16]byte{})
	phi, err := f.RandomMatrix(rng, rc, cc)
	if err != nil {
		t.Fatal(err)
	}
	// Small entries keep the fixed-point state in range for a few ticks.
	for i := range phi.Data {
		phi.Data[i] = mpc.Elem{uint64(i % 5)}
	}
	phi0, phi1, err := f.Share(rng, phi)
	if err != nil {
		t.Fatal(err)
	}
	x0, x1, err := f.Share(rng, mpc.NewMatrix(prm.N, 1))
	if err != nil {
		t.Fatal(err)
	}
	r := &twoHopRig{t: t, prm: prm, mats: map[uint64][2]mpc.TickMaterial{}, sensor: testSealer(t, codec.RoleSensor),
		actuator: testSealer(t, codec.RoleActuator), capture: make(chan *nats.Msg, 1024),
		masks: map[int]codec.MaskYPayload{}, maskTick: map[int]uint64{}, outs: map[uint64][2]mpc.Matrix{}, rng: rng}
	nc := natstest.Conn(t)
	if _, err := nc.ChanSubscribe(bus.Prefix+"."+rigLoop+".>", r.capture); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	dealer := testSealer(t, codec.RoleDealer)
	d, err := mpc.NewDealer(prm, mpc.NewSession([32]byte{7}), false)
	if err != nil {
		t.Fatal(err)
	}
	var raws [2][]rawItem
	for k := 0; k < items; k++ {
		it, err := d.Next(rng)
		if err != nil {
			t.Fatal(err)
		}
		id := itemID(uint64(k+1), 0)
		r.mats[id] = [2]mpc.TickMaterial{*it.P0, it.P1}
		for i, m := range []mpc.TickMaterial{*it.P0, it.P1} {
			body, err := codec.Marshal(codec.PutMaterial(f, it.Nonce, m))
			if err != nil {
				t.Fatal(err)
			}
			// The tick of a material envelope is the set-up epoch.
			env, err := dealer.Seal(codec.Header{Kind: codec.KindMaterial, Loop: rigLoop, Tick: rigEpoch, From: codec.RoleDealer, To: codec.PartyRole(i)}, body)
			if err != nil {
				t.Fatal(err)
			}
			raws[i] = append(raws[i], rawItem{seq: id, env: env, nonce: it.Nonce})
		}
	}
	for i := 0; i < 2; i++ {
		r.m[i] = metrics.New(fmt.Sprintf("party%d", i))
		s, err := New(nc, testSealer(t, codec.PartyRole(i)), Options{ID: i, Loops: []string{rigLoop}, Metrics: r.m[i], TwoHop: true,
			PersistDelay: -1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		w := newWorker(s, rigLoop)
		share := [2]mpc.Matrix{phi0, phi1}[i]
		x := [2]mpc.Matrix{x0, x1}[i]
		if w.p, err = mpc.NewParty(prm, i, share, x); err != nil {
			t.Fatal(err)
		}
		if r.ref[i], err = mpc.NewParty(prm, i, share, x); err != nil {
			t.Fatal(err)
		}
		w.prm, w.perMsg, w.yBuf = prm, 1, mpc.NewMatrix(prm.P, 1)
		w.items = make(chan []rawItem, items)
		for _, raw := range raws[i] {
			w.items <- []rawItem{raw}
		}
		w.epoch = rigEpoch
		w.ready.Store(true)
		r.w[i] = w
		r.peek[i] = testSealer(t, codec.PartyRole(i))
	}
	return r
}

// between runs the parties' work between ticks as the after queue does
// (deferred: afterTick, stage and pre-open the next item; then
// flushAfter) and then the network. A pre-opening and its mask share are
// gathered for the batch's end, not sent at once.
func (r *twoHopRig) between() {
	for i, w := range r.w {
		had := w.pre.ok
		if !w.deferred(context.Background()) {
			r.t.Fatalf("party %d: deferred work found the worker busy", i)
		}
		a := &w.s.aout
		// The mask share is gathered, or with persistence waits for the
		// state write (sendMask; the tests await it).
		if pre := w.pre.ok && !had; pre != (a.n == 1 && (len(a.maskEnds) == 1 || w.persist != nil)) {
			r.t.Fatalf("party %d: pre-opened %v, gathered %d pre-openings and %d mask shares", i, pre, a.n, len(a.maskEnds))
		}
		if err := w.s.flushAfter(); err != nil {
			r.t.Fatal(err)
		}
	}
	r.network()
}

// network delivers what the parties sent until nothing more comes: to the
// other party (unless dropped), mask shares to the sensor, outputs to the
// actuator.
func (r *twoHopRig) network() {
	t := r.t
	t.Helper()
	nc := r.w[0].s.nc
	for {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var m *nats.Msg
		select {
		case m = <-r.capture:
		case <-time.After(50 * time.Millisecond):
			return
		}
		switch {
		case m.Subject == bus.MaskYSubject(rigLoop):
			h, body, err := r.sensor.Open(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var mp codec.MaskYPayload
			if err := codec.Unmarshal(body, &mp); err != nil {
				t.Fatal(err)
			}
			id, _ := h.From.PartyID()
			r.masks[id], r.maskTick[id] = mp, h.Tick
			r.maskSent[id]++
		case m.Subject == bus.OutputSubject(rigLoop):
			h, body, err := r.actuator.Open(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			var op codec.OutputPayload
			if err := codec.Unmarshal(body, &op); err != nil {
				t.Fatal(err)
			}
			u, err := op.U.Decode(r.prm.Field, r.prm.M, 1)
			if err != nil {
				t.Fatal(err)
			}
			id, _ := h.From.PartyID()
			o := r.outs[h.Tick]
			o[id] = u
			r.outs[h.Tick] = o
		case strings.HasPrefix(m.Subject, bus.Prefix+"."+rigLoop+".x.p"):
			to := int(m.Subject[len(m.Subject)-1] - '0')
			h, _, err := r.peek[to].Open(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if h.Kind == codec.KindMul && h.Tick != 0 {
				_, body, _ := r.peek[to].Open(m.Data)
				var mp codec.MulPayload
				if err := codec.Unmarshal(body, &mp); err != nil {
					t.Fatal(err)
				}
				if r.mulItems[1-to] == nil {
					r.mulItems[1-to] = map[uint64]uint64{}
				}
				r.mulItems[1-to][h.Tick] = fromWire(mp.Item)
			}
			if h.Kind == codec.KindTrunc {
				if o := r.outs[h.Tick]; o[0].Data == nil {
					t.Fatalf("tick %d: P0 sent its Protocol 2 message before its output share", h.Tick)
				}
				r.truncs++
			}
			if r.drop != nil && r.drop(to, h.Kind) {
				continue
			}
			if h.Kind == codec.KindPreT {
				r.lastPreT[to] = m
			}
			r.w[to].handle(context.Background(), m)
		}
	}
}

// measure sends tick t's measurement y: masked for item if masked, else as
// shares; then runs the network.
func (r *twoHopRig) measure(tick uint64, y mpc.Matrix, masked bool, item uint64) {
	r.t.Helper()
	for i, w := range r.w {
		if r.measureTo == nil || r.measureTo(i) {
			r.lastMeasure[i] = r.measureMsg(i, tick, y, masked, item)
			w.handle(context.Background(), r.lastMeasure[i])
		}
	}
	r.network()
}

// measureMsg is tick t's measurement y for party i as the sensor sends it:
// masked for item if masked (with the parties' mask shares last seen), else
// as shares (party0's y, party1's zero).
func (r *twoHopRig) measureMsg(i int, tick uint64, y mpc.Matrix, masked bool, item uint64) *nats.Msg {
	t := r.t
	t.Helper()
	f := r.prm.Field
	sent := int64(rigEpoch + tick) // as the sensor stamps: after the epoch
	if r.early {
		sent = rigEpoch - 1
	}
	var kind codec.Kind
	var payload any
	if masked {
		vy := mpc.NewMatrix(r.prm.P, 1)
		for j := 0; j < 2; j++ {
			v, err := r.masks[j].V.Decode(f, r.prm.P, 1)
			if err != nil {
				t.Fatal(err)
			}
			f.MatAdd(vy, vy, v)
		}
		ty := mpc.NewMatrix(r.prm.P, 1)
		f.MatSub(ty, y, vy)
		kind, payload = codec.KindMeasureMasked, codec.MeasureMaskedPayload{Item: item, T: codec.PutMatrix(f, ty), SentUnixNano: sent}
	} else {
		share := y.Clone()
		if i == 1 {
			share = mpc.NewMatrix(r.prm.P, 1) // y = y + 0
		}
		kind, payload = codec.KindMeasure, codec.MeasurePayload{Y: codec.PutMatrix(f, share), SentUnixNano: sent}
	}
	body, err := codec.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	env, err := r.sensor.Seal(codec.Header{Kind: kind, Loop: rigLoop, Tick: tick, From: codec.RoleSensor, To: codec.PartyRole(i)}, body)
	if err != nil {
		t.Fatal(err)
	}
	subject := bus.MeasureSubject(rigLoop, i)
	if r.measureSubject != "" {
		subject = r.measureSubject
	}
	return &nats.Msg{Subject: subject, Data: env}
}

// check requires tick's output shares to reconstruct the reference u for
// item (the reference parties then advance), or no output if item is 0.
func (r *twoHopRig) check(tick uint64, y mpc.Matrix, item uint64) {
	t := r.t
	t.Helper()
	f := r.prm.Field
	o, ok := r.outs[tick]
	if item == 0 {
		if ok {
			t.Fatalf("tick %d: an output share was sent", tick)
		}
		return
	}
	if !ok || o[0].Data == nil || o[1].Data == nil {
		t.Fatalf("tick %d: output shares %v", tick, o)
	}
	mats := r.mats[item]
	var msgs [2]mpc.MulMsg
	for i, p := range r.ref {
		share := y.Clone()
		if i == 1 {
			share = mpc.NewMatrix(r.prm.P, 1)
		}
		m, err := p.Begin(share, mats[i])
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = mpc.MulMsg{T: m.T.Clone(), S: m.S.Clone()}
	}
	u0, tr, err := r.ref[0].Multiply(msgs[1])
	if err != nil {
		t.Fatal(err)
	}
	u1, _, err := r.ref[1].Multiply(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if want, got := f.ReconstNew(u0, u1), f.ReconstNew(o[0], o[1]); !got.Equal(want) {
		t.Fatalf("tick %d: u = %v, want %v (item %d)", tick, got.Data, want.Data, item)
	}
	if err := r.ref[0].Finish(nil); err != nil {
		t.Fatal(err)
	}
	if err := r.ref[1].Finish(tr); err != nil {
		t.Fatal(err)
	}
	for i, w := range r.w {
		if !w.p.StateView().Equal(r.ref[i].StateView()) {
			t.Fatalf("tick %d: party%d's state share differs from the reference's", tick, i)
		}
	}
}

func (r *twoHopRig) paths(i int, path string) float64 {
	return testutil.ToFloat64(r.m[i].TickPaths.WithLabelValues(rigLoop, path))
}

func (r *twoHopRig) y() mpc.Matrix {
	y, err := r.prm.Field.EcdMatrix([][]float64{{0.25}, {-0.5}}, r.prm.K, r.prm.L)
	if err != nil {
		r.t.Fatal(err)
	}
	return y
}

// TestTwoHopTicks: ticks in two hops give the reference u and state; a
// dropped pre-opening makes its receiver fall back to three hops, and the
// other party, which finished the tick in two, answers its Protocol 1
// message, so that the tick completes at both (either party dropped); the
// next tick is short again.
func TestTwoHopTicks(t *testing.T) {
	for _, dropTo := range []int{0, 1} {
		t.Run(fmt.Sprintf("pre-opening to party%d dropped", dropTo), func(t *testing.T) {
			r := newTwoHopRig(t, 16)
			y := r.y()
			r.between()
			for tick := uint64(1); tick <= 6; tick++ {
				if r.maskTick[0] != tick-1 || r.maskTick[1] != tick-1 || r.masks[0].Item != r.masks[1].Item {
					t.Fatalf("tick %d: mask shares after ticks %v for items %d and %d", tick, r.maskTick, r.masks[0].Item, r.masks[1].Item)
				}
				item := fromWire(r.masks[0].Item)
				// The parties pre-open the next item as soon as a tick
				// ends (PersistDelay < 0): after tick 3, the pre-opening
				// to party dropTo is lost.
				r.drop = nil
				if tick == 3 {
					r.drop = func(to int, k codec.Kind) bool { return to == dropTo && k == codec.KindPreT }
				}
				r.measure(tick, y, true, r.masks[0].Item)
				r.drop = nil
				r.check(tick, y, item)
				for i, w := range r.w {
					if w.version != tick || w.st != idle {
						t.Fatalf("tick %d: party%d at version %d, stage %v", tick, i, w.version, w.st)
					}
				}
				r.between()
			}
			other := 1 - dropTo
			if fb := r.paths(dropTo, "fallback"); fb != 1 || r.paths(dropTo, "two_hop") != 5 {
				t.Errorf("party%d: %v fallback, %v two-hop ticks; want 1 and 5", dropTo, fb, r.paths(dropTo, "two_hop"))
			}
			if r.paths(other, "fallback") != 0 || r.paths(other, "two_hop") != 6 {
				t.Errorf("party%d: %v fallback, %v two-hop ticks; want 0 and 6", other, r.paths(other, "fallback"), r.paths(other, "two_hop"))
			}
			for i := range r.w {
				if n := metrics.Sum(r.m[i].Misses); n != 0 {
					t.Errorf("party%d: %v misses", i, n)
				}
			}
			if r.truncs != 6 {
				t.Errorf("saw %d of P0's Protocol 2 messages, want 6, each after its output share", r.truncs)
			}
		})
	}
}

// persistState gives both parties' workers their state buckets (memory
// storage) and claims their records, as Run does.
func (r *twoHopRig) persistState() {
	t := r.t
	t.Helper()
	for i, w := range r.w {
		key := [32]byte{byte(i + 1)}
		w.s.opt.StateKey, w.s.opt.StateStorage = &key, jetstream.MemoryStorage
		if err := w.openPersister(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := w.claim(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// awaitMasks runs the network until party i has sent n mask shares in all.
func (r *twoHopRig) awaitMasks(i, n int) {
	r.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); r.maskSent[i] < n; r.network() {
		if time.Now().After(deadline) {
			r.t.Fatalf("party%d sent %d mask shares, want %d", i, r.maskSent[i], n)
		}
	}
}

// stored is party i's stored record.
func (r *twoHopRig) stored(i int) stateRecord {
	w := r.w[i]
	e, err := w.persist.kv.Get(r.t.Context(), w.loop)
	if err != nil {
		r.t.Fatal(err)
	}
	rec, err := w.persist.open(e.Value())
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

// storedVersion is the state version in party i's stored record.
func (r *twoHopRig) storedVersion(i int) uint64 { return r.stored(i).Version }

// TestMaskShareWaitsForStateWrite: with persistence, a party's mask share
// for the next item, without which the other party cannot use its
// pre-opening, leaves only once the state write of the update the
// pre-opening was computed on is stored. A party whose write is refused
// (its bucket refuses records as too large) pre-opens but sends no mask
// share: the sensor sends the next tick as shares, and that tick, in three
// hops, writes the state first. The ticks give the reference u throughout.
// Until the fiftieth session the mask share left with the pre-opening: a
// party that then crashed with the write lost restored a state two updates
// behind the other party, which had used the pre-opening.
func TestMaskShareWaitsForStateWrite(t *testing.T) {
	r := newTwoHopRig(t, 16)
	r.persistState()
	y := r.y()
	// The claimed record holds the current state, but not the item
	// pre-opened on it: the mask share waits for the write that marks it.
	r.between()
	for tick := uint64(0); tick <= 3; tick++ {
		if tick > 0 {
			item := fromWire(r.masks[0].Item)
			r.measure(tick, y, true, r.masks[0].Item)
			r.check(tick, y, item)
		}
		for i := range r.w {
			r.awaitMasks(i, int(tick)+1)
			rec := r.stored(i)
			if rec.Version != tick {
				t.Fatalf("tick %d: party%d's mask share left with version %d stored", tick, i, rec.Version)
			}
			// The record marks the pre-opened item taken: a party that
			// restarts from it never takes that item again, so its mask,
			// revealed as T_x = x - R_x on this state, is never used on
			// another state (a restarted party restores the previous state
			// when the other party is an update behind).
			if pre, hwm := fromWire(r.masks[i].Item), restoredHWM(rec); hwm < pre || rec.HWM<<8|rec.HWMIdx != pre || r.w[i].pre.seq != pre {
				t.Fatalf("tick %d: party%d pre-opened item %#x (worker: %#x) with %#x stored as the last taken", tick, i, pre, r.w[i].pre.seq, hwm)
			}
		}
	}
	for i := range r.w {
		if two := r.paths(i, "two_hop"); two != 3 {
			t.Fatalf("party%d: %v two-hop ticks, want 3", i, two)
		}
	}

	js, err := jetstream.New(r.w[1].s.nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := func(maxValue int32) {
		if _, err := js.CreateOrUpdateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: StateBucket(1), History: 1,
			Storage: jetstream.MemoryStorage, MaxValueSize: maxValue}); err != nil {
			t.Fatal(err)
		}
	}
	bucket(16)
	item := fromWire(r.masks[0].Item)
	r.measure(4, y, true, r.masks[0].Item)
	r.check(4, y, item)
	r.awaitMasks(0, 5)
	w := r.w[1]
	waitUntil(t, "party1's refused write answered", w.persist.poll)
	r.network()
	if w.persist.res.err == nil || !w.pre.ok || r.maskSent[1] != 4 {
		t.Fatalf("party1, its write refused (%v): pre-opened %v, %d mask shares sent; want a pre-opening and 4", w.persist.res.err, w.pre.ok, r.maskSent[1])
	}
	bucket(0)
	r.measure(5, y, false, 0)
	r.check(5, y, itemID(5, 0))
	if v := r.storedVersion(1); v < 4 {
		t.Fatalf("party1's stored version %d after tick 5 started, want at least 4", v)
	}
	for i := range r.w {
		if n := metrics.Sum(r.m[i].Misses); n != 0 {
			t.Errorf("party%d: %v misses", i, n)
		}
	}
}

// TestTwoHopSensorItemMismatch: a masked measurement for an item the
// parties did not announce is never computed on (T_y is padded by another
// item's V_y): both parties abandon the tick as item_mismatch and skip past
// the sensor's item; the next tick, with shares, runs on a fresh item at
// both and gives the reference u. A classic measurement after a
// pre-opening uses the pre-opened item.
func TestTwoHopSensorItemMismatch(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	r.between()
	item := fromWire(r.masks[0].Item)
	// Tick 1 with shares: the pre-opened item, three hops.
	r.measure(1, y, false, 0)
	r.check(1, y, item)
	r.between()
	announced := fromWire(r.masks[0].Item)
	r.measure(2, y, true, wireItem(announced+1<<8))
	r.check(2, y, 0)
	for i, w := range r.w {
		if n := testutil.ToFloat64(r.m[i].Abandoned.WithLabelValues(rigLoop, missItem)); n != 1 {
			t.Fatalf("party%d: %v ticks abandoned as item_mismatch, want 1", i, n)
		}
		if w.minSeq <= announced+1<<8 || w.pre.ok {
			t.Fatalf("party%d: minSeq %d, pre-opening kept %v; want past item %d and none", i, w.minSeq, w.pre.ok, announced+1<<8)
		}
	}
	// After an abandoned tick there is no pre-opening: tick 3 with shares.
	r.network()
	r.measure(3, y, false, 0)
	i0 := r.w[0].item
	if r.w[1].item != i0 || i0 <= announced+1<<8 {
		t.Fatalf("tick 3: items %d and %d, want the same, past %d", i0, r.w[1].item, announced+1<<8)
	}
	r.check(3, y, i0)
}

// TestRefusedPreOpeningDiscarded: an item taken for the pre-opening that the
// party's computation refuses (here a fixed-mask party whose set-up is not
// done) is counted as a reject and as a discarded item, as a pre-opened
// item dropped is; before, it was counted consumed only.
func TestRefusedPreOpeningDiscarded(t *testing.T) {
	r := newTwoHopRig(t, 2)
	w, m := r.w[0], r.m[0]
	prm := r.prm
	prm.Variant = mpc.FixedMask
	rc, cc := prm.PhiShape()
	p, err := mpc.NewParty(prm, 0, mpc.NewMatrix(rc, cc), mpc.NewMatrix(prm.N, 1))
	if err != nil {
		t.Fatal(err)
	}
	w.p = p // PreBegin refuses every item: the set-up is not done
	w.preOpenNext(t.Context())
	if w.pre.ok {
		t.Fatal("pre-opened an item PreBegin refused")
	}
	if c, d := testutil.ToFloat64(m.ItemsConsumed.WithLabelValues(rigLoop)), testutil.ToFloat64(m.ItemsDiscarded.WithLabelValues(rigLoop)); c != 1 || d != 1 {
		t.Errorf("%v consumed, %v discarded; want the refused item counted in both", c, d)
	}
	if n := metrics.Sum(m.Rejects); n != 1 {
		t.Errorf("%v rejects, want 1", n)
	}
}

// TestRuledOutPreOpeningTakesNoOtherItem: a masked measurement for the
// pre-opened item, which a burn has since ruled out (set by hand here, as
// dropHeld leaves it), is abandoned as item_mismatch with that item
// discarded and no other taken: the next item from the queue is past the
// sensor's and cannot be the tick's. Before, one was taken (after a wait
// for it), counted consumed, and neither used nor discarded. Both skip past
// the sensor's item, as for a masked measurement of another item: a second
// burn left over would skip the item the other party takes next.
func TestRuledOutPreOpeningTakesNoOtherItem(t *testing.T) {
	r := newTwoHopRig(t, 4)
	r.between() // each party pre-opens item 1
	w, m := r.w[0], r.m[0]
	if !w.pre.ok || w.pre.seq != itemID(1, 0) {
		t.Fatalf("pre-opened %v item %d, want item %d", w.pre.ok, w.pre.seq, itemID(1, 0))
	}
	w.burn = 2
	r.measureTo = func(i int) bool { return i == 0 }
	r.measure(1, r.y(), true, r.masks[0].Item)
	if n := testutil.ToFloat64(m.Abandoned.WithLabelValues(rigLoop, missItem)); n != 1 {
		t.Errorf("%v ticks abandoned as item_mismatch, want 1", n)
	}
	if c, d := testutil.ToFloat64(m.ItemsConsumed.WithLabelValues(rigLoop)), testutil.ToFloat64(m.ItemsDiscarded.WithLabelValues(rigLoop)); c != 1 || d != 1 {
		t.Errorf("%v consumed, %v discarded; want the pre-opened item only, discarded", c, d)
	}
	if w.hwm != itemID(1, 0) || w.burn != 0 || w.pre.ok || w.minSeq != itemID(1, 0)+1 {
		t.Errorf("high-water mark %d, burn %d, pre-opened %v, next item at least %d; want item %d the last taken, no burn left, none pre-opened, past it", w.hwm, w.burn, w.pre.ok, w.minSeq, itemID(1, 0))
	}
}

// TestTwoHopBacksOff: a sensor that keeps sending shares after both parties
// announced their mask shares (its two-hop tick off) makes both parties stop
// pre-opening after twoHopBackoff such ticks, but for the same probe ticks;
// every tick still gives the reference u on the next item; a masked
// measurement after a probe brings the pre-opening back every tick.
func TestTwoHopBacksOff(t *testing.T) {
	const ticks = twoHopBackoff + 2*twoHopProbe
	r := newTwoHopRig(t, ticks+10)
	y := r.y()
	r.between()
	for tick := uint64(1); tick <= ticks; tick++ {
		before := r.maskSent
		r.measure(tick, y, false, 0)
		r.check(tick, y, itemID(tick, 0)) // pre-opened or taken at the tick: the next item either way
		r.between()
		want := 0
		if tick < twoHopBackoff || tick%twoHopProbe == 0 {
			want = 1
		}
		for i := range r.w {
			if got := r.maskSent[i] - before[i]; got != want {
				t.Fatalf("after tick %d: party%d sent %d mask shares, want %d", tick, i, got, want)
			}
		}
	}
	// Tick ticks was a probe: the sensor, now running two hops, masks the
	// next measurement, and the parties pre-open every tick again.
	if r.maskTick[0] != ticks || r.maskTick[1] != ticks || r.masks[0].Item != r.masks[1].Item {
		t.Fatalf("probe: mask shares after ticks %v for items %d and %d", r.maskTick, r.masks[0].Item, r.masks[1].Item)
	}
	for tick := uint64(ticks + 1); tick <= ticks+3; tick++ {
		if r.maskTick[0] != tick-1 || r.maskTick[1] != tick-1 {
			t.Fatalf("tick %d: mask shares after ticks %v, want %d", tick, r.maskTick, tick-1)
		}
		r.measure(tick, y, true, r.masks[0].Item)
		r.check(tick, y, itemID(tick, 0))
		r.between()
	}
	for i := range r.w {
		if two, n := r.paths(i, "two_hop"), metrics.Sum(r.m[i].Misses); two != 3 || n != 0 {
			t.Errorf("party%d: %v two-hop ticks, %v misses; want 3 and 0", i, two, n)
		}
	}
}

// TestMaskNeverPadsTwoMeasurements: a masked measurement that reaches one
// party only (dropped for overload, a sensor that died between its two
// publishes, a broker) must not leave the other party to run the next
// tick, sent as shares, on the same item: its Protocol 1 message would
// open the new measurement minus the V_y that padded the first, and the
// party holding that T_y would learn the difference of the two
// measurements. The party that missed the tick skips the pre-opened item.
// And a measurement of a tick already passed, sent as shares after masked
// ticks (the replay guard keeps a tick per kind), is refused as a replay.
func TestMaskNeverPadsTwoMeasurements(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	r.between()
	first := fromWire(r.masks[0].Item)
	r.measure(1, y, true, r.masks[0].Item)
	r.check(1, y, first)
	r.between()
	wire := r.masks[0].Item
	masked := fromWire(wire)
	if r.masks[1].Item != wire || r.w[1].pre.seq != masked {
		t.Fatalf("party1 pre-opened item %d, the sensor holds the masks of %d and %d", r.w[1].pre.seq, masked, fromWire(r.masks[1].Item))
	}
	r.measureTo = func(i int) bool { return i == 0 } // tick 2, masked, reaches party0 only
	r.measure(2, y, true, wire)
	r.measureTo = nil
	r.measure(3, y, false, 0) // the sensor holds no fresh mask shares: shares
	got, ok := r.mulItems[1][3]
	if !ok {
		t.Fatal("party1 sent no Protocol 1 message for tick 3")
	}
	if got == masked {
		t.Fatalf("party1 ran tick 3 on item %d, whose V_y padded tick 2's measurement", masked)
	}

	// Two masked ticks, then tick 1 again as shares: the guard has seen no
	// shares yet, so only the tick the loop is at refuses it.
	r = newTwoHopRig(t, 16)
	r.between()
	for tick := uint64(1); tick <= 2; tick++ {
		item := fromWire(r.masks[0].Item)
		r.measure(tick, y, true, r.masks[0].Item)
		r.check(tick, y, item)
		r.between()
	}
	r.measureTo = func(i int) bool { return i == 1 }
	r.measure(1, y, false, 0)
	r.measureTo = nil
	if n := testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("replay")); n != 1 {
		t.Errorf("a measurement of tick 1 after tick 2: %v replay rejects, want 1", n)
	}
	if _, ran := r.mulItems[1][1]; ran || r.w[1].cur != 2 {
		t.Errorf("party1 ran tick 1 again (a Protocol 1 message: %v; at tick %d)", ran, r.w[1].cur)
	}
}

// rigEpoch is the rig's set-up epoch (Unix ns, as the sensor's).
const rigEpoch = 1_700_000_000_000_000_000

// TestEarlierSetupMeasurementRefused: a measurement stamped before the
// set-up's epoch, as every measurement of an earlier set-up of the loop is,
// is refused as a replay, as shares and masked, starting no tick, and the
// genuine measurement of the same tick is then taken. A new set-up numbers
// its ticks from 1 again and a party's replay guard starts empty, so before,
// a broker that kept an earlier set-up's measurements could replay one
// ahead of the genuine one, and its share, of another sharing than the other
// party's, corrupted the controller state for good.
func TestEarlierSetupMeasurementRefused(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	refused := func(tick uint64, masked bool, item uint64) {
		t.Helper()
		before := [2]float64{testutil.ToFloat64(r.m[0].Rejects.WithLabelValues("replay")), testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("replay"))}
		r.early = true
		r.measure(tick, y, masked, item)
		r.early = false
		r.check(tick, y, 0) // no output
		for i := range r.w {
			if n := testutil.ToFloat64(r.m[i].Rejects.WithLabelValues("replay")) - before[i]; n != 1 {
				t.Fatalf("tick %d (masked %v): party%d counted %v replays of an earlier set-up's measurement, want 1", tick, masked, i, n)
			}
		}
	}
	refused(1, false, 0)
	r.measure(1, y, false, 0)
	r.check(1, y, itemID(1, 0))
	r.between()
	item := r.masks[0].Item
	refused(2, true, item)
	r.measure(2, y, true, item)
	r.check(2, y, fromWire(item))
	for i := range r.w {
		if n := metrics.Sum(r.m[i].Misses); n != 0 {
			t.Errorf("party%d: %v misses", i, n)
		}
	}
}

// TestTwoHopReplaysRefused: the other party's pre-opening, or the sensor's
// masked measurement, delivered again is refused as a replay and counted,
// and the loop runs on with the reference u and state.
func TestTwoHopReplaysRefused(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	r.between()
	for tick := uint64(1); tick <= 3; tick++ {
		item := fromWire(r.masks[0].Item)
		r.measure(tick, y, true, r.masks[0].Item)
		r.check(tick, y, item)
		oldPre, oldMeasure := r.lastPreT[1], r.lastMeasure[1]
		r.between()
		if tick < 2 {
			continue
		}
		before := testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("replay"))
		r.w[1].handle(context.Background(), oldPre)     // the pre-opening made before this tick
		r.w[1].handle(context.Background(), oldMeasure) // this tick's masked measurement
		r.network()
		if n := testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("replay")) - before; n != 2 {
			t.Fatalf("after tick %d, a pre-opening and a masked measurement delivered again: %v replay rejects, want 2", tick, n)
		}
	}
	for i := range r.w {
		if n := metrics.Sum(r.m[i].Misses); n != 0 {
			t.Errorf("party%d: %v misses", i, n)
		}
	}
}

// A measurement the sensor sealed that comes on another subject of the loop
// than its measure subject (duet.<loop>.*.p<i> reaches the party: a broker
// could route it so) is refused as a header error and starts no tick:
// before, it ran, and since only the measure subject's messages are kept off
// the shared dispatcher, its tick could block that dispatcher, every loop
// with it, for as long as the tick's waits.
func TestMeasurementOnAnotherSubjectRefused(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	r.measure(1, y, false, 0)
	if _, out := r.outs[1]; !out {
		t.Fatal("tick 1, measured on the measure subject, produced no output shares")
	}
	r.measureSubject = "duet." + rigLoop + ".x.p0"
	r.measure(2, y, false, 0)
	r.measureSubject = ""
	for i := range 2 {
		if n := testutil.ToFloat64(r.m[i].Rejects.WithLabelValues("header")); n != 1 {
			t.Errorf("party%d: %v header rejects for a measurement on another subject, want 1", i, n)
		}
		if r.w[i].cur != 1 {
			t.Errorf("party%d at tick %d after a measurement of tick 2 on another subject, want 1", i, r.w[i].cur)
		}
	}
	if _, out := r.outs[2]; out {
		t.Error("tick 2, measured on another subject, produced output shares")
	}
}

// A message of the other party of a tick far beyond the latest measurement
// (a faulty party's tick number) is refused as malformed: before, it took
// the replay guard's tick for its kind, and the other party's Protocol 1
// messages of every later tick were refused as replays, so that no tick
// completed at this party again.
func TestPeerTickFarAheadRefused(t *testing.T) {
	r := newTwoHopRig(t, 16)
	y := r.y()
	r.measure(1, y, false, 0)
	if o := r.outs[1]; o[0].Data == nil || o[1].Data == nil {
		t.Fatal("tick 1 produced no output shares")
	}
	// A well-formed message, which only its tick sets apart.
	mp := codec.MulPayload{Item: 1, T: codec.PutMatrix(r.prm.Field, mpc.NewMatrix(r.prm.N+r.prm.P, 1))}
	if r.prm.Variant == mpc.PerTick {
		rows, cols := r.prm.PhiShape()
		mp.S = codec.PutMatrix(r.prm.Field, mpc.NewMatrix(rows, cols))
	}
	body, err := codec.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	env, err := testSealer(t, codec.RoleParty0).Seal(codec.Header{Kind: codec.KindMul, Loop: rigLoop, Tick: 1 << 40, From: codec.RoleParty0, To: codec.RoleParty1}, body)
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("malformed"))
	r.w[1].handle(context.Background(), &nats.Msg{Subject: bus.ExchangeSubject(rigLoop, 1), Data: env})
	if n := testutil.ToFloat64(r.m[1].Rejects.WithLabelValues("malformed")) - before; n != 1 {
		t.Fatalf("party0's Mul of tick 2^40: %v malformed rejects at party1, want 1", n)
	}
	for tick := uint64(2); tick <= 3; tick++ {
		r.measure(tick, y, false, 0)
		if o := r.outs[tick]; o[0].Data == nil || o[1].Data == nil {
			t.Fatalf("tick %d after the refusal: output shares %v, want both", tick, o)
		}
	}
	// After 2 s with no measurement (the plant down, a partition), a tick
	// up to 2,000 further is within reach, as the sensor could have counted
	// that many meanwhile at its shortest period, 1 ms; 2^40 is not.
	w := r.w[1]
	w.measuredAt = w.measuredAt.Add(-2 * time.Second)
	if err := w.peerTickInRange(codec.Header{Kind: codec.KindMul, From: codec.RoleParty0, Tick: w.measured + codec.ReachAhead + 1900}); err != nil {
		t.Errorf("a tick 1,900 beyond the bound after 2 s: %v", err)
	}
	if err := w.peerTickInRange(codec.Header{Kind: codec.KindMul, From: codec.RoleParty0, Tick: 1 << 40}); !errors.Is(err, codec.ErrMalformed) {
		t.Errorf("tick 2^40 after 2 s: %v, want refused as malformed", err)
	}
}

// TestStateGapLoggedWithRemedy: parties more than one state update apart
// (one lost its record, or restored an old one), which no rollback mends,
// log it at error level once a minute with the remedy, a new set-up,
// instead of a warning at every tick, and no tick completes.
func TestStateGapLoggedWithRemedy(t *testing.T) {
	r := newTwoHopRig(t, 16)
	var logs testlog.Buffer
	for _, w := range r.w {
		w.s.opt.Log = slog.New(slog.NewTextHandler(&logs, nil))
	}
	r.w[1].version = 10
	y := r.y()
	for tick := uint64(1); tick <= 3; tick++ {
		r.measure(tick, y, false, 0)
		r.check(tick, y, 0)
	}
	out := logs.String()
	if n := strings.Count(out, "more than one update apart"); n != 2 {
		t.Errorf("the gap logged %d times over 3 ticks, want once at each party:\n%s", n, out)
	}
	if !strings.Contains(out, "DUET_SETUP_GENERATION") || !strings.Contains(out, "stop the sensor, delete its resume record, nats kv del "+bus.SetupBucket+" "+rigLoop+".sensor") || !strings.Contains(out, "level=ERROR") {
		t.Errorf("the gap's log names no remedy or is not an error:\n%s", out)
	}
	if strings.Contains(out, "state version mismatch") {
		t.Errorf("a gap no rollback mends warned as a mismatch:\n%s", out)
	}
	if n := metrics.Sum(r.m[0].Misses); n != 3 {
		t.Errorf("party0: %v misses, want 3", n)
	}
}

// TestDispatcherDoesNotWaitForAnItem: a measurement the dispatcher handles
// inline because an item seemed at hand (canInline) that was then not
// usable (a junk message queued; the pre-opened item dropped for a gap in
// the ticks, nothing queued) is handed over to the worker's goroutine, which
// starts its tick as the measurement's own (not as a held one's), waiting
// for an item if need be. Before, the tick waited for one (ItemWait) on the
// shared dispatcher, every loop's messages with it, and missed (no_item).
func TestDispatcherDoesNotWaitForAnItem(t *testing.T) {
	// handedOver delivers party0's measurement of tick as the dispatcher
	// does and requires it handed over: no miss, releaseMsg queued.
	handedOver := func(t *testing.T, r *twoHopRig, tick uint64) {
		t.Helper()
		w := r.w[0]
		w.live.Store(true) // in the event loop: the dispatcher may handle inline
		if !w.canInline(w.subjMeasure) {
			t.Fatal("an item seems at hand: the measurement must be handled inline")
		}
		if w.deliverInline(t.Context(), r.measureMsg(0, tick, r.y(), false, 0)) {
			t.Fatal("the measurement was queued, not handled inline")
		}
		if n := metrics.Sum(r.m[0].Misses); n != 0 || !w.held || w.heldT != tick || w.queued.Load() != 1 || len(w.inbox) != 1 {
			t.Fatalf("on the dispatcher: %v misses, held %v (tick %d), %d queued; want the measurement handed over to the worker's goroutine",
				n, w.held, w.heldT, w.queued.Load())
		}
	}
	// goroutine runs the worker's goroutine on its queue.
	goroutine := func(w *worker) {
		for len(w.inbox) > 0 {
			w.mu.Lock()
			w.handle(context.Background(), <-w.inbox)
			w.queued.Add(-1)
			w.mu.Unlock()
		}
	}
	t.Run("a junk message queued", func(t *testing.T) {
		r := newTwoHopRig(t, 1)
		y, w := r.y(), r.w[0]
		item := <-w.items
		w.items <- []rawItem{{err: errors.New("a stream message without metadata")}}
		handedOver(t, r, 1)
		w.items <- item // the next pull
		goroutine(w)
		if w.cur != 1 || w.st != begun || w.curHeld {
			t.Fatalf("on the worker's goroutine: tick %d, stage %v, started as held %v; want tick 1 begun as a measurement's", w.cur, w.st, w.curHeld)
		}
		r.measureTo = func(i int) bool { return i == 1 }
		r.measure(1, y, false, 0)
		r.check(1, y, itemID(1, 0)) // party0's share of y kept through the hand-over
		for i := range r.w {
			if n := metrics.Sum(r.m[i].Misses); n != 0 || r.w[i].version != 1 {
				t.Errorf("party%d: %v misses, version %d; want tick 1 completed", i, n, r.w[i].version)
			}
		}
	})
	t.Run("the pre-opened item dropped for a gap", func(t *testing.T) {
		r := newTwoHopRig(t, 1)
		r.between() // each party pre-opens the one item
		w := r.w[0]
		if !w.pre.ok || len(w.items) != 0 || w.hasStaged {
			t.Fatalf("pre-opened %v, %d queued, staged %v; want the one item pre-opened", w.pre.ok, len(w.items), w.hasStaged)
		}
		handedOver(t, r, 2) // tick 1 never came: not with the pre-opened item (onMeasure)
		if w.pre.ok {
			t.Fatal("the pre-opened item was used after a gap in the ticks")
		}
		goroutine(w) // no item comes: its tick misses there
		if w.cur != 2 || testutil.ToFloat64(r.m[0].Abandoned.WithLabelValues(rigLoop, missNoItem)) != 1 {
			t.Fatalf("tick %d, %v no_item; want tick 2 started on the worker's goroutine and missed for want of an item",
				w.cur, testutil.ToFloat64(r.m[0].Abandoned.WithLabelValues(rigLoop, missNoItem)))
		}
	})
}

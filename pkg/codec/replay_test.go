package codec

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestReplayGuard(t *testing.T) {
	g := NewReplayGuard()
	h := Header{Kind: KindMeasure, Loop: "a", From: RoleSensor, To: RoleParty0}
	at := func(tick uint64) Header { h := h; h.Tick = tick; return h }
	steps := []struct {
		tick   uint64
		accept bool
	}{
		{0, true}, {0, false}, {1, true}, {1, false}, {0, false}, {5, true}, {3, false}, {6, true}, {MaxTick, true}, {MaxTick, false},
	}
	for i, s := range steps {
		if err := g.Check(at(s.tick)); (err == nil) != s.accept {
			t.Fatalf("step %d: Check(tick %d) = %v, want accept %v", i, s.tick, err, s.accept)
		}
		err := g.Accept(at(s.tick))
		if (err == nil) != s.accept {
			t.Fatalf("step %d: Accept(tick %d) = %v, want accept %v", i, s.tick, err, s.accept)
		}
		if err != nil && !errors.Is(err, ErrReplay) {
			t.Fatalf("step %d: err = %v, want ErrReplay", i, err)
		}
	}
}

// A tick above MaxTick is refused as malformed by every entry point, before
// anything is decoded or recorded, so that a receiver's t+1 cannot wrap.
func TestReplayGuardRefusesTicksAboveMaxTick(t *testing.T) {
	g := NewReplayGuard()
	h := Header{Kind: KindOutput, Loop: "a", From: RoleParty0, To: RoleActuator}
	for _, tick := range []uint64{MaxTick + 1, 1<<64 - 1} {
		h.Tick = tick
		decoded := false
		for name, err := range map[string]error{
			"Check":        g.Check(h),
			"Accept":       g.Accept(h),
			"Admit":        g.Admit(h, []byte{0xc0}, new(any), func() error { decoded = true; return nil }),
			"AdmitDecoded": g.AdmitDecoded(h, func() error { decoded = true; return nil }),
		} {
			if !errors.Is(err, ErrMalformed) || Reason(err) != "malformed" {
				t.Errorf("%s(tick %d) = %v; want ErrMalformed", name, tick, err)
			}
		}
		if decoded {
			t.Errorf("tick %d: the payload was validated", tick)
		}
	}
	// Nothing was recorded: the largest tick allowed is still fresh.
	h.Tick = MaxTick
	if err := g.Accept(h); err != nil {
		t.Fatalf("Accept(MaxTick) after the refusals: %v", err)
	}
}

// Reach allows ReachAhead beyond the latest tick, and a tick a millisecond
// since it was learnt.
func TestReach(t *testing.T) {
	now := time.Now()
	if r := Reach(10, now); r < 10+ReachAhead || r > 10+ReachAhead+1000 {
		t.Errorf("Reach(10, now) = %d, want %d (and a few for the time this took)", r, 10+ReachAhead)
	}
	if r := Reach(10, now.Add(-2*time.Second)); r < 10+ReachAhead+2000 || r > 10+ReachAhead+3000 {
		t.Errorf("Reach(10, 2 s ago) = %d, want about %d", r, 10+ReachAhead+2000)
	}
}

func TestReplayGuardKeys(t *testing.T) {
	g := NewReplayGuard()
	base := Header{Kind: KindMul, Loop: "a", Tick: 10, From: RoleParty0, To: RoleParty1}
	if err := g.Accept(base); err != nil {
		t.Fatal(err)
	}
	// Check does not record.
	other := with(base, func(h *Header) { h.Loop = "b" })
	if g.Check(other) != nil || g.Check(other) != nil {
		t.Fatal("Check of a fresh key failed")
	}
	// Each of sender, kind and loop separates the counters; the recipient
	// does not (a receiver has one guard).
	for name, h := range map[string]Header{
		"other loop":   with(base, func(h *Header) { h.Loop = "b" }),
		"other kind":   with(base, func(h *Header) { h.Kind = KindTrunc }),
		"other sender": with(base, func(h *Header) { h.From = RoleParty1; h.To = RoleParty0 }),
	} {
		if err := g.Accept(h); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := g.Accept(with(base, func(h *Header) { h.To = RoleActuator })); !errors.Is(err, ErrReplay) {
		t.Errorf("same (from, kind, loop), other recipient: %v", err)
	}
	g.Reset("a")
	if err := g.Accept(with(base, func(h *Header) { h.Tick = 1 })); err != nil {
		t.Errorf("after Reset: %v", err)
	}
	if err := g.Accept(with(base, func(h *Header) { h.Loop = "b" })); !errors.Is(err, ErrReplay) {
		t.Errorf("Reset(a) reset loop b: %v", err)
	}
	if err := g.Accept(with(base, func(h *Header) { h.Kind = 0 })); !errors.Is(err, ErrKind) {
		t.Errorf("kind 0: %v", err)
	}
	if err := g.Check(with(base, func(h *Header) { h.From = 200 })); !errors.Is(err, ErrRole) {
		t.Errorf("role 200: %v", err)
	}
}

// TestReplayGuardConcurrent accepts each tick from many goroutines at once:
// exactly one acceptance per tick may win (run with -race).
func TestReplayGuardConcurrent(t *testing.T) {
	g := NewReplayGuard()
	const ticks, workers = 200, 8
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tick := uint64(1); tick <= ticks; tick++ {
				h := Header{Kind: KindOutput, Loop: "c", Tick: tick, From: RoleParty1, To: RoleActuator}
				if g.Accept(h) == nil {
					accepted.Add(1)
				}
				if tick%50 == 0 {
					g.Reset("unrelated")
				}
			}
		}()
	}
	wg.Wait()
	if n := accepted.Load(); n < 1 || n > ticks {
		t.Errorf("%d acceptances of %d ticks", n, ticks)
	}
	if err := g.Accept(Header{Kind: KindOutput, Loop: "c", Tick: ticks, From: RoleParty1}); !errors.Is(err, ErrReplay) {
		t.Errorf("last tick accepted twice: %v", err)
	}
}

// BenchmarkReplayGuardAdmit: a party worker's guard (one loop, its ID a
// fresh string per message, as parsed from each envelope) checking and then
// recording each message's tick, as AdmitView does.
func BenchmarkReplayGuardAdmit(b *testing.B) {
	g := NewReplayGuard()
	id := []byte("loop-0123456789ab")
	h := Header{Kind: KindMul, From: RoleParty0, To: RoleParty1}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Loop, h.Tick = string(id), uint64(i+1)
		if err := g.Check(h); err != nil {
			b.Fatal(err)
		}
		if err := g.Accept(h); err != nil {
			b.Fatal(err)
		}
	}
}

// Restore (a party restarted from its persisted state at tick 10) refuses
// every sender's and kind's messages up to tick 10 as replays, the messages
// from before the crash, whether or not the guard had seen that sender or
// kind; it accepts tick 11, and never moves a counter back.
func TestReplayGuardRestore(t *testing.T) {
	g := NewReplayGuard()
	seen := Header{Kind: KindMul, Loop: "a", Tick: 15, From: RoleParty0, To: RoleParty1}
	if err := g.Accept(seen); err != nil {
		t.Fatal(err)
	}
	g.Restore("a", 10)
	for _, from := range []Role{RoleSensor, RoleParty0, RoleDealer} {
		for _, k := range []Kind{KindMeasure, KindMul, KindTrunc, KindPreT} {
			h := Header{Kind: k, Loop: "a", From: from, To: RoleParty1}
			for _, tick := range []uint64{0, 9, 10} {
				h.Tick = tick
				if err := g.Check(h); !errors.Is(err, ErrReplay) {
					t.Errorf("%s %s tick %d after Restore(10): %v, want ErrReplay", from, k, tick, err)
				}
			}
			h.Tick = 11
			if err := g.Check(h); err != nil && !(from == RoleParty0 && k == KindMul) {
				t.Errorf("%s %s tick 11 after Restore(10): %v, want accepted", from, k, err)
			}
		}
	}
	// The counter seen at 15 stays at 15.
	seen.Tick = 12
	if err := g.Check(seen); !errors.Is(err, ErrReplay) {
		t.Errorf("party0's Mul at 12, after it at 15 and Restore(10): %v, want ErrReplay", err)
	}
	// Another loop is not touched.
	if err := g.Check(Header{Kind: KindMul, Loop: "b", Tick: 1, From: RoleParty0, To: RoleParty1}); err != nil {
		t.Errorf("loop b after Restore of loop a: %v", err)
	}
}

// SameEpoch: the set-up's epoch passes; none (a sender of an earlier
// release) is the wire version; another is an earlier set-up's, a replay.
func TestSameEpoch(t *testing.T) {
	for _, c := range []struct {
		got, want uint64
		err       error
	}{{7, 7, nil}, {0, 0, nil}, {0, 7, ErrVersion}, {6, 7, ErrReplay}, {8, 7, ErrReplay}} {
		if err := SameEpoch("x", c.got, c.want, "upgrade it"); !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("SameEpoch(%d, %d) = %v, want %v", c.got, c.want, err, c.err)
		}
	}
}

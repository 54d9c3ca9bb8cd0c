package codec

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestReplayGuard(t *testing.T) {
	g := NewReplayGuard()
	h := Header{Kind: KindMeasure, Loop: "a", From: RoleSensor, To: RoleParty0}
	at := func(tick uint64) Header { h := h; h.Tick = tick; return h }
	steps := []struct {
		tick   uint64
		accept bool
	}{
		{0, true}, {0, false}, {1, true}, {1, false}, {0, false}, {5, true}, {3, false}, {6, true}, {1<<64 - 1, true}, {1<<64 - 1, false},
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

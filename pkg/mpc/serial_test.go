package mpc

import (
	"math"
	"testing"
	"time"
)

func TestItemSerialNonce(t *testing.T) {
	s := ItemSerial{Instance: 0x0123456789abcdef, Counter: 42}
	n := s.Nonce()
	if got, ok := SerialOf(n); !ok || got != s {
		t.Fatalf("SerialOf(%x) = %v, %v; want %v", n, got, ok, s)
	}
	// The low 32 bits are the keystream's block counter: zero in a serial.
	for name, n := range map[string][16]byte{
		"low bits set": func() [16]byte { n := s.Nonce(); n[15] = 1; return n }(),
		"zero counter": ItemSerial{Instance: 1}.Nonce(),
		"zero":         {},
	} {
		if got, ok := SerialOf(n); ok {
			t.Errorf("%s: SerialOf(%x) = %v, accepted", name, n, got)
		}
	}
}

// A Dealer's items carry increasing serials of one instance; a second
// Dealer's are of another, later instance; and the counter's end starts a
// new instance rather than wrapping.
func TestDealerSerials(t *testing.T) {
	prm := pendulumParams(mustField(t, PresetM127), PerTick)
	d, err := NewDealer(prm, NewSession([32]byte{1}), true)
	if err != nil {
		t.Fatal(err)
	}
	rng := NewPRG([32]byte{2}, [16]byte{})
	var first ItemSerial
	for i := range 5 {
		it, err := d.Next(rng)
		if err != nil {
			t.Fatal(err)
		}
		s, ok := SerialOf(it.Nonce)
		if !ok {
			t.Fatalf("item %d: nonce %x is not a serial", i, it.Nonce)
		}
		if i == 0 {
			first = s
		}
		if s.Instance != first.Instance || s.Counter != uint32(i+1) {
			t.Fatalf("item %d: serial %v, want %016x/%d", i, s, first.Instance, i+1)
		}
	}
	// A Dealer that draws its first item in a later 65.5-µs window of the
	// clock has a larger instance (within one window the 16 random bits
	// decide, and are equal once in 65,536).
	time.Sleep(100 * time.Microsecond)
	d2, err := NewDealer(prm, NewSession([32]byte{1}), true)
	if err != nil {
		t.Fatal(err)
	}
	it, err := d2.Next(rng)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := SerialOf(it.Nonce); s.Instance <= first.Instance || s.Counter != 1 {
		t.Fatalf("a second dealer's first serial %v, want a larger instance than the first dealer's %016x, counter 1", s, first.Instance)
	}
	d.Resume(ItemSerial{Instance: first.Instance, Counter: math.MaxUint32})
	it, err = d.Next(rng)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := SerialOf(it.Nonce); s.Instance <= first.Instance || s.Counter != 1 {
		t.Fatalf("after the counter's end: serial %v, want a later instance than %016x, counter 1", s, first.Instance)
	}
}

// Seed-compressed items with consecutive serials expand to unrelated
// material: their keystreams do not overlap (the counter block of one item
// never reaches the next item's start).
func TestConsecutiveSerialsExpandApart(t *testing.T) {
	prm := pendulumParams(mustField(t, PresetM127), PerTick)
	seed := [32]byte{3}
	a, err := ExpandP0(prm, seed, ItemSerial{Instance: 9, Counter: 1}.Nonce())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ExpandP0(prm, seed, ItemSerial{Instance: 9, Counter: 2}.Nonce())
	if err != nil {
		t.Fatal(err)
	}
	// No element of the second item's V share equals any of the first's
	// (2^-120 per pair by chance), as a shifted keystream would make them.
	seen := map[Elem]bool{}
	for _, e := range a.Triple.V.Data {
		seen[e] = true
	}
	for _, e := range b.Triple.V.Data {
		if seen[e] {
			t.Fatalf("consecutive serials share keystream: element %v in both items' V shares", e)
		}
	}
}

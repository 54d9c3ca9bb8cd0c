package mpc

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/iotest"
)

func materialEqual(a, b TickMaterial) bool {
	return a.Triple.U.Equal(b.Triple.U) && a.Triple.V.Equal(b.Triple.V) && a.Triple.W.Equal(b.Triple.W) &&
		a.Mask.M.Equal(b.Mask.M) && a.Mask.L.Equal(b.Mask.L)
}

// checkMaterial reconstructs an item's material and checks it is a valid
// triple (W = U V, with the session's U in the fixed variant) and a valid
// truncation mask (L = R' in Z<l>, M - R' = 2^l R with R in Z<κ-l+λ>).
func checkMaterial(t *testing.T, prm Params, fixedU Matrix, m0, m1 TickMaterial) {
	t.Helper()
	f := prm.Field
	u := fixedU
	if prm.Variant == PerTick {
		u = f.ReconstNew(m0.Triple.U, m1.Triple.U)
	} else if m0.Triple.U.Data != nil || m1.Triple.U.Data != nil {
		t.Fatalf("fixed-mask material carries U")
	}
	v, w := f.ReconstNew(m0.Triple.V, m1.Triple.V), f.ReconstNew(m0.Triple.W, m1.Triple.W)
	if !w.Equal(bigMatMul(f, u, v)) {
		t.Fatalf("material: W != U V")
	}
	mask, rp := f.ReconstNew(m0.Mask.M, m1.Mask.M), f.ReconstNew(m0.Mask.L, m1.Mask.L)
	inv := f.InvPow2(prm.L)
	for i := range mask.Data {
		R := f.Mul(f.Sub(mask.Data[i], rp.Data[i]), inv)
		if !f.InSigned(rp.Data[i], prm.L) || !f.InSigned(R, prm.Kappa()-prm.L+prm.Lambda) {
			t.Fatalf("material: mask entry %d malformed: R' = %s, R = %s", i, f.String(rp.Data[i]), f.String(R))
		}
	}
}

func dealerParams(t *testing.T) []Params {
	var out []Params
	for _, name := range []string{PresetM127, PresetP25519} {
		f := mustField(t, name)
		for _, v := range []Variant{PerTick, FixedMask} {
			out = append(out, pendulumParams(f, v))
			p := pendulumParams(f, v)
			p.N, p.M, p.P = 6, 2, 3 // a non-square Φ
			out = append(out, p)
		}
	}
	return out
}

func paramsName(p Params) string {
	return fmt.Sprintf("%s/%v/n=%d", p.Field.Name(), p.Variant, p.N)
}

// TestExpandP0 checks seed compression: ExpandP0 reproduces exactly the P0
// material that generation with the same PRG streams gives, a compressed
// dealer ships the same P1 material as uncompressed generation from the same
// streams, and the item carries no P0 part.
func TestExpandP0(t *testing.T) {
	for _, prm := range dealerParams(t) {
		t.Run(paramsName(prm), func(t *testing.T) {
			sess := NewSession([32]byte{'e', 'x', 'p'})
			fixedU, err := sess.FixedU(prm)
			if err != nil {
				t.Fatal(err)
			}
			if prm.Variant == PerTick {
				fixedU = Matrix{}
			}
			// Direct: generate with r0 = PRG(seed, nonce), then expand.
			seed, nonce := [32]byte{1, 2, 3}, [16]byte{4, 5, 6}
			m0, m1, err := genMaterial(prm, seeded(121), NewPRG(seed, nonce), fixedU)
			if err != nil {
				t.Fatal(err)
			}
			e, err := ExpandP0(prm, seed, nonce)
			if err != nil {
				t.Fatal(err)
			}
			if !materialEqual(e, m0) {
				t.Fatalf("ExpandP0 differs from the generated P0 material")
			}
			checkMaterial(t, prm, fixedU, m0, m1)
			if e2, _ := ExpandP0(prm, seed, [16]byte{4, 5, 7}); materialEqual(e2, e) {
				t.Fatalf("ExpandP0 ignores the nonce")
			}
			// One Expander over a sequence of nonces (its key schedule and
			// buffer reused) gives what ExpandP0 gives for each.
			// ExpandInto one recycled material gives the same, in the same
			// storage.
			ex := NewExpander(prm, seed)
			var into TickMaterial
			for i, n := range [][16]byte{nonce, {9}, nonce, {4, 5, 7}} {
				got, err := ex.Expand(n)
				want, _ := ExpandP0(prm, seed, n)
				if err != nil || !materialEqual(got, want) {
					t.Fatalf("Expander.Expand(%x) differs from ExpandP0 (%v)", n, err)
				}
				before := into
				if err := ex.ExpandInto(n, &into); err != nil || !materialEqual(into, want) {
					t.Fatalf("Expander.ExpandInto(%x) differs from ExpandP0 (%v)", n, err)
				}
				if i > 0 && (&into.Triple.V.Data[0] != &before.Triple.V.Data[0] || &into.Mask.L.Data[0] != &before.Mask.L.Data[0]) {
					t.Fatalf("ExpandInto(%x) did not reuse the material's storage", n)
				}
			}
			// ... and allocates nothing for a small material (P0 expands an
			// item per tick), at most the library's CTR stream for a large one.
			most := 0.0
			if MaterialElems(prm)*prm.Field.ByteLen() >= ctrBulk {
				most = 2
			}
			if n := testing.AllocsPerRun(20, func() { _ = ex.ExpandInto([16]byte{3}, &into) }); n > most {
				t.Errorf("ExpandInto into recycled material of %d elements: %.0f allocations, want at most %.0f", MaterialElems(prm), n, most)
			}

			// Through the dealer: a compressed item equals generation from the
			// same streams, and Material(0) expands it.
			d, err := NewDealer(prm, sess, true)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				it, err := d.Next(seeded(122))
				if err != nil {
					t.Fatal(err)
				}
				if it.P0 != nil {
					t.Fatalf("compressed item carries P0 material")
				}
				r := seeded(122)
				n := it.Nonce // the dealer's serial (serial_test.go)
				w0, w1, err := genMaterial(prm, r, NewPRG(sess.P0Seed(), n), fixedU)
				if err != nil {
					t.Fatal(err)
				}
				if !materialEqual(it.P1, w1) {
					t.Fatalf("compressed item's P1 material differs from generation with the same streams")
				}
				got0, err := it.Material(prm, 0, sess.P0Seed())
				if err != nil {
					t.Fatal(err)
				}
				if !materialEqual(got0, w0) {
					t.Fatalf("Material(0) of a compressed item differs")
				}
				checkMaterial(t, prm, fixedU, got0, it.P1)
			}
		})
	}
}

// TestItemTag: a compressed item carries its nonce's tag under P0's seed,
// which the Expander of that seed accepts and no other; a changed nonce or
// tag fails, an uncompressed item carries none, and checking allocates
// nothing (P0 checks an item per tick).
func TestItemTag(t *testing.T) {
	prm := dealerParams(t)[0]
	sess := NewSession([32]byte{'t', 'a', 'g'})
	d, err := NewDealer(prm, sess, true)
	if err != nil {
		t.Fatal(err)
	}
	ex := NewExpander(prm, sess.P0Seed())
	other := NewExpander(prm, NewSession([32]byte{'o'}).P0Seed())
	seen := map[[ItemTagLen]byte]bool{}
	for range 50 {
		it, err := d.Next(seeded(7))
		if err != nil {
			t.Fatal(err)
		}
		if it.Tag != ItemTag(sess.P0Seed(), it.Nonce) {
			t.Fatalf("item %x: tag %x, want ItemTag's %x", it.Nonce, it.Tag, ItemTag(sess.P0Seed(), it.Nonce))
		}
		if seen[it.Tag] || it.Tag == ([ItemTagLen]byte{}) {
			t.Fatalf("item %x: tag %x zero or repeated", it.Nonce, it.Tag)
		}
		seen[it.Tag] = true
		if !ex.CheckTag(it.Nonce, it.Tag) {
			t.Fatalf("item %x: its own tag refused", it.Nonce)
		}
		if other.CheckTag(it.Nonce, it.Tag) {
			t.Fatalf("item %x: tag accepted under another seed", it.Nonce)
		}
		forged := it.Nonce
		forged[11]++ // the next counter of the same dealer
		if ex.CheckTag(forged, it.Tag) {
			t.Fatalf("nonce %x accepted with the tag of %x", forged, it.Nonce)
		}
		bad := it.Tag
		bad[15] ^= 1
		if ex.CheckTag(it.Nonce, bad) {
			t.Fatalf("item %x: a tag with one bit changed accepted", it.Nonce)
		}
	}
	plain, err := NewDealer(prm, sess, false)
	if err != nil {
		t.Fatal(err)
	}
	if it, err := plain.Next(seeded(8)); err != nil || it.Tag != ([ItemTagLen]byte{}) {
		t.Fatalf("uncompressed item: tag %x (%v), want none", it.Tag, err)
	}
	if n := testing.AllocsPerRun(20, func() { _ = ex.CheckTag([16]byte{1}, [ItemTagLen]byte{2}) }); n != 0 {
		t.Errorf("CheckTag: %.0f allocations, want 0", n)
	}
}

// TestDealerNeverReuses: consecutive items have different nonces and
// different V (the fixed-mask variant is secure only if V never repeats).
func TestDealerNeverReuses(t *testing.T) {
	for _, prm := range dealerParams(t) {
		for _, compress := range []bool{false, true} {
			sess := NewSession([32]byte{'r', 'e'})
			d, err := NewDealer(prm, sess, compress)
			if err != nil {
				t.Fatal(err)
			}
			fixedU, _ := sess.FixedU(prm)
			if prm.Variant == PerTick {
				fixedU = Matrix{}
			}
			r := seeded(123)
			nonces := map[[16]byte]bool{}
			var vs []Matrix
			for range 50 {
				it, err := d.Next(r)
				if err != nil {
					t.Fatal(err)
				}
				if nonces[it.Nonce] {
					t.Fatalf("%s compress=%v: nonce repeated", paramsName(prm), compress)
				}
				nonces[it.Nonce] = true
				m0, err := it.Material(prm, 0, sess.P0Seed())
				if err != nil {
					t.Fatal(err)
				}
				checkMaterial(t, prm, fixedU, m0, it.P1)
				v := prm.Field.ReconstNew(m0.Triple.V, it.P1.Triple.V)
				for _, old := range vs {
					if old.Equal(v) {
						t.Fatalf("%s compress=%v: V repeated", paramsName(prm), compress)
					}
				}
				vs = append(vs, v)
			}
		}
	}
}

func TestDealerBytesPerTick(t *testing.T) {
	m127, p255 := mustField(t, PresetM127), mustField(t, PresetP25519)
	for _, tc := range []struct {
		prm                    Params
		elems, compress, plain int
	}{
		// Per tick: U 4x5, V 5, W 4, M 3, L 3 = 35 elements per party.
		// Compressed: P1's shares, the nonce and its tag.
		{pendulumParams(m127, PerTick), 35, 35*16 + 32, 2*35*16 + 16},
		{pendulumParams(p255, PerTick), 35, 35*32 + 32, 2*35*32 + 16},
		// Fixed mask: no U, 15 elements.
		{pendulumParams(m127, FixedMask), 15, 15*16 + 32, 2*15*16 + 16},
		{pendulumParams(p255, FixedMask), 15, 15*32 + 32, 2*15*32 + 16},
	} {
		name := paramsName(tc.prm)
		if got := MaterialElems(tc.prm); got != tc.elems {
			t.Errorf("%s: MaterialElems = %d, want %d", name, got, tc.elems)
		}
		c, p := DealerBytesPerTick(tc.prm, true), DealerBytesPerTick(tc.prm, false)
		if c != tc.compress || p != tc.plain || c >= p {
			t.Errorf("%s: DealerBytesPerTick = %d compressed, %d plain; want %d, %d", name, c, p, tc.compress, tc.plain)
		}
	}
}

func TestSession(t *testing.T) {
	prm := pendulumParams(mustField(t, PresetM127), FixedMask)
	a, b := NewSession([32]byte{1}), NewSession([32]byte{2})
	if a.P0Seed() != NewSession([32]byte{1}).P0Seed() {
		t.Errorf("P0Seed is not deterministic")
	}
	if a.P0Seed() == b.P0Seed() || a.P0Seed() == a.derive("fixed-U") {
		t.Errorf("derived secrets collide")
	}
	u, err := a.FixedU(prm)
	if err != nil {
		t.Fatal(err)
	}
	u0, u1, err := a.FixedUShares(prm)
	if err != nil {
		t.Fatal(err)
	}
	if !prm.Field.ReconstNew(u0, u1).Equal(u) {
		t.Errorf("FixedUShares do not reconstruct FixedU")
	}
	if s0, _ := FixedUShare0(prm, a.P0Seed()); !s0.Equal(u0) {
		t.Errorf("FixedUShare0 differs from P0's share")
	}
	if ub, _ := b.FixedU(prm); ub.Equal(u) {
		t.Errorf("two sessions share U")
	}
	// Dealer replicas of one session agree on U, so their items mix.
	d1, _ := NewDealer(prm, a, true)
	d2, _ := NewDealer(prm, NewSession([32]byte{1}), false)
	if !d1.fixedU.Equal(d2.fixedU) || !d1.fixedU.Equal(u) {
		t.Errorf("dealers of one session disagree on U")
	}
}

func TestDealerErrors(t *testing.T) {
	f := mustField(t, PresetM127)
	if _, err := NewDealer(Params{Field: f}, NewSession([32]byte{}), true); !errors.Is(err, ErrParams) {
		t.Errorf("NewDealer with invalid params: %v", err)
	}
	d, err := NewDealer(pendulumParams(f, PerTick), NewSession([32]byte{}), false)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("no entropy")
	if _, err := d.Next(iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("Next with a failing reader: %v", err)
	}
	// Running dry after the nonce, and part way through the material.
	for _, n := range []int64{16, 100, 500} {
		if _, err := d.Next(io.LimitReader(seeded(124), n)); err == nil {
			t.Errorf("Next with %d bytes of randomness: no error", n)
		}
	}
}

// TestDealerConcurrentCompressed: a compressed dealer shared by goroutines
// (its items' streams are pooled and reset per item) gives each goroutine
// the items a dealer of its own gives for the same reader, each expanding
// to material that reconstructs; and a compressed item costs no more
// allocations than a plain one (no key schedule or stream made per item;
// a large one at most the library's stream that ctr hands its bulk to).
func TestDealerConcurrentCompressed(t *testing.T) {
	for _, prm := range dealerParams(t) {
		t.Run(paramsName(prm), func(t *testing.T) {
			sess := NewSession([32]byte{'c', 'c'})
			fixedU, _ := sess.FixedU(prm)
			if prm.Variant == PerTick {
				fixedU = Matrix{}
			}
			shared, err := NewDealer(prm, sess, true)
			if err != nil {
				t.Fatal(err)
			}
			const workers, each = 4, 20
			got := make([][]Item, workers)
			var wg sync.WaitGroup
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := seeded(byte(200 + g))
					for range each {
						it, err := shared.Next(r)
						if err != nil {
							t.Error(err)
							return
						}
						got[g] = append(got[g], it)
					}
				}()
			}
			wg.Wait()
			for g := range workers {
				own, _ := NewDealer(prm, sess, true)
				r := seeded(byte(200 + g))
				for i, it := range got[g] {
					// The shared dealer numbered the goroutines' items in
					// the order they came: this one's serial is taken over.
					s, _ := SerialOf(it.Nonce)
					own.Resume(ItemSerial{Instance: s.Instance, Counter: s.Counter - 1})
					want, err := own.Next(r)
					if err != nil {
						t.Fatal(err)
					}
					if it.Nonce != want.Nonce || !materialEqual(it.P1, want.P1) {
						t.Fatalf("goroutine %d item %d differs from a dealer of its own", g, i)
					}
					m0, err := it.Material(prm, 0, sess.P0Seed())
					if err != nil {
						t.Fatal(err)
					}
					checkMaterial(t, prm, fixedU, m0, it.P1)
				}
			}
			plain, _ := NewDealer(prm, sess, false)
			r := seeded(9)
			c := testing.AllocsPerRun(20, func() { _, _ = shared.Next(r) })
			p := testing.AllocsPerRun(20, func() { _, _ = plain.Next(r) })
			most := p
			if MaterialElems(prm)*prm.Field.ByteLen() >= ctrBulk {
				most += 2 // the library's stream for the bulk of P0's share
			}
			if c > most {
				t.Errorf("a compressed item: %.0f allocations, a plain one %.0f", c, p)
			}
		})
	}
}

package dealer

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// testSealers returns the dealer's and both parties' sealers.
func testSealers(t testing.TB) (dealer, p0, p1 *codec.Sealer) {
	t.Helper()
	s := testkeys.Sealers(t)
	return s[codec.RoleDealer], s[codec.RoleParty0], s[codec.RoleParty1]
}

func pendulumParams(t testing.TB, v mpc.Variant) mpc.Params {
	t.Helper()
	cs, _, _, err := sim.LoadSpecs("../../examples/qube-servo2/controller.json", "../../examples/qube-servo2/plant.json")
	if err != nil {
		t.Fatal(err)
	}
	rz, err := cs.Resolve(v)
	if err != nil {
		t.Fatal(err)
	}
	return rz.Params
}

func newTestQueue(t testing.TB, prm mpc.Params, sess *mpc.Session, compress bool, perMsg int) *queue {
	t.Helper()
	gen, err := mpc.NewDealer(prm, sess, compress)
	if err != nil {
		t.Fatal(err)
	}
	return &queue{loop: "pendulum", epoch: 3, prm: prm, gen: gen, rng: mpc.NewPRG([32]byte{'q'}, [16]byte{}),
		subj: "x", perMsg: perMsg, limit: 1 << 20}
}

func openMaterial(t *testing.T, s *codec.Sealer, prm mpc.Params, sealed []byte) mpc.TickMaterial {
	t.Helper()
	h, body, err := s.Open(sealed)
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != codec.KindMaterial || h.Loop != "pendulum" || h.Tick != 3 {
		t.Fatalf("sealed material's header %+v", h)
	}
	var mp codec.MaterialPayload
	if err := codec.Unmarshal(body, &mp); err != nil {
		t.Fatal(err)
	}
	m, err := mp.Material(prm)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameMaterial(a, b mpc.TickMaterial) bool {
	return a.Triple.U.Equal(b.Triple.U) && a.Triple.V.Equal(b.Triple.V) && a.Triple.W.Equal(b.Triple.W) &&
		a.Mask.M.Equal(b.Mask.M) && a.Mask.L.Equal(b.Mask.L)
}

// TestMessageItems: the items of consecutive stream messages, built in the
// queue's reused scratch buffers, are each exactly what the generator drew
// (a reference generator with the same session and randomness), each
// party's share opens only for that party, and no item's share is
// overwritten by a later one's.
func TestMessageItems(t *testing.T) {
	sd, s0, s1 := testSealers(t)
	d := &Dealer{sealer: sd}
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		for _, compress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compress=%v", v, compress), func(t *testing.T) {
				prm := pendulumParams(t, v)
				sess := mpc.NewSession([32]byte{'d', 't'})
				q := newTestQueue(t, prm, sess, compress, 8)
				ref := newTestQueue(t, prm, sess, compress, 8)
				var msgs [][]byte
				for range 3 {
					data, k, err := d.message(q)
					if err != nil {
						t.Fatal(err)
					}
					if k != 8 {
						t.Fatalf("%d items in a message, want 8", k)
					}
					msgs = append(msgs, data)
				}
				var first mpc.ItemSerial
				for i, data := range msgs { // after all three were built
					items, err := codec.PeekItems(data, 8)
					if err != nil {
						t.Fatal(err)
					}
					if len(items) != 8 {
						t.Fatalf("message %d holds %d items, want 8", i, len(items))
					}
					for j, im := range items {
						// One instance, counting up from the queue's first
						// item; the reference draws under the same serial.
						sr, ok := mpc.SerialOf(im.Nonce)
						if i == 0 && j == 0 {
							first = sr
						}
						if !ok || sr.Instance != first.Instance || sr.Counter != first.Counter+uint32(8*i+j) {
							t.Fatalf("message %d item %d: serial %v (a serial: %v), want %016x/%d", i, j, sr, ok, first.Instance, first.Counter+uint32(8*i+j))
						}
						ref.gen.Resume(mpc.ItemSerial{Instance: sr.Instance, Counter: sr.Counter - 1})
						want, err := ref.gen.Next(ref.rng)
						if err != nil {
							t.Fatal(err)
						}
						if im.Nonce != want.Nonce || im.Loop != "pendulum" || im.Epoch != 3 {
							t.Fatalf("message %d item %d: nonce, loop or epoch differ", i, j)
						}
						if !sameMaterial(openMaterial(t, s1, prm, im.P1), want.P1) {
							t.Fatalf("message %d item %d: P1's material differs from the generator's", i, j)
						}
						if _, _, err := s0.Open(im.P1); err == nil {
							t.Fatalf("message %d item %d: P0 opened P1's share", i, j)
						}
						if compress {
							// P0's part is the nonce's tag, nothing of its share.
							if tag := mpc.ItemTag(sess.P0Seed(), im.Nonce); !bytes.Equal(im.P0, tag[:]) {
								t.Fatalf("message %d item %d: a compressed item's party0 part is %x, want the nonce's tag %x", i, j, im.P0, tag)
							}
							continue
						}
						if !sameMaterial(openMaterial(t, s0, prm, im.P0), *want.P0) {
							t.Fatalf("message %d item %d: P0's material differs from the generator's", i, j)
						}
						if _, _, err := s1.Open(im.P0); err == nil {
							t.Fatalf("message %d item %d: P1 opened P0's share", i, j)
						}
					}
				}
			})
		}
	}
}

// TestMessageAllocs: once its scratch buffers have grown, a stream message
// costs the generator's own allocations plus its one buffer: encoding and
// sealing the items allocate nothing more.
func TestMessageAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector (sync.Pool drops puts)")
	}
	sd, _, _ := testSealers(t)
	d := &Dealer{sealer: sd}
	for _, compress := range []bool{false, true} {
		prm := pendulumParams(t, mpc.PerTick)
		sess := mpc.NewSession([32]byte{'a'})
		q := newTestQueue(t, prm, sess, compress, 8)
		gen := newTestQueue(t, prm, sess, compress, 8)
		perItem := testing.AllocsPerRun(50, func() {
			if _, err := gen.gen.Next(gen.rng); err != nil {
				t.Fatal(err)
			}
		})
		perMsg := testing.AllocsPerRun(20, func() {
			if _, _, err := d.message(q); err != nil {
				t.Fatal(err)
			}
		})
		if want := 8*perItem + 1; perMsg > want {
			t.Errorf("compress=%v: %.1f allocations per 8-item message, want at most %.1f (the generator's %.1f per item, and the message)",
				compress, perMsg, want, perItem)
		}
	}
}

// BenchmarkMessage: one 8-item stream message of the pendulum's per-tick
// items (generation, encoding and sealing to both parties), as a replica
// publishes it.
func BenchmarkMessage(b *testing.B) {
	sd, _, _ := testSealers(b)
	d := &Dealer{sealer: sd}
	for _, compress := range []bool{false, true} {
		b.Run(fmt.Sprintf("compress=%v", compress), func(b *testing.B) {
			prm := pendulumParams(b, mpc.PerTick)
			q := newTestQueue(b, prm, mpc.NewSession([32]byte{'b'}), compress, 8)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := d.message(q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

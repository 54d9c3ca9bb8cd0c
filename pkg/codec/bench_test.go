package codec

import (
	crand "crypto/rand"
	"io"
	"math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// The Seal/Open benchmarks use a ~200-byte payload (a MulPayload of the
// per-tick variant for n=1, m=1, p=1 over 2^127-1 is about that size) and
// crypto/rand nonces, as in production.

func benchSealers(b *testing.B) (*Sealer, *Sealer) {
	from, err := NewSealer(RoleParty0, testIdentity(b, RoleParty0), testPeers(b))
	if err != nil {
		b.Fatal(err)
	}
	to, err := NewSealer(RoleParty1, testIdentity(b, RoleParty1), testPeers(b))
	if err != nil {
		b.Fatal(err)
	}
	return from, to
}

var benchHeader = Header{Kind: KindMul, Loop: "bench-loop", Tick: 123456, From: RoleParty0, To: RoleParty1}

func BenchmarkSeal200(b *testing.B) {
	s, _ := benchSealers(b)
	payload := make([]byte, 200)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Seal(benchHeader, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen200(b *testing.B) {
	s, r := benchSealers(b)
	env, err := s.Seal(benchHeader, make([]byte, 200))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(200)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.Open(env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeal200V1 and BenchmarkOpen200V1 are wire version 1's cipher,
// NaCl box's XSalsa20-Poly1305 under the same precomputed key, on the same
// plaintext with a crypto/rand nonce: the baseline of SealAppend200 and
// OpenScratch200 (which also encode and parse the envelope) in the same run.
func BenchmarkSeal200V1(b *testing.B) {
	k, plain := benchV1(b)
	var nonce [nonceSize]byte
	var out []byte
	b.SetBytes(200)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := io.ReadFull(crand.Reader, nonce[:]); err != nil {
			b.Fatal(err)
		}
		out = box.SealAfterPrecomputation(out[:0], plain, &nonce, k)
	}
}

func BenchmarkOpen200V1(b *testing.B) {
	k, plain := benchV1(b)
	var nonce [nonceSize]byte
	sealed := box.SealAfterPrecomputation(nil, plain, &nonce, k)
	var out []byte
	b.SetBytes(200)
	b.ReportAllocs()
	for b.Loop() {
		var ok bool
		if out, ok = box.OpenAfterPrecomputation(out[:0], sealed, &nonce, k); !ok {
			b.Fatal("open failed")
		}
	}
}

// benchV1 is the two benchmarks' key (P0's and P1's) and a plaintext of the
// size Seal encrypts for a 200-byte payload.
func benchV1(b *testing.B) (*[32]byte, []byte) {
	pub, err := decodePublicKey(testIdentity(b, RoleParty1).PublicKey(), "P1")
	if err != nil {
		b.Fatal(err)
	}
	k := new([32]byte)
	box.Precompute(k, &pub, &testIdentity(b, RoleParty0).priv)
	h := benchHeader
	h.Version = Version
	plain := appendHeader([]byte{mpFixArray | sealedFields}, h)
	return k, append(appendBinHeader(plain, 200), make([]byte, 200)...)
}

// BenchmarkSealAppend200 and BenchmarkOpenScratch200 are the party's
// buffer-reusing forms of the two above.
func BenchmarkSealAppend200(b *testing.B) {
	s, _ := benchSealers(b)
	payload := make([]byte, 200)
	var buf []byte
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = s.SealAppend(buf[:0], benchHeader, payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenScratch200(b *testing.B) {
	s, r := benchSealers(b)
	env, err := s.Seal(benchHeader, make([]byte, 200))
	if err != nil {
		b.Fatal(err)
	}
	var scratch []byte
	b.SetBytes(200)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := r.OpenScratch(&scratch, env); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSealOpen200 is one hop: seal, open, replay check.
func BenchmarkSealOpen200(b *testing.B) {
	s, r := benchSealers(b)
	g := NewReplayGuard()
	payload := make([]byte, 200)
	h := benchHeader
	b.ReportAllocs()
	for b.Loop() {
		h.Tick++
		env, err := s.Seal(h, payload)
		if err != nil {
			b.Fatal(err)
		}
		got, _, err := r.Open(env)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Accept(got); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewSealer is the one-off cost (X25519 per peer) that Seal and
// Open avoid.
func BenchmarkNewSealer(b *testing.B) {
	id, peers := testIdentity(b, RoleParty0), testPeers(b)
	for b.Loop() {
		if _, err := NewSealer(RoleParty0, id, peers); err != nil {
			b.Fatal(err)
		}
	}
}

func benchMul(b *testing.B) ([]byte, mpc.Params) {
	p := mpc.Params{Field: testField(b, mpc.PresetM127), N: 1, M: 1, P: 1, K: 18, L: 9, Lambda: 40}
	r, c := p.PhiShape()
	rng := rand.NewChaCha8([32]byte{})
	data, err := Marshal(PutMul(p.Field, 1, mpc.MulMsg{S: randomMatrix(b, p.Field, rng, r, c), T: randomMatrix(b, p.Field, rng, c, 1)}))
	if err != nil {
		b.Fatal(err)
	}
	return data, p
}

func BenchmarkUnmarshalMul(b *testing.B) {
	data, p := benchMul(b)
	b.ReportMetric(float64(len(data)), "payload-bytes")
	b.ReportAllocs()
	for b.Loop() {
		var w MulPayload
		if err := Unmarshal(data, &w); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Msg(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalMul(b *testing.B) {
	data, p := benchMul(b)
	var w MulPayload
	if err := Unmarshal(data, &w); err != nil {
		b.Fatal(err)
	}
	_ = p
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(&w); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatrixDecodeInto(b *testing.B) {
	f := testField(b, mpc.PresetM127)
	w := PutMatrix(f, randomMatrix(b, f, rand.NewChaCha8([32]byte{}), 6, 6))
	dst := mpc.NewMatrix(6, 6)
	b.ReportAllocs()
	for b.Loop() {
		if err := w.DecodeInto(f, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPaths compares, in one run, the fast paths with what they
// replaced: Marshal then Unmarshal (into a fresh value, as the services do)
// through the hand-written codec ("fast") and through the reflection path
// ("reflect"), and Seal then Open of a 200-byte payload through Seal
// ("after") and the pre-rewrite sealReference ("before"). The payloads have
// the pendulum's size (n=3, m=1, p=2 over 2^127-1, 16 bytes an element): a
// MulPayload with S 4x5 and T 5x1, an ItemMsg carrying both parties'
// sealed MaterialPayloads, and a party's StateRecord.
func BenchmarkPaths(b *testing.B) {
	p := testParams(b, mpc.PresetM127, mpc.PerTick)
	rng := rand.NewChaCha8([32]byte{1})
	r, c := p.PhiShape()
	mul := PutMul(p.Field, 1<<20, mpc.MulMsg{S: randomMatrix(b, p.Field, rng, r, c), T: randomMatrix(b, p.Field, rng, c, 1)})
	mul.Version = 7

	d, err := mpc.NewDealer(p, mpc.NewSession([32]byte{7}), false)
	if err != nil {
		b.Fatal(err)
	}
	it, err := d.Next(rng)
	if err != nil {
		b.Fatal(err)
	}
	dealer := testSealer(b, RoleDealer)
	item := ItemMsg{Loop: "pendulum-01", Epoch: 3, Nonce: it.Nonce}
	for to, m := range map[Role]mpc.TickMaterial{RoleParty0: *it.P0, RoleParty1: it.P1} {
		body, err := Marshal(PutMaterial(p.Field, it.Nonce, m))
		if err != nil {
			b.Fatal(err)
		}
		env, err := dealer.Seal(Header{Kind: KindMaterial, Loop: item.Loop, Tick: 3, From: RoleDealer, To: to}, body)
		if err != nil {
			b.Fatal(err)
		}
		if to == RoleParty0 {
			item.P0 = env
		} else {
			item.P1 = env
		}
	}

	// A party's persisted state of the pendulum's loop (x and its previous
	// value, 3x1 each).
	state := StateRecord{Instance: 0x9e3779b97f4a7c15, Epoch: 2, Version: 1 << 20, Tick: 1<<20 + 3, HWM: 1 << 17, HWMIdx: 5,
		X: PutMatrix(p.Field, randomMatrix(b, p.Field, rng, p.N, 1)), Prev: PutMatrix(p.Field, randomMatrix(b, p.Field, rng, p.N, 1)), HasPrev: true}

	for _, v := range []struct {
		name string
		v    any
		dst  func() any
	}{
		{"MulPayload", mul, func() any { return new(MulPayload) }},
		{"ItemMsg", item, func() any { return new(ItemMsg) }},
		{"StateRecord", state, func() any { return new(StateRecord) }},
	} {
		for _, path := range []struct {
			name      string
			marshal   func(any) ([]byte, error)
			unmarshal func([]byte, any) error
		}{
			{"reflect", marshalReflect, unmarshalReflect},
			{"fast", Marshal, Unmarshal},
		} {
			b.Run(v.name+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				var data []byte
				for b.Loop() {
					var err error
					if data, err = path.marshal(v.v); err != nil {
						b.Fatal(err)
					}
					if err := path.unmarshal(data, v.dst()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(data)), "payload-bytes")
			})
		}
	}

	// The state record sealed as SealRecord does (v3: XChaCha20-Poly1305
	// under a key id, bound to the record's key) and as earlier releases
	// did (v2: XChaCha20-Poly1305 alone; v1: secretbox), written every tick.
	var rk [32]byte
	var recBuf []byte // SealAppend's, reused as a party reuses it
	recKey := NewRecordKey(&rk)
	for _, path := range []struct {
		name string
		seal func() ([]byte, error)
	}{
		{"v1", func() ([]byte, error) {
			body, err := Marshal(state)
			if err != nil {
				return nil, err
			}
			var nonce [24]byte
			if _, err := io.ReadFull(crand.Reader, nonce[:]); err != nil {
				return nil, err
			}
			return secretbox.Seal(nonce[:], body, &nonce, &rk), nil
		}},
		{"v2", func() ([]byte, error) {
			body, err := Marshal(state)
			if err != nil {
				return nil, err
			}
			nonce := make([]byte, 24, 24+len(body)+16)
			if _, err := io.ReadFull(crand.Reader, nonce); err != nil {
				return nil, err
			}
			aead, err := chacha20poly1305.NewX(rk[:])
			if err != nil {
				return nil, err
			}
			return aead.Seal(nonce, nonce, body, nil), nil
		}},
		{"v3", func() ([]byte, error) { return SealRecord(&rk, "loop-1", state) }},
		{"v3-append", func() ([]byte, error) { // as a party seals, its RecordKey kept
			var err error
			recBuf, err = recKey.SealAppend(recBuf[:0], "loop-1", state)
			return recBuf, err
		}},
	} {
		b.Run("SealRecord/"+path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := path.seal(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	s, o := benchSealers(b)
	payload := make([]byte, 200)
	for _, path := range []struct {
		name string
		seal func(*Sealer, Header, []byte) ([]byte, error)
	}{
		{"before", (*Sealer).sealReference},
		{"after", (*Sealer).Seal},
	} {
		b.Run("SealOpen200/"+path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				env, err := path.seal(s, benchHeader, payload)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := o.Open(env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

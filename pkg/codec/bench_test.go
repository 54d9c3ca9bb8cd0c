package codec

import (
	"math/rand/v2"
	"testing"

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

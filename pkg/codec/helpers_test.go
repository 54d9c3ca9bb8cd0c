package codec

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/nats-io/nkeys"
)

// testIdentity is a fixed identity per role, so tests and golden files
// replay bit for bit.
func testIdentity(t testing.TB, role Role) *Identity {
	t.Helper()
	raw := sha256.Sum256([]byte("duet codec test identity " + role.String()))
	seed, err := nkeys.EncodeSeed(nkeys.PrefixByteCurve, raw[:])
	if err != nil {
		t.Fatal(err)
	}
	id, err := ParseIdentity(seed)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// testPeers is every role's public key.
func testPeers(t testing.TB) map[Role]string {
	t.Helper()
	peers := make(map[Role]string)
	for _, r := range AllRoles {
		peers[r] = testIdentity(t, r).PublicKey()
	}
	return peers
}

// testSealer is role's sealer knowing every role, with a seeded nonce source.
func testSealer(t testing.TB, role Role) *Sealer {
	t.Helper()
	s, err := NewSealer(role, testIdentity(t, role), testPeers(t))
	if err != nil {
		t.Fatal(err)
	}
	s.rand = rand.NewChaCha8([32]byte{byte(role)})
	return s
}

// testRoute is one allowed (kind, from, to).
type testRoute struct {
	kind     Kind
	from, to Role
}

func allowedRoutes() []testRoute {
	var rs []testRoute
	for k := KindMeasure; k < kindEnd; k++ {
		for _, from := range AllRoles {
			for _, to := range AllRoles {
				if Allowed(k, from, to) {
					rs = append(rs, testRoute{k, from, to})
				}
			}
		}
	}
	return rs
}

func testField(t testing.TB, q string) *mpc.Field {
	t.Helper()
	f, err := mpc.ParseModulus(q)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// testModuli are the two presets and a small generic modulus (3 bytes).
var testModuli = []string{mpc.PresetM127, mpc.PresetP25519, "1000003"}

func randomMatrix(t testing.TB, f *mpc.Field, r *rand.ChaCha8, rows, cols int) mpc.Matrix {
	t.Helper()
	m, err := f.RandomMatrix(r, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testParams(t testing.TB, q string, v mpc.Variant) mpc.Params {
	t.Helper()
	p := mpc.Params{Field: testField(t, q), N: 3, M: 1, P: 2, K: 18, L: 9, Lambda: 40, Variant: v}
	if q == "1000003" {
		p.K, p.L, p.Lambda = 6, 2, 1 // κ = 19 - 1 - 1 = 17 > l
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

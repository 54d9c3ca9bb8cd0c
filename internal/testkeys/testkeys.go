// Package testkeys gives tests a sealer for every role, each with an
// identity of its own, all knowing each other's public keys.
package testkeys

import (
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
)

// Sealers generates an identity for every role (codec.AllRoles) and returns
// each role's sealer.
func Sealers(t testing.TB) map[codec.Role]*codec.Sealer {
	t.Helper()
	ids := map[codec.Role]*codec.Identity{}
	pubs := map[codec.Role]string{}
	for _, r := range codec.AllRoles {
		id, err := codec.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		ids[r], pubs[r] = id, id.PublicKey()
	}
	out := map[codec.Role]*codec.Sealer{}
	for _, r := range codec.AllRoles {
		s, err := codec.NewSealer(r, ids[r], pubs)
		if err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}

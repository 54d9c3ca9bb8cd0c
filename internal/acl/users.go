package acl

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/pkg/codec"
)

// File names in the keys directory.
const AuthConfigFile = "nats-auth.conf"

// UserSeedPath is a role's NATS user seed file (nkeys user seed, 0600): the
// value of that service's DUET_NATS_CREDS.
func UserSeedPath(dir string, r codec.Role) string { return filepath.Join(dir, r.String()+".nats.nk") }

// User is a role's NATS user key pair.
type User struct {
	Role codec.Role
	kp   nkeys.KeyPair
	Pub  string
}

// NewUsers creates one NATS user per role.
func NewUsers() (map[codec.Role]*User, error) {
	out := map[codec.Role]*User{}
	for _, r := range codec.AllRoles {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		out[r] = &User{Role: r, kp: kp, Pub: pub}
	}
	return out, nil
}

// Publics maps roles to their users' public keys.
func Publics(users map[codec.Role]*User) map[codec.Role]string {
	m := map[codec.Role]string{}
	for r, u := range users {
		m[r] = u.Pub
	}
	return m
}

// Options returns the client options authenticating as the user, with the
// role's inbox prefix.
func (u *User) Options() []nats.Option {
	return []nats.Option{
		nats.Nkey(u.Pub, func(nonce []byte) ([]byte, error) { return u.kp.Sign(nonce) }),
		nats.CustomInboxPrefix(Inbox(u.Role)),
	}
}

// GenerateUsers writes one NATS user seed per role into dir (<role>.nats.nk,
// 0600) and the server's authorization block (nats-auth.conf). Existing files
// are kept unless force.
func GenerateUsers(dir string, force bool) error {
	if !force {
		if err := NoUsers(dir); err != nil {
			return err
		}
	}
	users, err := NewUsers()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range codec.AllRoles {
		seed, err := users[r].kp.Seed()
		if err != nil {
			return err
		}
		if err := keys.ReplaceFile(UserSeedPath(dir, r), append(seed, '\n'), 0o600); err != nil {
			return err
		}
	}
	return keys.ReplaceFile(filepath.Join(dir, AuthConfigFile), []byte(Config(Publics(users))), 0o644)
}

// NoUsers returns an error naming the first role's NATS user seed that dir
// already holds (GenerateUsers refuses to overwrite it without force).
func NoUsers(dir string) error {
	for _, r := range codec.AllRoles {
		if _, err := os.Stat(UserSeedPath(dir, r)); err == nil {
			return fmt.Errorf("acl: %w: %s (use --force to rotate every key)", keys.ErrExist, UserSeedPath(dir, r))
		}
	}
	return nil
}

// PrevAuthConfigFile keeps the nats-auth.conf that RefreshAuthConfig
// replaced: for a rollback, or users an operator had added by hand.
const PrevAuthConfigFile = AuthConfigFile + ".prev"

// RefreshAuthConfig brings dir's nats-auth.conf up to this release's
// permissions for the NATS users whose seeds dir holds, keeping every key: an
// upgrade that narrows or adds a role's rights reaches a deployment whose keys
// were written by an earlier release. The file is replaced whole (written
// beside it, synced, then renamed), so a server reading it meanwhile, or after
// a crash, sees the old one or the new one; the old one is kept as
// nats-auth.conf.prev (prevKept; with no file before, nothing is kept and an
// earlier .prev is left as it is). changed reports whether the file was
// written; a role's missing or unreadable user seed is an error naming the
// file.
func RefreshAuthConfig(dir string) (changed, prevKept bool, err error) {
	pubs := map[codec.Role]string{}
	for _, r := range codec.AllRoles {
		u, err := LoadUser(UserSeedPath(dir, r), r)
		if err != nil {
			return false, false, err
		}
		pubs[r] = u.Pub
	}
	want := []byte(Config(pubs))
	path := filepath.Join(dir, AuthConfigFile)
	have, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(have, want):
		return false, false, nil
	case err == nil:
		if err := keys.ReplaceFile(filepath.Join(dir, PrevAuthConfigFile), have, 0o644); err != nil {
			return false, false, err
		}
		prevKept = true
	case !errors.Is(err, os.ErrNotExist):
		return false, false, fmt.Errorf("acl: %w", err)
	}
	if err := keys.ReplaceFile(path, want, 0o644); err != nil {
		return false, prevKept, err
	}
	return true, prevKept, nil
}

// LoadUser reads a role's NATS user seed file, under the rules for secret
// key files of keys.Load (its mode and size).
func LoadUser(path string, r codec.Role) (*User, error) {
	b, err := keys.ReadSecret(path)
	if err != nil {
		return nil, fmt.Errorf("acl: NATS user seed: %w", err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("acl: %s: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return nil, errors.New("acl: " + path + " is not a NATS user seed")
	}
	return &User{Role: r, kp: kp, Pub: pub}, nil
}

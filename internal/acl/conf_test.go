package acl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/pkg/codec"
)

// TestGeneratedConfigParses feeds the generated authorization block, included
// from a main configuration the way deploy/nats.conf does, to the real
// nats-server parser and checks every role's user and permissions arrive.
func TestGeneratedConfigParses(t *testing.T) {
	o, dir := parseWithUsers(t, []byte("listen: 127.0.0.1:4222\ninclude \"keys/"+acl.AuthConfigFile+"\"\n"))
	if len(o.Nkeys) != len(codec.AllRoles) {
		t.Fatalf("%d nkey users, want %d", len(o.Nkeys), len(codec.AllRoles))
	}
	for _, r := range codec.AllRoles {
		u, err := acl.LoadUser(acl.UserSeedPath(filepath.Join(dir, "keys"), r), r)
		if err != nil {
			t.Fatal(err)
		}
		var found *server.NkeyUser
		for _, nk := range o.Nkeys {
			if nk.Nkey == u.Pub {
				found = nk
			}
		}
		if found == nil || found.Permissions == nil || found.Permissions.Subscribe == nil {
			t.Fatalf("%s: user or permissions missing", r)
		}
		want := acl.Permissions(r)
		if len(found.Permissions.Subscribe.Allow) != len(want.Sub) {
			t.Errorf("%s: %d subscribe permissions parsed, want %d", r, len(found.Permissions.Subscribe.Allow), len(want.Sub))
		}
	}
}

// TestDeployConfigParses feeds the compose stack's deploy/nats.conf, with
// the authorization block it includes, to the real nats-server parser and
// checks the settings the services rely on arrive: JetStream, the generated
// users, and no subject-match cache.
func TestDeployConfigParses(t *testing.T) {
	conf, err := os.ReadFile("../../deploy/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := parseWithUsers(t, conf)
	if !o.JetStream {
		t.Error("JetStream is not enabled")
	}
	if !o.NoSublistCache {
		t.Error("the subject-match cache is enabled (no_sublist_cache)")
	}
	if len(o.Nkeys) != len(codec.AllRoles) {
		t.Errorf("%d nkey users, want %d", len(o.Nkeys), len(codec.AllRoles))
	}
}

// parseWithUsers writes main as nats.conf beside freshly generated users
// (keys/, which main includes) and parses it with the real nats-server
// parser; it returns the options and the directory.
func parseWithUsers(t *testing.T, main []byte) (*server.Options, string) {
	t.Helper()
	dir := t.TempDir()
	if err := acl.GenerateUsers(filepath.Join(dir, "keys"), false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), main, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	return o, dir
}

// A NATS user seed is a secret key: LoadUser refuses one that others may
// read, as keys.Load refuses such a seed, naming the file and the remedy.
func TestLoadUserChecksMode(t *testing.T) {
	dir := t.TempDir()
	if err := acl.GenerateUsers(dir, false); err != nil {
		t.Fatal(err)
	}
	path := acl.UserSeedPath(dir, codec.RoleParty0)
	if _, err := acl.LoadUser(path, codec.RoleParty0); err != nil {
		t.Fatalf("0600 seed: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := acl.LoadUser(path, codec.RoleParty0)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("0644 seed: err = %v, want a refusal naming %s and chmod 600", err, path)
	}
}

package keys

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestGenerateLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2*len(codec.AllRoles) {
		t.Errorf("%d files, want %d", len(entries), 2*len(codec.AllRoles))
	}
	ids := make(map[codec.Role]*codec.Identity)
	for _, r := range codec.AllRoles {
		if m := mode(t, SeedPath(dir, r)); m != 0o600 {
			t.Errorf("%s.seed mode %04o, want 0600", r, m)
		}
		if m := mode(t, PubPath(dir, r)); m != 0o644 {
			t.Errorf("%s.pub mode %04o, want 0644", r, m)
		}
		id, pubs, err := Load(dir, r)
		if err != nil {
			t.Fatalf("Load(%s): %v", r, err)
		}
		if len(pubs) != len(codec.AllRoles) || pubs[r] != id.PublicKey() {
			t.Fatalf("Load(%s): %d public keys, own %q, identity %q", r, len(pubs), pubs[r], id.PublicKey())
		}
		pubFile, _ := os.ReadFile(PubPath(dir, r))
		if string(pubFile) != id.PublicKey()+"\n" {
			t.Errorf("%s.pub = %q", r, pubFile)
		}
		ids[r] = id
	}
	seen := make(map[string]bool)
	for _, id := range ids {
		if seen[id.PublicKey()] {
			t.Error("two roles share a key")
		}
		seen[id.PublicKey()] = true
	}
	// The loaded keys work end to end.
	_, pubs, _ := Load(dir, codec.RoleSensor)
	sensor, err := codec.NewSealer(codec.RoleSensor, ids[codec.RoleSensor], pubs)
	if err != nil {
		t.Fatal(err)
	}
	party0, err := codec.NewSealer(codec.RoleParty0, ids[codec.RoleParty0], pubs)
	if err != nil {
		t.Fatal(err)
	}
	env, err := sensor.Seal(codec.Header{Kind: codec.KindMeasure, Loop: "k", Tick: 1, From: codec.RoleSensor, To: codec.RoleParty0}, []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if _, p, err := party0.Open(env); err != nil || string(p) != "y" {
		t.Fatalf("Open = %q, %v", p, err)
	}
}

func TestGenerateRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(SeedPath(dir, codec.RoleDealer))
	err := Generate(dir, false)
	if !errors.Is(err, ErrExist) || !strings.Contains(err.Error(), SeedPath(dir, codec.RoleDealer)) {
		t.Fatalf("second Generate: %v", err)
	}
	if after, _ := os.ReadFile(SeedPath(dir, codec.RoleDealer)); !bytes.Equal(after, before) {
		t.Fatal("refused Generate changed a seed")
	}
	// Loosen a mode: force must restore exact modes.
	os.Chmod(SeedPath(dir, codec.RoleDealer), 0o644)
	if err := Generate(dir, true); err != nil {
		t.Fatalf("forced Generate: %v", err)
	}
	if after, _ := os.ReadFile(SeedPath(dir, codec.RoleDealer)); bytes.Equal(after, before) {
		t.Error("forced Generate kept the old seed")
	}
	for _, r := range codec.AllRoles {
		if m := mode(t, SeedPath(dir, r)); m != 0o600 {
			t.Errorf("%s.seed mode %04o after force", r, m)
		}
		if m := mode(t, PubPath(dir, r)); m != 0o644 {
			t.Errorf("%s.pub mode %04o after force", r, m)
		}
		if _, _, err := Load(dir, r); err != nil {
			t.Errorf("Load(%s) after force: %v", r, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2*len(codec.AllRoles) {
		t.Errorf("%d files after force (temporary files left?)", len(entries))
	}
}

// TestGenerateRefusesAnyExisting: one existing file blocks every write.
func TestGenerateRefusesAnyExisting(t *testing.T) {
	dir := t.TempDir()
	stray := PubPath(dir, codec.RolePlant)
	if err := os.WriteFile(stray, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Generate(dir, false); !errors.Is(err, ErrExist) || !strings.Contains(err.Error(), stray) {
		t.Fatalf("Generate: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files written despite the refusal", len(entries)-1)
	}
}

func TestLoadRefusesLoosePermissions(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	path := SeedPath(dir, codec.RoleParty1)
	// Group read is refused while the group is not this process's (as root:
	// a group we are not in; otherwise the file is ours, not root's).
	if os.Geteuid() == 0 {
		if err := os.Chown(path, 0, 54321); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []os.FileMode{0o640, 0o440, 0o604, 0o660, 0o666, 0o601} {
		os.Chmod(path, m)
		_, _, err := Load(dir, codec.RoleParty1)
		if !errors.Is(err, ErrPermissions) || !strings.Contains(err.Error(), path) {
			t.Errorf("mode %04o: %v", m, err)
		}
	}
	os.Chmod(path, 0o400)
	if _, _, err := Load(dir, codec.RoleParty1); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}

// A Kubernetes Secret volume with an fsGroup: root owns the seed, its group
// is the pod's fsGroup (one of the service's groups), group read is added.
// Accepted as PostgreSQL accepts its key files; group write or any bit for
// others is still refused, and so is a group the process is not in.
func TestLoadAcceptsRootOwnedGroupReadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the seed file to root and a group")
	}
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	path := SeedPath(dir, codec.RoleParty0)
	if err := os.Chown(path, 0, os.Getegid()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []os.FileMode{0o440, 0o640} {
		os.Chmod(path, m)
		if _, _, err := Load(dir, codec.RoleParty0); err != nil {
			t.Errorf("root-owned, our group, mode %04o: %v", m, err)
		}
	}
	for _, m := range []os.FileMode{0o460, 0o450, 0o444, 0o441} {
		os.Chmod(path, m)
		if _, _, err := Load(dir, codec.RoleParty0); !errors.Is(err, ErrPermissions) {
			t.Errorf("root-owned, our group, mode %04o: %v, want ErrPermissions", m, err)
		}
	}
	// Owned by someone else than root: group read is refused.
	os.Chmod(path, 0o440)
	if err := os.Chown(path, 4321, os.Getegid()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(dir, codec.RoleParty0); !errors.Is(err, ErrPermissions) {
		t.Errorf("owned by uid 4321, mode 0440: %v, want ErrPermissions", err)
	}
}

// TestLoadReadsOnlyOwnSeed: other roles' secret files may be absent,
// corrupt or loose without affecting a role.
func TestLoadReadsOnlyOwnSeed(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	os.Remove(SeedPath(dir, codec.RoleSensor))
	os.WriteFile(SeedPath(dir, codec.RoleParty1), []byte("garbage"), 0o600)
	os.Chmod(SeedPath(dir, codec.RoleDealer), 0o666)
	if _, pubs, err := Load(dir, codec.RoleParty0); err != nil || len(pubs) != len(codec.AllRoles) {
		t.Fatalf("Load(party0) = %d keys, %v", len(pubs), err)
	}
}

func TestLoadErrorsNameFile(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := Generate(other, false); err != nil {
		t.Fatal(err)
	}
	seed := SeedPath(dir, codec.RoleActuator)
	pub := PubPath(dir, codec.RoleDealer)
	ownPub := PubPath(dir, codec.RoleActuator)
	for _, c := range []struct {
		name  string
		setup func()
		file  string
		want  error
	}{
		{"missing seed", func() { os.Remove(seed) }, seed, fs.ErrNotExist},
		{"corrupt seed", func() { os.WriteFile(seed, []byte("SXnot-a-seed\n"), 0o600) }, seed, codec.ErrKey},
		{"public key as seed", func() { b, _ := os.ReadFile(ownPub); os.WriteFile(seed, b, 0o600) }, seed, ErrFile},
		{"seed is a directory", func() { os.Remove(seed); os.Mkdir(seed, 0o700) }, seed, ErrFile},
		{"huge seed", func() { os.WriteFile(seed, bytes.Repeat([]byte{'S'}, 10000), 0o600) }, seed, ErrFile},
		{"corrupt other pub", func() { os.WriteFile(pub, []byte("Xbad\n"), 0o644) }, pub, codec.ErrKey},
		{"own pub mismatch", func() {
			b, _ := os.ReadFile(PubPath(other, codec.RoleActuator))
			os.WriteFile(ownPub, b, 0o644)
		}, ownPub, ErrFile},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Restore a good set each time.
			os.RemoveAll(seed)
			if err := Generate(dir, true); err != nil {
				t.Fatal(err)
			}
			c.setup()
			_, _, err := Load(dir, codec.RoleActuator)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.file) {
				t.Errorf("err = %v, want %v naming %s", err, c.want, c.file)
			}
		})
	}
	if _, _, err := Load(dir, 0); !errors.Is(err, codec.ErrRole) {
		t.Errorf("Load(role 0): %v", err)
	}
}

func TestLoadPublic(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	os.Remove(PubPath(dir, codec.RolePlant))
	b, _ := os.ReadFile(PubPath(dir, codec.RoleSensor))
	os.WriteFile(PubPath(dir, codec.RoleSensor), append([]byte("  "), append(bytes.TrimSpace(b), "\r\n\n"...)...), 0o644)
	pubs, err := LoadPublic(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != len(codec.AllRoles)-1 || pubs[codec.RoleSensor] != string(bytes.TrimSpace(b)) {
		t.Errorf("LoadPublic = %v", pubs)
	}
	if _, ok := pubs[codec.RolePlant]; ok {
		t.Error("plant key without a file")
	}
	// A role whose own .pub is missing still gets its key from Load.
	_, pubs, err = Load(dir, codec.RolePlant)
	if err != nil || pubs[codec.RolePlant] == "" {
		t.Errorf("Load(plant) without plant.pub: %v, %v", pubs, err)
	}
	if _, err := LoadPublic(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadPublic(missing dir): %v", err)
	}
}

// TestLoadSymlinkedSeed: secret volumes (Kubernetes) present keys as
// symlinks; the target's mode is what counts.
func TestLoadSymlinkedSeed(t *testing.T) {
	dir, store := t.TempDir(), t.TempDir()
	if err := Generate(store, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{SeedPath(store, codec.RoleDealer), PubPath(store, codec.RoleSensor)} {
		if err := os.Symlink(p, filepath.Join(dir, filepath.Base(p))); err != nil {
			t.Skip(err)
		}
	}
	if _, pubs, err := Load(dir, codec.RoleDealer); err != nil || len(pubs) != 2 {
		t.Fatalf("Load via symlinks: %v, %v", pubs, err)
	}
	os.Chmod(SeedPath(store, codec.RoleDealer), 0o644)
	if _, _, err := Load(dir, codec.RoleDealer); !errors.Is(err, ErrPermissions) {
		t.Errorf("loose symlink target: %v", err)
	}
}

// Write lays out identities held in memory as Generate does: each role's
// seed loads back as the same identity, and an existing file is not
// replaced.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	ids := map[codec.Role]*codec.Identity{}
	for _, r := range codec.AllRoles {
		id, err := codec.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		ids[r] = id
	}
	if err := Write(dir, ids); err != nil {
		t.Fatal(err)
	}
	for _, r := range codec.AllRoles {
		id, pubs, err := Load(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		if id.PublicKey() != ids[r].PublicKey() || pubs[r] != ids[r].PublicKey() {
			t.Errorf("%s: loaded %s, want %s", r, id.PublicKey(), ids[r].PublicKey())
		}
	}
	if err := Write(dir, ids); err == nil {
		t.Error("Write over existing files succeeded")
	}
	delete(ids, codec.RoleDealer)
	if err := Write(t.TempDir(), ids); err == nil || !strings.Contains(err.Error(), "dealer") {
		t.Errorf("Write without the dealer's identity: %v", err)
	}
}

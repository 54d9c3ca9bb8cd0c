// Package keys stores role identities on disk for `duet keys`: for each role
// a secret file <role>.seed (the nkeys curve seed, mode 0600) and a public
// file <role>.pub (the "X..." public key, mode 0644). A deployment gives each
// service its own .seed file and every .pub file.
package keys

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/duet-mpc/duet/pkg/codec"
)

const (
	seedMode = 0o600
	pubMode  = 0o644
	// maxFile bounds what is read from a key file (a seed is 58 bytes).
	maxFile = 4096
)

// SeedPath and PubPath are the file names of a role's keys in dir.
func SeedPath(dir string, r codec.Role) string { return filepath.Join(dir, r.String()+".seed") }

// PubPath is the public key file of role r in dir.
func PubPath(dir string, r codec.Role) string { return filepath.Join(dir, r.String()+".pub") }

// Generate writes a fresh identity for every role in codec.AllRoles:
// <dir>/<role>.seed (mode 0600) and <dir>/<role>.pub (mode 0644), creating
// dir if needed. Unless force is set it refuses, before writing anything, if
// any of those files exists; with force it replaces them (each file
// atomically).
func Generate(dir string, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if !force {
		var existing []string
		for _, r := range codec.AllRoles {
			for _, p := range []string{SeedPath(dir, r), PubPath(dir, r)} {
				if _, err := os.Lstat(p); err == nil {
					existing = append(existing, p)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("keys: %w", err)
				}
			}
		}
		if len(existing) > 0 {
			return fmt.Errorf("%w: %s (use force to replace)", ErrExist, strings.Join(existing, ", "))
		}
	}
	ids := map[codec.Role]*codec.Identity{}
	for _, r := range codec.AllRoles {
		id, err := codec.GenerateIdentity()
		if err != nil {
			return fmt.Errorf("keys: %s: %w", r, err)
		}
		ids[r] = id
	}
	return write(dir, ids, force)
}

// Write writes the given identities into dir, which must exist, as Generate
// writes fresh ones (refusing to replace a file): for a harness that holds
// its identities in memory and starts services that read a keys directory.
func Write(dir string, ids map[codec.Role]*codec.Identity) error { return write(dir, ids, false) }

// write writes every role's seed and public key files, each exactly with
// its mode; with replace, over existing files.
func write(dir string, ids map[codec.Role]*codec.Identity, replace bool) error {
	type file struct {
		path string
		data []byte
		mode os.FileMode
	}
	var files []file
	for _, r := range codec.AllRoles {
		id := ids[r]
		if id == nil {
			return fmt.Errorf("keys: no identity for %s", r)
		}
		seed, err := id.Seed()
		if err != nil {
			return fmt.Errorf("keys: %s: %w", r, err)
		}
		files = append(files,
			file{SeedPath(dir, r), append(seed, '\n'), seedMode},
			file{PubPath(dir, r), []byte(id.PublicKey() + "\n"), pubMode})
	}
	for _, f := range files {
		if err := writeFile(f.path, f.data, f.mode, replace); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes data to path with exactly mode (whatever the umask).
// Without replace it fails if path exists; with replace it writes a
// temporary file and renames it over path.
func writeFile(path string, data []byte, mode os.FileMode, replace bool) (err error) {
	var f *os.File
	if replace {
		f, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	} else {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExist, path)
		}
	}
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	name := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(name)
		}
	}()
	if err = f.Chmod(mode); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	if replace {
		if err = os.Rename(name, path); err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		if d, derr := os.Open(filepath.Dir(path)); derr == nil {
			_ = d.Sync() // the rename made durable where the file system allows
			d.Close()
		}
	}
	return nil
}

// ReplaceFile writes data to path with exactly mode, replacing any file
// there whole: written beside it, synced and renamed over it, so a reader
// meanwhile, or after a crash, finds the old content or the new.
func ReplaceFile(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, true)
}

// Load returns role self's identity, read from <dir>/<self>.seed (and no
// other secret file), and the public keys of every role with a .pub file in
// dir, plus self's own. The .seed file must not be accessible to others,
// nor to its group unless root owns it and the group is this process's
// (seedModeOK). Every error names the file.
func Load(dir string, self codec.Role) (*codec.Identity, map[codec.Role]string, error) {
	if !self.Valid() {
		return nil, nil, fmt.Errorf("keys: %w: %d", codec.ErrRole, uint8(self))
	}
	path := SeedPath(dir, self)
	seed, err := readSeed(path)
	if err != nil {
		return nil, nil, err
	}
	id, err := codec.ParseIdentity(seed)
	clear(seed)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrFile, path, err)
	}
	pubs, err := LoadPublic(dir)
	if err != nil {
		return nil, nil, err
	}
	if pub, ok := pubs[self]; ok && pub != id.PublicKey() {
		return nil, nil, fmt.Errorf("%w: %s holds %s, but %s's public key is %s",
			ErrFile, PubPath(dir, self), pub, path, id.PublicKey())
	}
	pubs[self] = id.PublicKey()
	return id, pubs, nil
}

// ReadSecret reads a secret key file other than a role's seed (a NATS user
// seed, acl.LoadUser) under the rules of Load: a regular file of at most a
// few kilobytes, with no permissions for others, nor for its group unless
// root owns it and the group is this process's.
func ReadSecret(path string) ([]byte, error) { return readSeed(path) }

// readSeed reads a secret key file after checking, on the open file, that it
// is a regular file without group or other permissions.
func readSeed(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrFile, path)
	}
	if perm := fi.Mode().Perm(); !seedModeOK(fi) && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("%w: %s has mode %04o, want 0600 (chmod 600 %s), or 0640/0440 if root owns it and its group is this process's",
			ErrPermissions, path, perm, path)
	}
	return readLimited(f, path)
}

// seedModeOK: a secret key file may be readable by its owner alone (0600,
// 0400) or, as PostgreSQL allows for its key files, also by this process's
// group if root owns it (0640, 0440). The second is what Kubernetes makes
// of a Secret volume in a pod with an fsGroup: files owned by root, group
// fsGroup, group read added, so that a service need not run as root to read
// its key. Never group write, never anything for others.
func seedModeOK(fi fs.FileInfo) bool {
	perm := fi.Mode().Perm()
	return SeedModeAllowed(perm, perm&0o077 != 0 && rootOwnedInOurGroup(fi))
}

// SeedModeAllowed is the rule of seedModeOK on a file's permission bits:
// rootOwnedOurGroup says that root owns the file and its group is one of the
// reading process's groups. (The manifests' test applies it to what the
// kubelet makes of a Secret volume.)
func SeedModeAllowed(perm fs.FileMode, rootOwnedOurGroup bool) bool {
	perm = perm.Perm()
	return perm&0o077 == 0 || (perm&0o037 == 0 && rootOwnedOurGroup)
}

// LoadPublic returns the public keys of every role with a <role>.pub file in
// dir (roles without one are left out). Every error names the file.
func LoadPublic(dir string) (map[codec.Role]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	pubs := make(map[codec.Role]string)
	for _, r := range codec.AllRoles {
		path := PubPath(dir, r)
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("keys: %w", err)
		}
		b, err := readLimited(f, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		pub := string(bytes.TrimSpace(b))
		if err := codec.ValidatePublicKey(pub); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrFile, path, err)
		}
		pubs[r] = pub
	}
	return pubs, nil
}

func readLimited(f *os.File, path string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrFile, path, maxFile)
	}
	return b, nil
}

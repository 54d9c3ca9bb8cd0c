// Package examples holds the example specs that ship with duet. The
// pendulum's are built into the duet command, so that `duet sim`, `duet
// demo` and `duet bench` run with their defaults from any directory, not
// only from the repository's root.
package examples

import (
	"embed"
	"errors"
	"io/fs"
	"path/filepath"
)

// The pendulum's specs (a Quanser QUBE-Servo 2 and its observer-based
// controller), as paths relative to the repository's root: the duet
// command's defaults.
const (
	QubeDir        = "examples/qube-servo2"
	QubeController = QubeDir + "/controller.json"
	QubePlant      = QubeDir + "/plant.json"
)

//go:embed qube-servo2/controller.json qube-servo2/plant.json
var files embed.FS

// Builtin returns the built-in copy of the file at path if path names one of
// the default paths (QubeController or QubePlant, compared after
// filepath.Clean); ok is false for any other path.
func Builtin(path string) (data []byte, ok bool) {
	p := filepath.ToSlash(filepath.Clean(path))
	if p != QubeController && p != QubePlant {
		return nil, false
	}
	data, err := files.ReadFile(p[len("examples/"):])
	return data, err == nil
}

// Fallback returns the built-in copy of path when reading path failed with
// err because no such file exists and path is a default path (Builtin): what
// a command run outside the repository reads instead. Any other error, or
// another path, gives ok false, and the caller reports err.
func Fallback(path string, err error) (data []byte, ok bool) {
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	return Builtin(path)
}

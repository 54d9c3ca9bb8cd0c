package examples

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestBuiltinMatchesFiles: the built-in copies are the repository's files,
// found under every spelling of a default path, and nothing else is.
func TestBuiltinMatchesFiles(t *testing.T) {
	for _, p := range []string{QubeController, QubePlant} {
		onDisk, err := os.ReadFile(strings.TrimPrefix(p, "examples/"))
		if err != nil {
			t.Fatal(err)
		}
		for _, spelling := range []string{p, "./" + p, "examples/../" + p} {
			got, ok := Builtin(spelling)
			if !ok || !bytes.Equal(got, onDisk) {
				t.Errorf("Builtin(%q): ok %v, %d bytes; want the %d bytes of %s", spelling, ok, len(got), len(onDisk), p)
			}
		}
	}
	for _, p := range []string{"controller.json", "examples/qube-servo2", "examples/qube-servo2/other.json", "/" + QubePlant, "x/" + QubePlant} {
		if _, ok := Builtin(p); ok {
			t.Errorf("Builtin(%q) found a built-in copy; want none", p)
		}
	}
}

// TestFallbackOnlyForMissingFiles: the built-in copy stands in for a default
// path only when the file does not exist, never for another error.
func TestFallbackOnlyForMissingFiles(t *testing.T) {
	dir := t.TempDir()
	_, missing := os.ReadFile(dir + "/none.json")
	if _, ok := Fallback(QubeController, missing); !ok {
		t.Errorf("Fallback(%q, %v): no built-in copy", QubeController, missing)
	}
	if _, ok := Fallback(dir+"/none.json", missing); ok {
		t.Error("Fallback of a path that is not a default path gave a built-in copy")
	}
	_, isDir := os.ReadFile(dir) // a directory: not a missing file
	if isDir == nil {
		t.Fatal("reading a directory succeeded")
	}
	if _, ok := Fallback(QubeController, isDir); ok {
		t.Errorf("Fallback(%q, %v) gave a built-in copy; want the error reported", QubeController, isDir)
	}
	if _, ok := Fallback(QubeController, nil); ok {
		t.Error("Fallback with no error gave a built-in copy")
	}
}

package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// duet keys --tls-only writes a new CA and server certificate and keeps the
// role keys: the certificates can be renewed before they expire without a
// new set-up. Before, only --force could write them again, and it rotated
// every key.
func TestKeysTLSOnlyKeepsRoleKeys(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var out strings.Builder
	if err := Run(ctx, []string{"keys", "--dir", dir, "--tls-hosts", "nats,localhost"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	seed, ca := read("sensor.seed"), read("ca.pem")
	out.Reset()
	if err := Run(ctx, []string{"keys", "--dir", dir, "--tls-only", "--tls-hosts", "nats,localhost", "--tls-days", "30"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read("sensor.seed"), seed) {
		t.Error("--tls-only changed a role key")
	}
	if bytes.Equal(read("ca.pem"), ca) {
		t.Error("--tls-only did not write a new CA")
	}
	if want := time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.DateOnly); !strings.Contains(out.String(), "valid until "+want) {
		t.Errorf("output %q does not say the certificates are valid until %s", out.String(), want)
	}
	for _, args := range [][]string{{"--tls-only"}, {"--tls-only", "--tls-hosts", "nats", "--force"}, {"--tls-hosts", "nats", "--tls-days", "0"}} {
		if err := Run(ctx, append([]string{"keys", "--dir", dir}, args...), io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("keys %v: %v, want a usage error", args, err)
		}
	}
}

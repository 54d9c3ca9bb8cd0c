package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// duet keys --tls-only writes a new server certificate under the directory's
// CA and keeps the CA and the role keys, so that the certificate is renewed
// without a new set-up and the NATS servers can restart one at a time (they
// and the clients trust the same CA). Before, only --force could write the
// certificate again, and it rotated every key and the CA. A directory
// without the CA's key, and --new-ca, get a new CA, and are told so.
func TestKeysTLSOnlyKeepsRoleKeys(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	hosts := "nats,localhost"
	if err := Run(ctx, []string{"keys", "--dir", dir, "--tls-hosts", hosts}, io.Discard, io.Discard); err != nil {
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
	parse := func(name string) *x509.Certificate {
		t.Helper()
		b, _ := pem.Decode(read(name))
		if b == nil {
			t.Fatalf("%s holds no PEM block", name)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	seed, ca, cert := read("sensor.seed"), read("ca.pem"), read("nats-cert.pem")
	if d := time.Until(parse("ca.pem").NotAfter); d < 9*365*24*time.Hour {
		t.Errorf("the CA is valid for %v, want 10 years", d)
	}
	var out strings.Builder
	if err := Run(ctx, []string{"keys", "--dir", dir, "--tls-only", "--tls-hosts", hosts, "--tls-days", "30"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read("sensor.seed"), seed) || !bytes.Equal(read("ca.pem"), ca) {
		t.Error("--tls-only changed a role key or the CA")
	}
	if bytes.Equal(read("nats-cert.pem"), cert) {
		t.Error("--tls-only did not write a new server certificate")
	}
	roots := x509.NewCertPool()
	roots.AddCert(parse("ca.pem"))
	leaf := parse("nats-cert.pem")
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "nats"}); err != nil {
		t.Errorf("the renewed certificate does not verify under the kept CA: %v", err)
	}
	if want := time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.DateOnly); !strings.Contains(out.String(), "kept the CA") || !strings.Contains(out.String(), "valid until "+want) {
		t.Errorf("output %q does not say the CA was kept and the certificate is valid until %s", out.String(), want)
	}
	// A directory written before the CA's key was kept, and --new-ca.
	for _, c := range []struct {
		name string
		args []string
		prep func()
	}{
		{"no CA key", nil, func() { os.Remove(filepath.Join(dir, "ca-key.pem")) }},
		{"--new-ca", []string{"--new-ca"}, func() {}},
	} {
		c.prep()
		before := read("ca.pem")
		out.Reset()
		if err := Run(ctx, append([]string{"keys", "--dir", dir, "--tls-only", "--tls-hosts", hosts}, c.args...), &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(read("ca.pem"), before) || !strings.Contains(out.String(), "wrote a new CA") {
			t.Errorf("%s: no new CA written, or not said (%q)", c.name, out.String())
		}
	}
	for _, args := range [][]string{{"--tls-only"}, {"--tls-only", "--tls-hosts", "nats", "--force"}, {"--tls-hosts", "nats", "--tls-days", "0"}, {"--new-ca", "--tls-hosts", "nats"}} {
		if err := Run(ctx, append([]string{"keys", "--dir", dir}, args...), io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("keys %v: %v, want a usage error", args, err)
		}
	}
}

// --tls-hosts entries are trimmed, and an empty one or one that is neither
// an IP address nor a DNS name is refused before anything is written: a
// certificate for " localhost" or "" failed every client's verification.
func TestKeysTLSHostsChecked(t *testing.T) {
	for _, c := range []struct{ hosts, want string }{
		{"nats,", "an empty host name"},
		{"nats,,localhost", "an empty host name"},
		{"nats,local host", `"local host" is neither`},
		{"-nats", `"-nats" is neither`},
		{"nats.", `"nats." is neither`},
	} {
		dir := t.TempDir()
		err := Run(context.Background(), []string{"keys", "--dir", dir, "--tls-hosts", c.hosts}, io.Discard, io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--tls-hosts %q: %v, want a usage error containing %q", c.hosts, err, c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("--tls-hosts %q: %d files written before the refusal", c.hosts, len(entries))
		}
	}
	dir := t.TempDir()
	if err := Run(context.Background(), []string{"keys", "--dir", dir, "--tls-hosts", " nats , 127.0.0.1,*.duet.svc"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "nats-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cert.DNSNames, ","); got != "nats,*.duet.svc" || len(cert.IPAddresses) != 1 {
		t.Errorf("certificate for DNS names %q and IPs %v, want nats,*.duet.svc and 127.0.0.1", got, cert.IPAddresses)
	}
}

// duet keys --if-missing, as the compose stack's keys service, `make up` and
// `make k8s-secrets` run it, keeps a directory's keys and brings its
// nats-auth.conf up to this release's permissions, so that an upgrade that
// changes a role's rights reaches a deployment whose keys an earlier release
// wrote. Before, it kept the earlier release's grants for good.
func TestKeysIfMissingRefreshesPermissions(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if err := Run(ctx, []string{"keys", "--dir", dir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	names := []string{"sensor.seed", "party0.seed", "dealer.seed", "sensor.nats.nk", "party1.nats.nk", "dealer.nats.nk", "dealer.pub"}
	files := map[string][]byte{}
	for _, n := range append(names, "nats-auth.conf") {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	conf := filepath.Join(dir, "nats-auth.conf")
	if err := os.WriteFile(conf, []byte("authorization {\n  users = []\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Run(ctx, []string{"keys", "--dir", dir, "--if-missing"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(conf); !bytes.Equal(got, files["nats-auth.conf"]) {
		t.Error("--if-missing did not bring nats-auth.conf back to this release's permissions")
	}
	if !strings.Contains(out.String(), "kept them, and rewrote nats-auth.conf") || !strings.Contains(out.String(), "earlier file kept as nats-auth.conf.prev") || !strings.Contains(out.String(), "reload or restart the NATS server") {
		t.Errorf("output %q does not say the keys were kept and the permissions rewritten", out.String())
	}
	for _, n := range names {
		if got, _ := os.ReadFile(filepath.Join(dir, n)); !bytes.Equal(got, files[n]) {
			t.Errorf("--if-missing changed %s", n)
		}
	}
	out.Reset()
	if err := Run(ctx, []string{"keys", "--dir", dir, "--if-missing"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "already has this release's permissions") {
		t.Errorf("a second run's output %q does not say the file was current", out.String())
	}
	// Keys without a NATS user seed: refused, naming it.
	seed := filepath.Join(dir, "party0.nats.nk")
	if err := os.Remove(seed); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, []string{"keys", "--dir", dir, "--if-missing"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), seed) {
		t.Errorf("without %s: %v, want an error naming it", seed, err)
	}
}

// duet keys refuses what it cannot do right before writing anything, and
// says what it wrote: found by a read-only audit, each case below went
// wrong before.
func TestKeysRefusesAndReportsExactly(t *testing.T) {
	ctx := context.Background()
	run := func(out io.Writer, args ...string) error {
		return Run(ctx, append([]string{"keys"}, args...), out, io.Discard)
	}
	files := func(dir string) []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	// --tls-days past the CA's ten years overflowed into a certificate
	// that had expired centuries ago, written and reported as valid.
	dir := t.TempDir()
	if err := run(io.Discard, "--dir", dir, "--tls-hosts", "nats", "--tls-days", "106752"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--tls-days 106752") {
		t.Errorf("--tls-days 106752: %v, want a usage error naming it", err)
	}
	if names := files(dir); len(names) > 0 {
		t.Errorf("--tls-days 106752: wrote %v before refusing", names)
	}
	// --tls-days alone: no certificate to make; it was ignored.
	if err := run(io.Discard, "--dir", dir, "--tls-days", "30"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--tls-days goes with --tls-hosts") {
		t.Errorf("--tls-days without --tls-hosts: %v, want a usage error", err)
	}
	// --if-missing and --force: one keeps the keys, the other rotates them.
	if err := run(io.Discard, "--dir", dir, "--if-missing", "--force"); !errors.Is(err, ErrUsage) {
		t.Errorf("--if-missing --force: %v, want a usage error", err)
	}
	// --tls-only on a directory without role keys (a mistyped --dir) made
	// a new CA there.
	if err := run(io.Discard, "--dir", filepath.Join(dir, "typo"), "--tls-only", "--tls-hosts", "nats"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "holds no role keys") {
		t.Errorf("--tls-only on a directory without keys: %v, want a usage error saying so", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "typo")); err == nil {
		t.Error("--tls-only on a directory without keys created it")
	}
	// A directory holding only the NATS user seeds: refused before the
	// end-to-end keys were written (they were, then the seeds refused).
	if err := run(io.Discard, "--dir", dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range files(dir) {
		if strings.HasSuffix(name, ".seed") || strings.HasSuffix(name, ".pub") {
			os.Remove(filepath.Join(dir, name))
		}
	}
	// Its message says "already exists", which make keys looks for.
	if err := run(io.Discard, "--dir", dir); err == nil || !strings.Contains(err.Error(), ".nats.nk") || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("keys into a directory with NATS user seeds: %v, want a refusal naming one, saying it already exists", err)
	}
	for _, name := range files(dir) {
		if strings.HasSuffix(name, ".seed") || strings.HasSuffix(name, ".pub") {
			t.Errorf("%s written before the refusal", name)
		}
	}
	// --if-missing with --tls-hosts on keys without the TLS material
	// writes it (before, it said it kept the keys and wrote none).
	dir = t.TempDir()
	if err := run(io.Discard, "--dir", dir); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(&out, "--dir", dir, "--if-missing", "--tls-hosts", "nats"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "nats-cert.pem", "nats-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("--if-missing --tls-hosts on keys without TLS: %v", err)
		}
	}
	if !strings.Contains(out.String(), "kept them") || !strings.Contains(out.String(), "wrote ca.pem") {
		t.Errorf("output %q, want the keys kept and the TLS material written", out.String())
	}
	// Run again: all of it kept, and the host list not applied is said.
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	out.Reset()
	if err := run(&out, "--dir", dir, "--if-missing", "--tls-hosts", "other"); err != nil || !strings.Contains(out.String(), "--tls-hosts and --tls-days not applied") {
		t.Errorf("--if-missing --tls-hosts on complete TLS material: %v, %q; want it kept and said", err, out.String())
	}
	// A server certificate missing beside its CA is written under that CA,
	// which is kept (a new CA would replace the one clients trust).
	os.Remove(filepath.Join(dir, "nats-cert.pem"))
	out.Reset()
	if err := run(&out, "--dir", dir, "--if-missing", "--tls-hosts", "nats"); err != nil || !strings.Contains(out.String(), "kept the CA") {
		t.Errorf("--if-missing --tls-hosts without the server certificate: %v, %q; want it written under the kept CA", err, out.String())
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(now, ca) {
		t.Error("--if-missing --tls-hosts replaced the CA")
	}
	if _, err := os.Stat(filepath.Join(dir, "nats-cert.pem")); err != nil {
		t.Error(err)
	}
	// The CA's key missing beside the rest: refused, nothing replaced.
	caKeyPEM, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	os.Remove(filepath.Join(dir, "ca-key.pem"))
	if err := run(io.Discard, "--dir", dir, "--if-missing", "--tls-hosts", "nats"); err == nil || !strings.Contains(err.Error(), "only part of the TLS material") {
		t.Errorf("--if-missing --tls-hosts without the CA's key: %v, want a refusal", err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(now, ca) {
		t.Error("--if-missing --tls-hosts without the CA's key replaced the CA")
	}
	os.WriteFile(filepath.Join(dir, "ca-key.pem"), caKeyPEM, 0o600)
	// A CA near its end cuts the server certificate to it: the date said
	// is the certificate's, and the cut is said (before, now + --tls-days).
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caEnd := time.Now().Add(10 * 24 * time.Hour)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "old CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: caEnd, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	os.WriteFile(filepath.Join(dir, "ca-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	out.Reset()
	if err := run(&out, "--dir", dir, "--tls-only", "--tls-hosts", "nats", "--tls-days", "365"); err != nil {
		t.Fatal(err)
	}
	want := "valid until " + caEnd.UTC().Format(time.DateOnly) + " (cut to the CA's own end"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/duet-mpc/duet/internal/acl"
	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/pkg/codec"
)

func init() {
	register("keys", "generate every role's end-to-end key pair into a directory", runKeys)
}

func runKeys(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "keys", "output directory: <role>.seed (0600, secret) and <role>.pub per role")
	force := fs.Bool("force", false, "overwrite existing key files (rotates every key)")
	ifMissing := fs.Bool("if-missing", false, "keep the keys (exit 0) if the directory already holds them, bringing its nats-auth.conf up to this release's permissions (and with --tls-hosts writing the TLS material it lacks); for init containers and upgrades")
	tlsHosts := fs.String("tls-hosts", "", "also write a private CA and a NATS server certificate for these comma-separated host names/IPs (ca.pem, nats-cert.pem, nats-key.pem)")
	tlsDays := fs.Int("tls-days", 365, "days the server certificate of --tls-hosts is valid (its CA: 10 years)")
	tlsOnly := fs.Bool("tls-only", false, "write only a new server certificate for --tls-hosts, signed by the directory's CA (ca.pem, ca-key.pem), keeping the CA and the role keys: to renew it before it expires")
	newCA := fs.Bool("new-ca", false, "with --tls-only: write a new CA as well (the old one expired or was exposed)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if *tlsDays < 1 || *tlsDays > maxTLSDays {
		return fmt.Errorf("%w: --tls-days %d, want 1 to %d (the CA's ten years)", ErrUsage, *tlsDays, maxTLSDays)
	}
	if *tlsOnly && (*tlsHosts == "" || *force || *ifMissing) {
		return fmt.Errorf("%w: --tls-only needs --tls-hosts, and takes neither --force nor --if-missing (it keeps the role keys)", ErrUsage)
	}
	if *ifMissing && *force {
		return fmt.Errorf("%w: --if-missing keeps a directory's keys and --force rotates them: give one or the other", ErrUsage)
	}
	tlsDaysSet := false
	fs.Visit(func(f *flag.Flag) { tlsDaysSet = tlsDaysSet || f.Name == "tls-days" })
	if tlsDaysSet && *tlsHosts == "" {
		return fmt.Errorf("%w: --tls-days goes with --tls-hosts (without it, no certificate is written)", ErrUsage)
	}
	if *newCA && !*tlsOnly {
		return fmt.Errorf("%w: --new-ca goes with --tls-only (without it, every run writes a new CA)", ErrUsage)
	}
	var hosts []string
	if *tlsHosts != "" {
		var err error
		if hosts, err = parseHosts(*tlsHosts); err != nil {
			return err
		}
	}
	validFor := time.Duration(*tlsDays) * 24 * time.Hour
	if *tlsOnly {
		// It keeps the role keys: a directory without them is a mistyped
		// --dir, not one to make a CA in.
		if _, err := os.Stat(keys.SeedPath(*dir, codec.RoleSensor)); err != nil {
			return fmt.Errorf("%w: --tls-only renews the certificate of a keys directory, and %s holds no role keys (%v): a mistyped --dir?", ErrUsage, *dir, err)
		}
		return renewTLS(stdout, *dir, hosts, validFor, *newCA)
	}
	if *ifMissing {
		if _, err := os.Stat(keys.SeedPath(*dir, codec.RoleSensor)); err == nil {
			changed, prevKept, err := acl.RefreshAuthConfig(*dir)
			if err != nil {
				return fmt.Errorf("%s already holds keys, kept; its %s could not be brought up to this release's permissions: %w", *dir, acl.AuthConfigFile, err)
			}
			if changed {
				kept := "there was none before"
				if prevKept {
					kept = "the earlier file kept as " + acl.PrevAuthConfigFile
				}
				fmt.Fprintf(stdout, "%s already holds keys; kept them, and rewrote %s with this release's permissions (%s): reload or restart the NATS server to apply them\n", *dir, acl.AuthConfigFile, kept)
			} else {
				fmt.Fprintf(stdout, "%s already holds keys; kept them (%s already has this release's permissions)\n", *dir, acl.AuthConfigFile)
			}
			if *tlsHosts != "" {
				return keepTLS(stdout, *dir, hosts, validFor)
			}
			return nil
		}
	}
	if !*force {
		// Refused before anything is written: keys.Generate checks the
		// .seed and .pub files, and the NATS user seeds are checked here,
		// so that a directory holding only those is not half rewritten.
		if err := acl.NoUsers(*dir); err != nil {
			return err
		}
	}
	if err := keys.Generate(*dir, *force); err != nil {
		return err
	}
	if err := acl.GenerateUsers(*dir, *force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote into %s, per role: <role>.seed (end-to-end secret key), <role>.pub, <role>.nats.nk (NATS user, for DUET_NATS_CREDS); and %s (the NATS server's users and permissions)\n", *dir, acl.AuthConfigFile)
	fmt.Fprintf(stdout, "give each service only its own .seed and .nats.nk, and every .pub\n")
	if *tlsHosts != "" {
		return writeTLS(stdout, *dir, hosts, validFor)
	}
	return nil
}

// keepTLS is --if-missing's --tls-hosts on a directory that holds keys: the
// TLS material it has is kept (a changed --tls-hosts or --tls-days is not
// applied, and it says so); without any, it is written, rather than left
// missing for later steps to trip on; a server certificate missing beside
// its CA is written under that CA; any other part is refused, since a new
// CA would replace one that clients trust.
func keepTLS(stdout io.Writer, dir string, hosts []string, validFor time.Duration) error {
	have := acl.TLSFiles(dir)
	switch {
	case len(have) == 4:
		fmt.Fprintf(stdout, "kept its TLS material too (--tls-hosts and --tls-days not applied: renew the certificate with duet keys --tls-only)\n")
		return nil
	case len(have) == 0:
		return writeTLS(stdout, dir, hosts, validFor)
	case slices.Contains(have, acl.CAFile) && slices.Contains(have, acl.CAKeyFile):
		return renewTLS(stdout, dir, hosts, validFor, false)
	}
	return fmt.Errorf("%s holds only part of the TLS material (%s) and not the CA with its key: write it with duet keys --tls-only --new-ca (a new CA, which every client and server must then trust)", dir, strings.Join(have, ", "))
}

// renewTLS writes a new server certificate under dir's CA (--tls-only), or
// under a new CA with newCA or when dir holds no CA key, and says which.
func renewTLS(stdout io.Writer, dir string, hosts []string, validFor time.Duration, newCA bool) error {
	wroteCA := newCA
	var err error
	if wroteCA {
		err = acl.GenerateTLS(dir, hosts, validFor)
	} else {
		wroteCA, err = acl.RenewServerCert(dir, hosts, validFor)
	}
	if err != nil {
		return err
	}
	if wroteCA {
		fmt.Fprintf(stdout, "wrote a new CA (%s, its key %s): every client and NATS server must trust it before any server presents the new certificate: restart every NATS server at once, then every service\n", acl.CAFile, acl.CAKeyFile)
	} else {
		fmt.Fprintf(stdout, "kept the CA (%s); ", acl.CAFile)
	}
	until, err := certUntil(dir, validFor)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s, valid until %s\n", acl.ServerCertFile, acl.ServerKeyFile, until)
	return nil
}

// maxTLSDays bounds --tls-days: a server certificate ends with its CA, ten
// years (acl.CAValidity), and a larger value once overflowed into a
// certificate that had expired centuries ago.
const maxTLSDays = 3650

// writeTLS writes a new CA and server certificate into dir and says so.
func writeTLS(stdout io.Writer, dir string, hosts []string, validFor time.Duration) error {
	if err := acl.GenerateTLS(dir, hosts, validFor); err != nil {
		return err
	}
	until, err := certUntil(dir, validFor)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (the CA; clients: DUET_TLS_CA=%s; its key %s: keep it offline), %s and %s, the server certificate, valid until %s: renew it before then (duet keys --tls-only)\n",
		acl.CAFile, acl.CAFile, acl.CAKeyFile, acl.ServerCertFile, acl.ServerKeyFile, until)
	return nil
}

// certUntil is the written server certificate's end date, read back from
// it, and says when the CA's own end cut it short of validFor.
func certUntil(dir string, validFor time.Duration) (string, error) {
	end, err := acl.ServerCertExpiry(dir)
	if err != nil {
		return "", err
	}
	until := end.UTC().Format(time.DateOnly)
	if end.Before(time.Now().Add(validFor).Add(-24 * time.Hour)) {
		until += " (cut to the CA's own end: write a new CA before then, duet keys --tls-only --new-ca)"
	}
	return until, nil
}

// parseHosts splits --tls-hosts: each entry trimmed, and one that is empty
// or neither an IP address nor a DNS name refused, naming it (a certificate
// for " localhost" or "" would fail every client's verification, long after
// it was written).
func parseHosts(list string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			return nil, fmt.Errorf("%w: --tls-hosts %q: an empty host name", ErrUsage, list)
		case net.ParseIP(h) == nil && !validDNSName(h):
			return nil, fmt.Errorf("%w: --tls-hosts: %q is neither an IP address nor a DNS name", ErrUsage, h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// validDNSName: labels of 1 to 63 letters, digits and hyphens, not starting
// or ending with a hyphen, 253 characters at most; a leading "*." (a
// wildcard) is allowed, a trailing dot is not (Go's verifier refuses such a
// name in a certificate).
func validDNSName(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

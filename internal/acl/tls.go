package acl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/duet-mpc/duet/internal/keys"
)

// TLS file names written by GenerateTLS. CAKeyFile is the CA's private
// key: it stays with the keys directory, offline, and is never mounted into
// a service; RenewServerCert signs a new server certificate with it.
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "nats-cert.pem"
	ServerKeyFile  = "nats-key.pem"
)

// CAValidity is how long a CA written by GenerateTLS is valid: longer than
// its server certificates, which RenewServerCert renews under it, so that a
// renewal changes nothing the clients and the other servers trust.
const CAValidity = 10 * 365 * 24 * time.Hour

// GenerateTLS writes a private CA (ca.pem, valid for CAValidity, or validFor
// if longer; its key in ca-key.pem) and a server certificate signed by it
// (nats-cert.pem, nats-key.pem, valid for validFor) for the given host
// names and IPs, for NATS client connections and cluster routes. Clients
// verify with DUET_TLS_CA.
func GenerateTLS(dir string, hosts []string, validFor time.Duration) error {
	if len(hosts) == 0 {
		return fmt.Errorf("acl: no TLS host names")
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "duet CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(max(validFor, CAValidity)), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return err
	}
	caKeyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writePEM(dir, CAFile, "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writePEM(dir, CAKeyFile, "EC PRIVATE KEY", caKeyDER, 0o600); err != nil {
		return err
	}
	return writeServerCert(dir, hosts, validFor, ca, caKey)
}

// RenewServerCert writes a new server certificate (nats-cert.pem,
// nats-key.pem, valid for validFor but not past the CA) for hosts, signed
// by the CA of dir (ca.pem, ca-key.pem), which it leaves as it is: the
// clients and the other NATS servers trust the new certificate as they did
// the old, so the servers can be restarted one at a time. A directory
// without the CA's key (written before it was kept) gets a new CA as well
// (GenerateTLS), and newCA says so: every client and server must then trust
// the new ca.pem before any server presents the new certificate.
func RenewServerCert(dir string, hosts []string, validFor time.Duration) (newCA bool, err error) {
	if len(hosts) == 0 {
		return false, fmt.Errorf("acl: no TLS host names")
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return true, GenerateTLS(dir, hosts, validFor)
	}
	if err != nil {
		return false, fmt.Errorf("acl: %w", err)
	}
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return false, fmt.Errorf("acl: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	cb, _ := pem.Decode(certPEM)
	if kb == nil || cb == nil {
		return false, fmt.Errorf("acl: %s or %s holds no PEM block", CAKeyFile, CAFile)
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return false, fmt.Errorf("acl: %s: %w", CAKeyFile, err)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return false, fmt.Errorf("acl: %s: %w", CAFile, err)
	}
	if !caKey.PublicKey.Equal(ca.PublicKey) {
		return false, fmt.Errorf("acl: %s is not the key of the CA in %s", CAKeyFile, CAFile)
	}
	if !time.Now().Before(ca.NotAfter) {
		return false, fmt.Errorf("acl: the CA in %s expired on %s: write a new one (duet keys --tls-only --new-ca)", CAFile, ca.NotAfter.UTC().Format(time.DateOnly))
	}
	return false, writeServerCert(dir, hosts, validFor, ca, caKey)
}

// writeServerCert signs a server certificate for hosts with the CA and
// writes it and its key into dir; it is valid for validFor, but not past
// the CA.
func writeServerCert(dir string, hosts []string, validFor time.Duration, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	notAfter := now.Add(validFor)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	leaf := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(dir, ServerCertFile, "CERTIFICATE", leafDER, 0o644); err != nil {
		return err
	}
	return writePEM(dir, ServerKeyFile, "EC PRIVATE KEY", keyDER, 0o600)
}

// writePEM replaces dir/name atomically (keys.ReplaceFile): a failure or a
// crash leaves the file it replaces whole, never half a certificate or key.
func writePEM(dir, name, typ string, der []byte, mode os.FileMode) error {
	return keys.ReplaceFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// ServerCertExpiry returns when the server certificate in dir expires:
// what GenerateTLS and RenewServerCert wrote, which is cut to the CA's own
// end when validFor would outlast it.
func ServerCertExpiry(dir string) (time.Time, error) {
	data, err := os.ReadFile(filepath.Join(dir, ServerCertFile))
	if err != nil {
		return time.Time{}, fmt.Errorf("acl: %w", err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return time.Time{}, fmt.Errorf("acl: %s holds no PEM block", ServerCertFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, fmt.Errorf("acl: %s: %w", ServerCertFile, err)
	}
	return cert.NotAfter, nil
}

// TLSFiles returns which of the TLS files GenerateTLS writes (CAFile,
// CAKeyFile, ServerCertFile, ServerKeyFile) dir holds.
func TLSFiles(dir string) []string {
	var have []string
	for _, f := range []string{CAFile, CAKeyFile, ServerCertFile, ServerKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			have = append(have, f)
		}
	}
	return have
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// ServerTLS loads the server certificate written by GenerateTLS.
func ServerTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS trusts the CA in caFile.
func ClientTLS(caFile string) (*tls.Config, error) {
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("acl: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("acl: %s holds no certificate", caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

package codec

import (
	"bytes"
	"fmt"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/curve25519"
)

// Identity is a role's own X25519 secret, stored as an nkeys curve seed
// ("SX..."); its public key is the nkeys curve public key ("X...").
//
// The secret never appears in formatted output: an Identity prints as its
// public key.
type Identity struct {
	priv [32]byte // raw X25519 scalar (clamped by the box functions)
	pub  [32]byte
	pubS string
}

// GenerateIdentity draws a fresh identity from crypto/rand.
func GenerateIdentity() (*Identity, error) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, fmt.Errorf("%w: generating curve key: %w", ErrKey, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("%w: encoding curve seed: %w", ErrKey, err)
	}
	return ParseIdentity(seed)
}

// ParseIdentity decodes an nkeys curve seed ("SX..."); surrounding whitespace
// (a trailing newline in a key file) is ignored.
func ParseIdentity(seed []byte) (*Identity, error) {
	seed = bytes.TrimSpace(seed)
	prefix, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("%w: not an nkeys seed: %w", ErrKey, err)
	}
	if prefix != nkeys.PrefixByteCurve || len(raw) != 32 {
		return nil, fmt.Errorf("%w: seed is a %s key, want a curve (X25519) seed \"SX...\"", ErrKey, prefix)
	}
	id := &Identity{priv: [32]byte(raw)}
	pub, err := curve25519.X25519(id.priv[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("%w: deriving public key: %w", ErrKey, err)
	}
	id.pub = [32]byte(pub)
	enc, err := nkeys.Encode(nkeys.PrefixByteCurve, pub)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding public key: %w", ErrKey, err)
	}
	id.pubS = string(enc)
	return id, nil
}

// Seed returns the nkeys curve seed ("SX..."). It is the secret: store it
// with mode 0600.
func (id *Identity) Seed() ([]byte, error) {
	seed, err := nkeys.EncodeSeed(nkeys.PrefixByteCurve, id.priv[:])
	if err != nil {
		return nil, fmt.Errorf("%w: encoding curve seed: %w", ErrKey, err)
	}
	return seed, nil
}

// PublicKey returns the nkeys curve public key ("X...").
func (id *Identity) PublicKey() string { return id.pubS }

// String prints the public key only. (Value receivers, so that formatting
// an Identity value does not print the secret either.)
func (id Identity) String() string { return "Identity(" + id.pubS + ")" }

// GoString keeps %#v from printing the secret.
func (id Identity) GoString() string { return "codec.Identity(" + id.pubS + ")" }

// ValidatePublicKey checks an nkeys curve public key ("X...", 56 characters):
// encoding, checksum, prefix, length, and that it is not a low-order point
// (which would make every shared key with it the same, public value).
func ValidatePublicKey(pub string) error {
	_, err := decodePublicKey(pub, "public key")
	return err
}

// lowOrderProbe is any scalar: X25519 with a clamped scalar is all-zero
// exactly for the low-order points, and curve25519.X25519 reports that.
var lowOrderProbe = [32]byte{9}

// decodePublicKey returns the raw key; who names it in errors.
func decodePublicKey(pub, who string) ([32]byte, error) {
	var k [32]byte
	const encLen = 56 // base32 of prefix + 32 bytes + crc16
	if len(pub) != encLen {
		return k, fmt.Errorf("%w: %s has %d characters, want %d (\"X...\")", ErrKey, who, len(pub), encLen)
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteCurve, []byte(pub))
	if err != nil {
		return k, fmt.Errorf("%w: %s %q is not an nkeys curve public key: %v", ErrKey, who, pub, err)
	}
	if len(raw) != 32 {
		return k, fmt.Errorf("%w: %s %q decodes to %d bytes, want 32", ErrKey, who, pub, len(raw))
	}
	if _, err := curve25519.X25519(lowOrderProbe[:], raw); err != nil {
		return k, fmt.Errorf("%w: %s %q is a low-order point", ErrKey, who, pub)
	}
	return [32]byte(raw), nil
}

package codec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestIdentityRoundTrip(t *testing.T) {
	id, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := id.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(seed, []byte("SX")) {
		t.Errorf("seed %.2s..., want SX...", seed)
	}
	if pub := id.PublicKey(); !strings.HasPrefix(pub, "X") || ValidatePublicKey(pub) != nil {
		t.Errorf("public key %q", pub)
	}
	for _, in := range [][]byte{seed, append(append([]byte(" \n"), seed...), "\r\n\t"...)} {
		id2, err := ParseIdentity(in)
		if err != nil {
			t.Fatal(err)
		}
		if id2.PublicKey() != id.PublicKey() || id2.priv != id.priv {
			t.Errorf("ParseIdentity(Seed()) differs")
		}
	}
	other, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if other.PublicKey() == id.PublicKey() {
		t.Error("two generated identities are equal")
	}
}

// TestIdentityMatchesNkeys checks that our identity is an nkeys curve key:
// same seed, same public key.
func TestIdentityMatchesNkeys(t *testing.T) {
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	id, err := ParseIdentity(seed)
	if err != nil {
		t.Fatal(err)
	}
	if id.PublicKey() != pub {
		t.Errorf("public key %s, nkeys says %s", id.PublicKey(), pub)
	}
	got, _ := id.Seed()
	if !bytes.Equal(got, seed) {
		t.Error("Seed() differs from the nkeys seed")
	}
	kp2, err := nkeys.FromCurveSeed(got)
	if err != nil {
		t.Fatal(err)
	}
	if pub2, _ := kp2.PublicKey(); pub2 != pub {
		t.Error("nkeys.FromCurveSeed(Seed()) has another public key")
	}
}

func TestParseIdentityRejects(t *testing.T) {
	user, _ := nkeys.CreateUser()
	userSeed, _ := user.Seed()
	curve, _ := nkeys.CreateCurveKeys()
	curvePub, _ := curve.PublicKey()
	curveSeed, _ := curve.Seed()
	flipped := bytes.Clone(curveSeed)
	flipped[10] ^= 1
	for name, in := range map[string][]byte{
		"empty":       nil,
		"spaces":      []byte("  \n"),
		"user seed":   userSeed,
		"public key":  []byte(curvePub),
		"bad crc":     flipped,
		"truncated":   curveSeed[:len(curveSeed)-3],
		"not base32":  []byte("SX!!!!"),
		"inner space": append(append(bytes.Clone(curveSeed[:20]), ' '), curveSeed[20:]...),
	} {
		if _, err := ParseIdentity(in); !errors.Is(err, ErrKey) {
			t.Errorf("%s: err = %v, want ErrKey", name, err)
		}
	}
}

func TestValidatePublicKey(t *testing.T) {
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	good := testIdentity(t, RoleSensor).PublicKey()
	if err := ValidatePublicKey(good); err != nil {
		t.Fatalf("ValidatePublicKey(%s) = %v", good, err)
	}
	lowOrder, err := nkeys.Encode(nkeys.PrefixByteCurve, make([]byte, 32)) // the point 0
	if err != nil {
		t.Fatal(err)
	}
	short, _ := nkeys.Encode(nkeys.PrefixByteCurve, make([]byte, 31))
	badCRC := []byte(good)
	badCRC[len(badCRC)-1] ^= 1
	for name, in := range map[string]string{
		"empty":     "",
		"user key":  userPub,
		"low order": string(lowOrder),
		"31 bytes":  string(short),
		"bad crc":   string(badCRC),
		"lowercase": strings.ToLower(good),
		"seed":      "SX" + good[2:],
	} {
		if err := ValidatePublicKey(in); !errors.Is(err, ErrKey) {
			t.Errorf("%s: err = %v, want ErrKey", name, err)
		}
	}
}

func TestIdentityFormatHidesSeed(t *testing.T) {
	id := testIdentity(t, RoleDealer)
	seed, _ := id.Seed()
	for _, s := range []string{
		fmt.Sprint(id), fmt.Sprintf("%v %+v %#v %s", id, id, id, id),
		fmt.Sprintf("%v %+v %#v", *id, *id, *id),
	} {
		if strings.Contains(s, string(seed)) || strings.Contains(s, fmt.Sprint(id.priv[0], " ", id.priv[1])) {
			t.Errorf("formatted identity %q shows the secret", s)
		}
		if !strings.Contains(s, id.PublicKey()) {
			t.Errorf("formatted identity %q lacks the public key", s)
		}
	}
}

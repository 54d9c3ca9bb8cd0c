package codec

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/secretbox"
)

func TestRecordKeyAndSealedRecords(t *testing.T) {
	id, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := id.Seed()
	if err != nil {
		t.Fatal(err)
	}
	k, err := id.RecordKey("duet/v1/party-state")
	if err != nil {
		t.Fatal(err)
	}
	// Records already stored were sealed under sha256(label || seed).
	if want := sha256.Sum256(append([]byte("duet/v1/party-state"), seed...)); k != want {
		t.Fatalf("RecordKey changed its derivation")
	}
	other, _ := id.RecordKey("duet/v1/sensor-state")
	if other == k {
		t.Fatal("two labels gave the same key")
	}

	type rec struct {
		A uint64 `msgpack:"a"`
		B string `msgpack:"b"`
	}
	data, err := SealRecord(&k, rec{A: 7, B: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got rec
	if err := OpenRecord(&k, data, &got); err != nil || got != (rec{A: 7, B: "x"}) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if err := OpenRecord(&other, data, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong key: %v, want ErrAuth", err)
	}
	data[len(data)-1] ^= 1
	if err := OpenRecord(&k, data, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("tampered: %v, want ErrAuth", err)
	}
	if err := OpenRecord(&k, data[:20], &got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short: %v, want ErrMalformed", err)
	}

	// SealRecordAppend: the record after dst's bytes, which it keeps; a
	// buffer with room is reused, not reallocated; each record its own
	// nonce.
	prefix := []byte("keep")
	buf, err := SealRecordAppend(append(make([]byte, 0, 256), prefix...), &k, rec{A: 9, B: "z"})
	if err != nil || string(buf[:4]) != "keep" {
		t.Fatalf("SealRecordAppend lost the prefix (%v)", err)
	}
	if err := OpenRecord(&k, buf[4:], &got); err != nil || got != (rec{A: 9, B: "z"}) {
		t.Fatalf("SealRecordAppend round trip: %+v, %v", got, err)
	}
	again, err := SealRecordAppend(buf[:0], &k, rec{A: 10, B: "w"})
	if err != nil || &again[0] != &buf[0] {
		t.Fatalf("SealRecordAppend into a buffer with room reallocated it (%v)", err)
	}
	if err := OpenRecord(&k, again, &got); err != nil || got != (rec{A: 10, B: "w"}) {
		t.Fatalf("SealRecordAppend into a reused buffer: %+v, %v", got, err)
	}
	if data, _ := SealRecord(&k, rec{A: 10, B: "w"}); bytes.Equal(data[:24], again[:24]) {
		t.Fatal("two records with the same nonce")
	}

	// The record is XChaCha20-Poly1305 (x/crypto) after its nonce.
	data, _ = SealRecord(&k, rec{A: 8, B: "y"})
	aead, _ := chacha20poly1305.NewX(k[:])
	body, err := aead.Open(nil, data[:24], data[24:], nil)
	if err != nil {
		t.Fatalf("not XChaCha20-Poly1305: %v", err)
	}
	if err := Unmarshal(body, &got); err != nil || got != (rec{A: 8, B: "y"}) {
		t.Fatalf("XChaCha20-Poly1305 body: %+v, %v", got, err)
	}
	// A record of an earlier release (secretbox, same key) still opens,
	// and fails as any other with a wrong key or a flipped bit.
	var nonce [24]byte
	nonce[3] = 9
	old := secretbox.Seal(append([]byte(nil), nonce[:]...), body, &nonce, &k)
	got = rec{}
	if err := OpenRecord(&k, old, &got); err != nil || got != (rec{A: 8, B: "y"}) {
		t.Fatalf("earlier release's record: %+v, %v", got, err)
	}
	if err := OpenRecord(&other, old, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("earlier release's record, wrong key: %v, want ErrAuth", err)
	}
	old[30] ^= 1
	if err := OpenRecord(&k, old, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("earlier release's record, tampered: %v, want ErrAuth", err)
	}
}

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
	const ctx = "loop-a"
	data, err := SealRecord(&k, ctx, rec{A: 7, B: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if id := RecordKeyID(&k); string(data[:4]) != recordMagic || string(data[4:12]) != string(id[:]) {
		t.Fatalf("record head %x, want the magic and key id %x", data[:12], id)
	}
	if RecordKeyID(&k) == RecordKeyID(&other) {
		t.Fatal("two keys with one id")
	}
	var got rec
	if err := OpenRecord(&k, ctx, data, &got); err != nil || got != (rec{A: 7, B: "x"}) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// Another key (a rotation) is told apart from a forgery.
	if err := OpenRecord(&other, ctx, data, &got); !errors.Is(err, ErrOtherKey) || errors.Is(err, ErrAuth) || Reason(err) != "other_key" {
		t.Fatalf("another key: %v (reason %s), want ErrOtherKey and not ErrAuth", err, Reason(err))
	}
	// The record is bound to its context: moved to another loop's key, it
	// does not open.
	if err := OpenRecord(&k, "loop-b", data, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("another context: %v, want ErrAuth", err)
	}
	// A record of another key given this key's id does not open.
	forged, _ := SealRecord(&other, ctx, rec{A: 7, B: "x"})
	kid := RecordKeyID(&k)
	copy(forged[4:12], kid[:])
	if err := OpenRecord(&k, ctx, forged, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("another key's record under this key's id: %v, want ErrAuth", err)
	}
	data[len(data)-1] ^= 1
	if err := OpenRecord(&k, ctx, data, &got); !errors.Is(err, ErrAuth) {
		t.Fatalf("tampered: %v, want ErrAuth", err)
	}
	if err := OpenRecord(&k, ctx, data[:20], &got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short: %v, want ErrMalformed", err)
	}

	// SealRecordAppend: the record after dst's bytes, which it keeps; a
	// buffer with room is reused, not reallocated; each record its own
	// nonce.
	prefix := []byte("keep")
	buf, err := SealRecordAppend(append(make([]byte, 0, 256), prefix...), &k, ctx, rec{A: 9, B: "z"})
	if err != nil || string(buf[:4]) != "keep" {
		t.Fatalf("SealRecordAppend lost the prefix (%v)", err)
	}
	if err := OpenRecord(&k, ctx, buf[4:], &got); err != nil || got != (rec{A: 9, B: "z"}) {
		t.Fatalf("SealRecordAppend round trip: %+v, %v", got, err)
	}
	again, err := SealRecordAppend(buf[:0], &k, ctx, rec{A: 10, B: "w"})
	if err != nil || &again[0] != &buf[0] {
		t.Fatalf("SealRecordAppend into a buffer with room reallocated it (%v)", err)
	}
	if err := OpenRecord(&k, ctx, again, &got); err != nil || got != (rec{A: 10, B: "w"}) {
		t.Fatalf("SealRecordAppend into a reused buffer: %+v, %v", got, err)
	}
	if data, _ := SealRecord(&k, ctx, rec{A: 10, B: "w"}); bytes.Equal(data[12:36], again[12:36]) {
		t.Fatal("two records with the same nonce")
	}

	// The box is XChaCha20-Poly1305 (x/crypto) after the head, over the
	// head and the context.
	data, _ = SealRecord(&k, ctx, rec{A: 8, B: "y"})
	aead, _ := chacha20poly1305.NewX(k[:])
	body, err := aead.Open(nil, data[12:36], data[36:], append(append([]byte(nil), data[:12]...), ctx...))
	if err != nil {
		t.Fatalf("not XChaCha20-Poly1305 over the head and the context: %v", err)
	}
	if err := Unmarshal(body, &got); err != nil || got != (rec{A: 8, B: "y"}) {
		t.Fatalf("XChaCha20-Poly1305 body: %+v, %v", got, err)
	}
	// Records of earlier releases still open, whatever the context, and
	// fail as any other with a wrong key or a flipped bit: XChaCha20-
	// Poly1305 after the nonce with no associated data (the fifty-ninth
	// session's), also when its random nonce starts with the magic, and
	// secretbox (earlier).
	var nonce [24]byte
	nonce[3] = 9
	v2 := aead.Seal(append([]byte(nil), nonce[:]...), nonce[:], body, nil)
	magicNonce := nonce
	copy(magicNonce[:], recordMagic)
	v2magic := aead.Seal(append([]byte(nil), magicNonce[:]...), magicNonce[:], body, nil)
	v1 := secretbox.Seal(append([]byte(nil), nonce[:]...), body, &nonce, &k)
	for _, c := range []struct {
		name string
		data []byte
	}{{"v2", v2}, {"v2, nonce starting with the magic", v2magic}, {"v1", v1}} {
		got = rec{}
		if err := OpenRecord(&k, "any", c.data, &got); err != nil || got != (rec{A: 8, B: "y"}) {
			t.Fatalf("earlier release's record (%s): %+v, %v", c.name, got, err)
		}
		if bytes.HasPrefix(c.data, []byte(recordMagic)) {
			// Read as the current layout first: with a wrong key or
			// flipped bits it reports that layout's error.
			continue
		}
		if err := OpenRecord(&other, ctx, c.data, &got); !errors.Is(err, ErrAuth) {
			t.Fatalf("earlier release's record (%s), wrong key: %v, want ErrAuth", c.name, err)
		}
		c.data[30] ^= 1
		if err := OpenRecord(&k, ctx, c.data, &got); !errors.Is(err, ErrAuth) {
			t.Fatalf("earlier release's record (%s), tampered: %v, want ErrAuth", c.name, err)
		}
	}
}

package codec

import (
	"crypto/sha256"
	"errors"
	"testing"
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
}

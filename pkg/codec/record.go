package codec

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"slices"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/secretbox"
)

// Records a service keeps for itself (the sensor's resume record, a
// party's persisted state) are sealed to the service alone: nonce (24
// random bytes) || XChaCha20-Poly1305 box, under a key derived from its
// identity seed, so the broker that stores them learns nothing. Records
// written by earlier releases (the same layout with NaCl secretbox's
// XSalsa20-Poly1305, under the same key) still open, so that after an
// upgrade a service can read why its record is stale (the sensor finds the
// set-up's older wire version, a party finds its state is from the older
// set-up) rather than see a record that does not authenticate; the two
// ciphers are told apart by which one authenticates.

// RecordKey derives the key sealing a service's own records; label keeps
// the keys of different record kinds apart.
func (id *Identity) RecordKey(label string) ([32]byte, error) {
	seed, err := id.Seed()
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	h.Write([]byte(label))
	h.Write(seed)
	var k [32]byte
	h.Sum(k[:0])
	return k, nil
}

// SealRecord encodes v and seals it under key with a random nonce.
func SealRecord(key *[32]byte, v any) ([]byte, error) { return SealRecordAppend(nil, key, v) }

// SealRecordAppend is SealRecord appending the sealed record to dst, for a
// writer that reuses one buffer: v is encoded after the nonce and sealed in
// place, so a buffer of the right capacity is not reallocated.
func SealRecordAppend(dst []byte, key *[32]byte, v any) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, err
	}
	start := len(dst)
	dst = slices.Grow(dst, chacha20poly1305.NonceSizeX)[:start+chacha20poly1305.NonceSizeX]
	if _, err := rand.Read(dst[start:]); err != nil {
		return nil, err
	}
	if dst, err = MarshalAppend(dst, v); err != nil {
		return nil, err
	}
	dst = slices.Grow(dst, aead.Overhead())
	head := start + chacha20poly1305.NonceSizeX
	// The box replaces the encoding where it lies (exact overlap is allowed).
	return aead.Seal(dst[:head], dst[start:head], dst[head:], nil), nil
}

// OpenRecord opens data sealed by SealRecord under key and decodes it into
// v: ErrMalformed if it is too short to be a record, ErrAuth if it does not
// open with key.
func OpenRecord(key *[32]byte, data []byte, v any) error {
	if len(data) < 24+max(secretbox.Overhead, chacha20poly1305.Overhead) {
		return fmt.Errorf("%w: sealed record too short", ErrMalformed)
	}
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return err
	}
	body, err := aead.Open(nil, data[:24], data[24:], nil)
	if err != nil { // an earlier release's record?
		var nonce [24]byte
		copy(nonce[:], data)
		var ok bool
		if body, ok = secretbox.Open(nil, data[24:], &nonce, key); !ok {
			return fmt.Errorf("%w: sealed record does not open with this key", ErrAuth)
		}
	}
	return Unmarshal(body, v)
}

// StateRecord is a party's persisted state for one loop (internal/party),
// sealed to the party with SealRecord. It is written every tick, so it has a
// fast path (payload_fast.go).
type StateRecord struct {
	// Instance identifies the writing process: the fence is lost only when
	// another instance has written.
	Instance uint64 `msgpack:"instance"`
	Epoch    uint64 `msgpack:"epoch"`
	Version  uint64 `msgpack:"version"`
	Tick     uint64 `msgpack:"tick"`
	// HWM is the stream sequence of the last item taken, and HWMIdx its
	// index in that message; without HWMIdx (a record of an earlier
	// release, or index 0) the whole message counts as taken, so a restore
	// may skip unused items of it, never reuse one. (Index 0 is omitted so
	// that a single-item queue's record stays readable by earlier releases.)
	HWM     uint64     `msgpack:"hwm"`
	HWMIdx  uint64     `msgpack:"hwm_idx,omitempty"`
	X       MatrixWire `msgpack:"x"`
	Prev    MatrixWire `msgpack:"prev"`
	HasPrev bool       `msgpack:"has_prev"`
	// Serials is the party's record of the offline items it has used in
	// the epoch, by dealer and counter (internal/party's encoding), so that
	// a restored party still refuses an item the broker delivers again.
	// Omitted when empty, as records of earlier releases are.
	Serials []byte `msgpack:"serials,omitempty"`
}

package codec

import (
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"slices"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/secretbox"
)

// Records a service keeps for itself (the sensor's resume record, a
// party's persisted state) are sealed to the service alone, under a key
// derived from its identity seed, so the broker that stores them learns
// nothing. A record is
//
//	recordMagic (4 bytes) || key id (8) || nonce (24 random bytes) || box
//
// where the box is XChaCha20-Poly1305 and authenticates, besides the
// plaintext, the magic, the key id and the record's context (the key it is
// stored under: a loop's record moved to another loop's key does not
// open). The key id (RecordKeyID) is a one-way digest of the key: a record
// sealed under another key, as every record is after a key rotation, is
// told apart from one that does not authenticate (ErrOtherKey, not
// ErrAuth), so a rotation is not reported as forged input.
//
// Records written by earlier releases still open: nonce || box with
// XChaCha20-Poly1305 and no associated data (the fifty-ninth session's
// and earlier), or with NaCl secretbox's XSalsa20-Poly1305 (earlier
// still), under the same key, so that after an upgrade a service can read
// why its record is stale (the sensor finds the set-up's older wire
// version, a party finds its state is from the older set-up) rather than
// see a record that does not authenticate. Such a record is bound to no
// context; the next write replaces it.

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

// recordMagic starts a record of the current layout. An earlier release's
// record starts with its random nonce; one whose nonce happens to start
// with these bytes still opens (OpenRecord tries the earlier layouts when
// the current one does not open).
const recordMagic = "\xd7dR3"

const (
	recordKeyIDSize = 8
	recordHead      = len(recordMagic) + recordKeyIDSize + chacha20poly1305.NonceSizeX
)

// RecordKeyID is the public id of a record key: the first 8 bytes of
// SHA-256("duet/v1/record-key-id" || key). It tells which key sealed a
// record, and nothing about the key.
func RecordKeyID(key *[32]byte) [recordKeyIDSize]byte {
	const label = "duet/v1/record-key-id"
	var in [len(label) + 32]byte
	copy(in[copy(in[:], label):], key[:])
	sum := sha256.Sum256(in[:])
	return [recordKeyIDSize]byte(sum[:recordKeyIDSize])
}

// recordAD is a record's associated data: its head before the nonce and
// its context, appended to buf.
func recordAD(buf []byte, head []byte, context string) []byte {
	return append(append(buf, head...), context...)
}

// RecordKey is a record key with its id (RecordKeyID) and its cipher,
// derived once, for a writer that seals a record every tick.
type RecordKey struct {
	key  [32]byte
	id   [recordKeyIDSize]byte
	aead cipher.AEAD
}

// NewRecordKey returns key with its id and cipher.
func NewRecordKey(key *[32]byte) RecordKey {
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil { // only a key of another size than 32 bytes
		panic(err)
	}
	return RecordKey{key: *key, id: RecordKeyID(key), aead: aead}
}

// SealRecord encodes v and seals it under key with a random nonce, bound to
// context (the key the record is stored under).
func SealRecord(key *[32]byte, context string, v any) ([]byte, error) {
	return SealRecordAppend(nil, key, context, v)
}

// SealRecordAppend is SealRecord appending the sealed record to dst, for a
// writer that reuses one buffer: v is encoded after the head and sealed in
// place, so a buffer of the right capacity is not reallocated.
func SealRecordAppend(dst []byte, key *[32]byte, context string, v any) ([]byte, error) {
	k := NewRecordKey(key)
	return k.SealAppend(dst, context, v)
}

// SealAppend is SealRecordAppend under k.
func (k *RecordKey) SealAppend(dst []byte, context string, v any) ([]byte, error) {
	aead := k.aead
	start := len(dst)
	dst = append(append(dst, recordMagic...), k.id[:]...)
	nonce := len(dst)
	dst = slices.Grow(dst, chacha20poly1305.NonceSizeX)[:nonce+chacha20poly1305.NonceSizeX]
	if _, err := rand.Read(dst[nonce:]); err != nil {
		return nil, err
	}
	dst, err := MarshalAppend(dst, v)
	if err != nil {
		return nil, err
	}
	// The associated data is built in dst's spare capacity after where the
	// box will end, so that a reused buffer needs no allocation for it.
	end := len(dst) + aead.Overhead()
	dst = slices.Grow(dst, aead.Overhead()+(nonce-start)+len(context))
	ad := recordAD(dst[end:end], dst[start:nonce], context)
	head := start + recordHead
	// The box replaces the encoding where it lies (exact overlap is allowed).
	return aead.Seal(dst[:head], dst[nonce:head], dst[head:], ad), nil
}

// OpenRecord opens data sealed by SealRecord under key for context and
// decodes it into v: ErrMalformed if it is too short to be a record,
// ErrOtherKey if it was sealed under another key (its key id is not key's),
// ErrAuth if it does not open with key for context.
func OpenRecord(key *[32]byte, context string, data []byte, v any) error {
	k := NewRecordKey(key)
	return k.Open(context, data, v)
}

// Open is OpenRecord under k.
func (k *RecordKey) Open(context string, data []byte, v any) error {
	if len(data) < 24+max(secretbox.Overhead, chacha20poly1305.Overhead) {
		return fmt.Errorf("%w: sealed record too short", ErrMalformed)
	}
	var cur error // why data does not open as a record of the current layout
	if len(data) >= recordHead+chacha20poly1305.Overhead && string(data[:len(recordMagic)]) == recordMagic {
		body, err := k.openCurrent(context, data)
		if err == nil {
			return Unmarshal(body, v)
		}
		cur = err
	}
	body, err := openEarlier(&k.key, data)
	if err != nil {
		if cur != nil {
			return cur
		}
		return err
	}
	return Unmarshal(body, v)
}

// openCurrent opens a record of the current layout.
func (k *RecordKey) openCurrent(context string, data []byte) ([]byte, error) {
	got := data[len(recordMagic) : len(recordMagic)+recordKeyIDSize]
	if string(got) != string(k.id[:]) {
		return nil, fmt.Errorf("%w: the record was sealed under the key with id %x, this service's key has id %x (a key rotation makes the records of the old key unreadable)", ErrOtherKey, got, k.id)
	}
	nonce := len(recordMagic) + recordKeyIDSize
	body, err := k.aead.Open(nil, data[nonce:recordHead], data[recordHead:], recordAD(nil, data[:nonce], context))
	if err != nil {
		return nil, fmt.Errorf("%w: sealed record does not open with this key for %q (altered, or stored under another key)", ErrAuth, context)
	}
	return body, nil
}

// openEarlier opens a record of an earlier release's layout: nonce || box,
// XChaCha20-Poly1305 without associated data or else NaCl secretbox.
func openEarlier(key *[32]byte, data []byte) ([]byte, error) {
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, err
	}
	body, err := aead.Open(nil, data[:24], data[24:], nil)
	if err != nil {
		var nonce [24]byte
		copy(nonce[:], data)
		var ok bool
		if body, ok = secretbox.Open(nil, data[24:], &nonce, key); !ok {
			return nil, fmt.Errorf("%w: sealed record does not open with this key", ErrAuth)
		}
	}
	return body, nil
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

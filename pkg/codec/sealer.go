package codec

import (
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Sealer seals messages to, and opens messages from, a fixed set of peer
// roles. The key shared with each peer (X25519, then HSalsa20:
// box.Precompute) is computed once in NewSealer, so sealing and
// opening cost one XChaCha20-Poly1305 pass and no scalar multiplication.
// Every message gets a fresh random 24-byte nonce from crypto/rand; with
// 192-bit nonces, random choice is safe for any realistic number of
// messages under one key.
//
// A Sealer is immutable and safe for concurrent use.
type Sealer struct {
	self Role
	aead [RolePlant + 1]cipher.AEAD // keyed with the key shared with each peer, nil if none
	pubs [RolePlant + 1]string      // each peer's public key ("": none)
	rand io.Reader                  // nonce source; crypto/rand.Reader outside tests
}

// NewSealer returns a sealer for role self holding identity id. peers maps
// roles to their nkeys curve public keys ("X..."); it may include self (the
// key must then be id's own). Messages can be sealed to, and opened from,
// exactly the roles in peers.
func NewSealer(self Role, id *Identity, peers map[Role]string) (*Sealer, error) {
	if !self.Valid() {
		return nil, fmt.Errorf("%w: sealer role %d", ErrRole, uint8(self))
	}
	if id == nil {
		return nil, fmt.Errorf("%w: no identity for %s", ErrKey, self)
	}
	s := &Sealer{self: self, rand: rand.Reader}
	for role, pubS := range peers {
		if !role.Valid() {
			return nil, fmt.Errorf("%w: peer role %d", ErrRole, uint8(role))
		}
		if role == self && pubS != id.PublicKey() {
			return nil, fmt.Errorf("%w: public key given for %s is %s, but its identity's is %s",
				ErrKey, self, pubS, id.PublicKey())
		}
		pub, err := decodePublicKey(pubS, "public key of "+role.String())
		if err != nil {
			return nil, err
		}
		if s.aead[role], err = boxAEAD(&pub, &id.priv); err != nil {
			return nil, err
		}
		s.pubs[role] = pubS
	}
	return s, nil
}

// PeerKeys is a digest of the public keys of roles as this sealer holds
// them: what was sealed to those roles opens for them as long as it does
// not change (the sensor keeps it with its set-up, to start a new one when
// a recipient's key has been rotated).
func (s *Sealer) PeerKeys(roles ...Role) [32]byte {
	h := sha256.New()
	for _, r := range roles {
		pub := ""
		if r.Valid() {
			pub = s.pubs[r]
		}
		fmt.Fprintf(h, "%s=%s\n", r, pub)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// Self is the role this sealer speaks for.
func (s *Sealer) Self() Role { return s.self }

// Seal encrypts payload to h.To and returns the envelope. h.From must be
// Self(), h.Kind must be allowed from h.From to h.To (see Allowed), h.Loop
// must be a valid loop id, and h.To must be one of the peers. h.Version is
// set to Version.
func (s *Sealer) Seal(h Header, payload []byte) ([]byte, error) {
	env, err := s.SealAppend(nil, h, payload)
	if err != nil {
		return nil, err
	}
	return env[:len(env):len(env)], nil
}

// SealAppend is Seal writing the envelope into dst's spare capacity (grown
// if too small) after its contents; it returns the extended slice. The
// plaintext is staged in the capacity past the envelope and cleared once
// sealed. A caller that publishes the envelope and passes it back (as
// dst[:0]) seals without allocating once the buffer is large enough.
func (s *Sealer) SealAppend(dst []byte, h Header, payload []byte) ([]byte, error) {
	h.Version = Version
	if h.From != s.self {
		return nil, fmt.Errorf("%w: sealing as %s with %s's sealer", ErrRole, h.From, s.self)
	}
	if err := h.check(); err != nil {
		return nil, err
	}
	aead := s.aead[h.To]
	if aead == nil {
		return nil, fmt.Errorf("%w: no public key for recipient %s", ErrKey, h.To)
	}
	if len(payload) > MaxEnvelope {
		return nil, fmt.Errorf("%w: payload of %d bytes, limit %d", ErrTooLarge, len(payload), MaxEnvelope)
	}

	// One buffer holds the envelope and, after it, the sealed plaintext
	// being staged (the plaintext and the box's encoding are offset by the
	// header's length, and an AEAD may only encrypt in place exactly); the
	// two regions do not overlap.
	var hbuf [maxHeaderLen]byte
	hdr := appendHeader(hbuf[:0], h)
	plainLen := 1 + len(hdr) + binHeaderLen(len(payload)) + len(payload)
	boxLen := plainLen + boxOverhead
	prefixLen := 1 + len(hdr) + binHeaderLen(nonceSize) + nonceSize + binHeaderLen(boxLen)
	envLen := prefixLen + boxLen
	if envLen > MaxEnvelope {
		return nil, fmt.Errorf("%w: envelope of %d bytes, limit %d", ErrTooLarge, envLen, MaxEnvelope)
	}
	base := len(dst)
	buf := slices.Grow(dst, envLen+plainLen)[:base+envLen+plainLen]

	out := append(buf[base:base:base+envLen], mpFixArray|envelopeFields)
	out = append(out, hdr...)
	out = appendBinHeader(out, nonceSize)
	nonce := (*[nonceSize]byte)(out[len(out) : len(out)+nonceSize])
	if _, err := io.ReadFull(s.rand, nonce[:]); err != nil {
		return nil, fmt.Errorf("codec: reading nonce: %w", err)
	}
	out = appendBinHeader(out[:len(out)+nonceSize], boxLen)

	plain := append(buf[base+envLen:base+envLen], mpFixArray|sealedFields)
	plain = append(plain, hdr...)
	plain = appendBinHeader(plain, len(payload))
	plain = append(plain, payload...)

	aead.Seal(out, nonce[:], plain, nil)
	clear(plain)
	return buf[:base+envLen], nil
}

// Open authenticates and decrypts an envelope addressed to Self() and returns
// its header and payload. It rejects, in this order: input over MaxEnvelope
// (ErrTooLarge), anything but the canonical encoding (ErrMalformed), another
// wire version (ErrVersion), an unknown kind (ErrKind), an unknown role or a
// route Allowed forbids (ErrRole), a bad loop id (ErrLoopID), another
// recipient (ErrRecipient), a sender without a key (ErrUnknownSender), a
// failed authentication (ErrAuth), and a sealed header that differs from the
// outer one (ErrHeader). It does not check for replays: pass the header to a
// ReplayGuard.
//
// The payload is a fresh slice that does not alias data.
func (s *Sealer) Open(data []byte) (Header, []byte, error) {
	h, payload, _, err := s.openTo(nil, data)
	return h, payload, err
}

// OpenScratch is Open decrypting into *scratch (grown if too small, and
// kept for the next call): the payload aliases *scratch and is valid only
// until the buffer is used again. For a caller that decodes each payload
// (into copies) before it opens the next message.
func (s *Sealer) OpenScratch(scratch *[]byte, data []byte) (Header, []byte, error) {
	h, payload, plain, err := s.openTo((*scratch)[:0], data)
	if cap(plain) > cap(*scratch) {
		*scratch = plain[:0]
	}
	return h, payload, err
}

// openTo opens data, decrypting into dst; it also returns the plaintext
// buffer it used.
func (s *Sealer) openTo(dst, data []byte) (Header, []byte, []byte, error) {
	e, err := parseEnvelope(data)
	if err != nil {
		return Header{}, nil, nil, err
	}
	h := e.h
	if err := h.check(); err != nil {
		return Header{}, nil, nil, err
	}
	if h.To != s.self {
		return Header{}, nil, nil, fmt.Errorf("%w: %s message for %s opened by %s", ErrRecipient, h.Kind, h.To, s.self)
	}
	aead := s.aead[h.From]
	if aead == nil {
		return Header{}, nil, nil, fmt.Errorf("%w: no public key for %s", ErrUnknownSender, h.From)
	}
	plain, err := aead.Open(dst, e.nonceIn, e.box, nil)
	if err != nil {
		return Header{}, nil, nil, fmt.Errorf("%w: %s message from %s, loop %s, tick %d", ErrAuth, h.Kind, h.From, h.Loop, h.Tick)
	}
	payload, err := openSealed(plain[len(dst):], h)
	if err != nil {
		return Header{}, nil, plain, err
	}
	return h, payload, plain, nil
}

// openSealed parses the authenticated plaintext and checks its header
// against the outer one.
func openSealed(plain []byte, outer Header) ([]byte, error) {
	r := reader{b: plain}
	if err := readVersion(&r, &sealedNames, sealedFields); err != nil {
		if errors.Is(err, ErrVersion) {
			return nil, fmt.Errorf("%w: %v", ErrHeader, err)
		}
		return nil, err
	}
	in, loop, err := readHeaderFields(&r, &sealedNames)
	if err != nil {
		return nil, err
	}
	switch {
	case in.Kind != outer.Kind:
		return nil, fmt.Errorf("%w: sealed kind %s, envelope says %s", ErrHeader, in.Kind, outer.Kind)
	case string(loop) != outer.Loop:
		return nil, fmt.Errorf("%w: sealed loop %.64q, envelope says %q", ErrHeader, loop, outer.Loop)
	case in.Tick != outer.Tick:
		return nil, fmt.Errorf("%w: sealed tick %d, envelope says %d", ErrHeader, in.Tick, outer.Tick)
	case in.From != outer.From || in.To != outer.To:
		return nil, fmt.Errorf("%w: sealed route %s->%s, envelope says %s->%s", ErrHeader, in.From, in.To, outer.From, outer.To)
	}
	payload, err := r.bin("payload", MaxEnvelope)
	if err != nil {
		return nil, err
	}
	if err := r.end("sealed header"); err != nil {
		return nil, err
	}
	return payload, nil
}

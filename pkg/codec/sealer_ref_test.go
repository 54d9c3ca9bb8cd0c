package codec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// sealReference is Seal as it was before the single-allocation rewrite,
// kept to pin the output and as the benchmarks' baseline.
func (s *Sealer) sealReference(h Header, payload []byte) ([]byte, error) {
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

	plain := make([]byte, 0, 1+maxHeaderLen+5+len(payload))
	plain = append(plain, mpFixArray|sealedFields)
	plain = appendHeader(plain, h)
	plain = appendBinHeader(plain, len(payload))
	plain = append(plain, payload...)

	var nonce [nonceSize]byte
	if _, err := io.ReadFull(s.rand, nonce[:]); err != nil {
		return nil, fmt.Errorf("codec: reading nonce: %w", err)
	}
	boxLen := len(plain) + boxOverhead
	out := make([]byte, 0, 1+maxHeaderLen+2+nonceSize+5+boxLen)
	out = append(out, mpFixArray|envelopeFields)
	out = appendHeader(out, h)
	out = appendBinHeader(out, nonceSize)
	out = append(out, nonce[:]...)
	out = appendBinHeader(out, boxLen)
	if len(out)+boxLen > MaxEnvelope {
		return nil, fmt.Errorf("%w: envelope of %d bytes, limit %d", ErrTooLarge, len(out)+boxLen, MaxEnvelope)
	}
	return aead.Seal(out, nonce[:], plain, nil), nil
}

// TestSealMatchesReference seals the same messages with the same nonces
// through Seal and sealReference: the envelopes and errors must be equal.
func TestSealMatchesReference(t *testing.T) {
	rng := rand.NewChaCha8([32]byte{11})
	largest := MaxEnvelope - (2*(1+len(appendHeader(nil, Header{Version: 1, Kind: KindMeasure, Loop: strings.Repeat("x", 64), Tick: 1 << 63, From: RoleSensor, To: RoleParty0}))) + 2 + nonceSize + 5 + 5 + boxOverhead)
	sizes := []int{0, 1, 200, 255 - 40, 255, 256, 65535 - 150, 65535, 65536, 70000, largest, largest + 1, MaxEnvelope + 1}
	loops := []string{"l", strings.Repeat("L", 31), strings.Repeat("L", 32), strings.Repeat("x", 64), "a.b"}
	sealers := make(map[Role]*Sealer)
	for _, r := range AllRoles {
		sealers[r] = testSealer(t, r)
	}
	for i, rt := range allowedRoutes() {
		for _, n := range sizes {
			if n > 70000 && i > 0 {
				continue // the largest sizes once, to keep the test fast
			}
			payload := make([]byte, n)
			rng.Read(payload)
			h := Header{Kind: rt.kind, Loop: loops[i%len(loops)], Tick: uint64(i) << (4 * (i % 16)), From: rt.from, To: rt.to}
			if n == largest || n == largest+1 {
				h.Loop, h.Tick = strings.Repeat("x", 64), 1<<63
			}
			// Fresh nonce streams: the reference reads its nonce before the
			// size check, Seal after it.
			s := sealers[rt.from]
			s.rand = rand.NewChaCha8([32]byte{byte(i), byte(n)})
			got, gotErr := s.Seal(h, payload)
			s.rand = rand.NewChaCha8([32]byte{byte(i), byte(n)})
			want, wantErr := s.sealReference(h, payload)
			if !bytes.Equal(got, want) || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Fatalf("%v, %d bytes: Seal = %d bytes, %v; reference = %d bytes, %v", h, n, len(got), gotErr, len(want), wantErr)
			}
			if gotErr == nil && cap(got) != len(got) {
				t.Errorf("%v: envelope has capacity %d beyond its %d bytes", h, cap(got), len(got))
			}
		}
	}
	// A failing nonce source.
	s := testSealer(t, RoleSensor)
	s.rand = bytes.NewReader(make([]byte, 10))
	h := Header{Kind: KindMeasure, Loop: "l", Tick: 1, From: RoleSensor, To: RoleParty0}
	if _, err := s.Seal(h, nil); !errors.Is(err, io.ErrUnexpectedEOF) || !strings.HasPrefix(err.Error(), "codec: ") {
		t.Errorf("short nonce source: %v", err)
	}
}

// TestSealAllocs pins Seal at one allocation: the envelope.
func TestSealAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not exact under the race detector (sync.Pool drops puts)")
	}
	s := testSealer(t, RoleParty0)
	payload := make([]byte, 200)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.Seal(benchHeader, payload); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("Seal allocates %v times, want 1", n)
	}
}

package codec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/box"
)

func TestSealOpenRoundTrip(t *testing.T) {
	sealers := make(map[Role]*Sealer)
	for _, r := range AllRoles {
		sealers[r] = testSealer(t, r)
	}
	rng := rand.NewChaCha8([32]byte{1})
	// Payload sizes around the bin8/bin16/bin32 boundaries.
	sizes := []int{0, 1, 200, 255, 256, 65535 - 150, 65536, 70000}
	for i, rt := range allowedRoutes() {
		for _, n := range sizes {
			payload := make([]byte, n)
			rng.Read(payload)
			h := Header{Kind: rt.kind, Loop: "loop-" + rt.kind.String(), Tick: uint64(i) << (4 * (i % 16)), From: rt.from, To: rt.to}
			env, err := sealers[rt.from].Seal(h, payload)
			if err != nil {
				t.Fatalf("Seal(%v): %v", h, err)
			}
			got, gotPayload, err := sealers[rt.to].Open(env)
			if err != nil {
				t.Fatalf("Open(Seal(%v)): %v", h, err)
			}
			h.Version = Version
			if got != h || !bytes.Equal(gotPayload, payload) {
				t.Fatalf("Open(Seal(%v)) = %v, %d bytes", h, got, len(gotPayload))
			}
			if peek, err := PeekHeader(env); err != nil || peek != h {
				t.Fatalf("PeekHeader = %v, %v, want %v", peek, err, h)
			}
		}
	}
}

// TestEnvelopeReencode checks that a parsed envelope re-encodes to its input
// byte for byte, and that a stock MessagePack decoder reads the layout.
func TestEnvelopeReencode(t *testing.T) {
	s := testSealer(t, RoleSensor)
	for _, tick := range []uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		for _, loop := range []string{"l", strings.Repeat("L", 31), strings.Repeat("L", 32), strings.Repeat("L", 64)} {
			h := Header{Kind: KindMeasure, Loop: loop, Tick: tick, From: RoleSensor, To: RoleParty1}
			env, err := s.Seal(h, []byte("payload"))
			if err != nil {
				t.Fatal(err)
			}
			e, err := parseEnvelope(env)
			if err != nil {
				t.Fatalf("parseEnvelope: %v", err)
			}
			if got := e.appendTo(nil); !bytes.Equal(got, env) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", got, env)
			}
			var fields []any
			if err := msgpack.Unmarshal(env, &fields); err != nil {
				t.Fatal(err)
			}
			if len(fields) != 8 || toU64(fields[0]) != Version || toU64(fields[1]) != uint64(KindMeasure) ||
				fields[2] != loop || toU64(fields[3]) != tick || toU64(fields[4]) != uint64(RoleSensor) ||
				toU64(fields[5]) != uint64(RoleParty1) || len(fields[6].([]byte)) != 24 ||
				!bytes.Equal(fields[7].([]byte), e.box) {
				t.Fatalf("msgpack reads %v", fields)
			}
		}
	}
}

func toU64(v any) uint64 {
	switch v := v.(type) {
	case int8:
		return uint64(v)
	case uint8:
		return uint64(v)
	case uint16:
		return uint64(v)
	case uint32:
		return uint64(v)
	case uint64:
		return v
	}
	return 1<<64 - 1
}

// TestBoxIsXChaCha20Poly1305 pins the construction against independent
// implementations: the box is XChaCha20-Poly1305 (x/crypto) under the key
// NaCl's box.Precompute derives for the two parties, with the envelope's
// nonce and no associated data; the same bytes sealed the version-1 way
// (NaCl box, XSalsa20-Poly1305) under that key do not open.
func TestBoxIsXChaCha20Poly1305(t *testing.T) {
	env, err := testSealer(t, RoleDealer).Seal(Header{Kind: KindMaterial, Loop: "x", Tick: 9, From: RoleDealer, To: RoleParty0}, []byte("material"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := parseEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	dealerPub, err := decodePublicKey(testIdentity(t, RoleDealer).PublicKey(), "dealer")
	if err != nil {
		t.Fatal(err)
	}
	var k [32]byte
	box.Precompute(&k, &dealerPub, &testIdentity(t, RoleParty0).priv)
	aead, err := chacha20poly1305.NewX(k[:])
	if err != nil {
		t.Fatal(err)
	}
	plain, err := aead.Open(nil, e.nonce[:], e.box, nil)
	if err != nil {
		t.Fatalf("XChaCha20-Poly1305 under the box key cannot open the box: %v", err)
	}
	if !bytes.HasSuffix(plain, []byte("material")) {
		t.Errorf("plaintext %q", plain)
	}
	if _, ok := box.OpenAfterPrecomputation(nil, e.box, &e.nonce, &k); ok {
		t.Error("the box also opens as XSalsa20-Poly1305")
	}
	// A version-1 box of the same plaintext is refused by Open.
	v1 := box.SealAfterPrecomputation(nil, plain, &e.nonce, &k)
	raw := appendHeader([]byte{mpFixArray | envelopeFields}, with(e.h, func(h *Header) { h.Version = 1 }))
	raw = append(appendBinHeader(raw, nonceSize), e.nonce[:]...)
	raw = append(appendBinHeader(raw, len(v1)), v1...)
	if _, _, err := testSealer(t, RoleParty0).Open(raw); !errors.Is(err, ErrVersion) {
		t.Errorf("Open(version-1 envelope) = %v, want %v", err, ErrVersion)
	}
}

// TestBrokerSeesOnlyCiphertext seals a matrix of one repeated, recognisable
// element and checks that no 8-byte window of its plaintext encoding, nor of
// the payload, appears in the envelope.
func TestBrokerSeesOnlyCiphertext(t *testing.T) {
	f := testField(t, "2^127-1")
	pattern := []byte{0xde, 0xad, 0xbe, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x13, 0x57, 0x9b, 0x1f} // < 2^127
	e, err := f.ElemFromBytes(pattern)
	if err != nil {
		t.Fatal(err)
	}
	m := randomMatrix(t, f, rand.NewChaCha8([32]byte{}), 20, 1)
	for i := range m.Data {
		m.Data[i] = e
	}
	payload, err := Marshal(MeasurePayload{Y: PutMatrix(f, m), SentUnixNano: 0x0102030405060708})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(payload, pattern) {
		t.Fatal("test is void: the payload does not contain the pattern")
	}
	env, err := testSealer(t, RoleSensor).Seal(Header{Kind: KindMeasure, Loop: "secret-loop", Tick: 1, From: RoleSensor, To: RoleParty0}, payload)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+8 <= len(payload); i++ {
		if bytes.Contains(env, payload[i:i+8]) {
			t.Fatalf("envelope contains payload bytes %x (offset %d)", payload[i:i+8], i)
		}
	}
	for i := 0; i+4 <= len(pattern); i++ {
		if bytes.Contains(env, pattern[i:i+4]) {
			t.Fatalf("envelope contains pattern bytes %x", pattern[i:i+4])
		}
	}
	// The header is public by design: it is what the broker routes on.
	if !bytes.Contains(env, []byte("secret-loop")) {
		t.Error("loop id not in the clear header")
	}
}

func TestSealNonceFresh(t *testing.T) {
	s, err := NewSealer(RoleSensor, testIdentity(t, RoleSensor), testPeers(t)) // crypto/rand
	if err != nil {
		t.Fatal(err)
	}
	h := Header{Kind: KindTick, Loop: "l", Tick: 1, From: RoleSensor, To: RoleActuator}
	a, _ := s.Seal(h, []byte("same"))
	b, _ := s.Seal(h, []byte("same"))
	ea, _ := parseEnvelope(a)
	eb, _ := parseEnvelope(b)
	if ea.nonce == eb.nonce || bytes.Equal(ea.box, eb.box) {
		t.Error("two seals of one message share a nonce or a box")
	}
}

func TestOpenPayloadDoesNotAlias(t *testing.T) {
	env, _ := testSealer(t, RoleSensor).Seal(Header{Kind: KindTick, Loop: "l", Tick: 1, From: RoleSensor, To: RoleActuator}, []byte("payload"))
	_, p, err := testSealer(t, RoleActuator).Open(env)
	if err != nil {
		t.Fatal(err)
	}
	for i := range env {
		env[i] = 0
	}
	if string(p) != "payload" {
		t.Errorf("payload changed with the input: %q", p)
	}
}

func TestSealRejects(t *testing.T) {
	s := testSealer(t, RoleSensor)
	ok := Header{Kind: KindMeasure, Loop: "l", Tick: 1, From: RoleSensor, To: RoleParty0}
	noKeys, err := NewSealer(RoleSensor, testIdentity(t, RoleSensor), map[Role]string{RoleParty1: testIdentity(t, RoleParty1).PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		s       *Sealer
		h       Header
		payload int
		want    error
	}{
		{"other sender", s, with(ok, func(h *Header) { h.From = RoleParty0; h.To = RoleParty1; h.Kind = KindMul }), 0, ErrRole},
		{"forbidden route", s, with(ok, func(h *Header) { h.Kind = KindMul }), 0, ErrRole},
		{"invalid kind", s, with(ok, func(h *Header) { h.Kind = 0 }), 0, ErrKind},
		{"invalid recipient", s, with(ok, func(h *Header) { h.To = 9 }), 0, ErrRole},
		{"no key", noKeys, ok, 0, ErrKey},
		{"bad loop", s, with(ok, func(h *Header) { h.Loop = "a.b" }), 0, ErrLoopID},
		{"empty loop", s, with(ok, func(h *Header) { h.Loop = "" }), 0, ErrLoopID},
		{"too large", s, ok, MaxEnvelope - 60, ErrTooLarge},
		{"far too large", s, ok, MaxEnvelope + 1, ErrTooLarge},
	} {
		if _, err := c.s.Seal(c.h, make([]byte, c.payload)); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// The largest payload that fits gives an envelope of exactly MaxEnvelope.
	h := with(ok, func(h *Header) { h.Loop = strings.Repeat("x", 64); h.Tick = 1 << 63 })
	over := 1 + len(appendHeader(nil, Header{Version: 1, Kind: h.Kind, Loop: h.Loop, Tick: h.Tick, From: h.From, To: h.To}))
	overhead := 2*over + 2 + nonceSize + 5 + 5 + boxOverhead
	env, err := s.Seal(h, make([]byte, MaxEnvelope-overhead))
	if err != nil || len(env) != MaxEnvelope {
		t.Errorf("largest payload: %d bytes, %v", len(env), err)
	}
	if _, _, err := testSealer(t, RoleParty0).Open(env); err != nil {
		t.Errorf("Open(largest) = %v", err)
	}
	if _, err := s.Seal(h, make([]byte, MaxEnvelope-overhead+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("one byte over: %v", err)
	}
}

func with(h Header, edit func(*Header)) Header {
	edit(&h)
	return h
}

func TestNewSealerRejects(t *testing.T) {
	id := testIdentity(t, RoleParty0)
	good := testPeers(t)
	bad := func(edit func(map[Role]string)) map[Role]string {
		m := make(map[Role]string)
		for k, v := range good {
			m[k] = v
		}
		edit(m)
		return m
	}
	for _, c := range []struct {
		name  string
		self  Role
		id    *Identity
		peers map[Role]string
		want  error
	}{
		{"invalid self", 0, id, good, ErrRole},
		{"nil identity", RoleParty0, nil, good, ErrKey},
		{"invalid peer role", RoleParty0, id, bad(func(m map[Role]string) { m[9] = good[RoleSensor] }), ErrRole},
		{"bad peer key", RoleParty0, id, bad(func(m map[Role]string) { m[RoleSensor] = "Xnope" }), ErrKey},
		{"own key mismatch", RoleParty0, id, bad(func(m map[Role]string) { m[RoleParty0] = good[RoleParty1] }), ErrKey},
	} {
		if _, err := NewSealer(c.self, c.id, c.peers); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := NewSealer(RoleParty0, id, nil); err != nil {
		t.Errorf("no peers: %v", err)
	}
}

// reseal builds an envelope with arbitrary outer and sealed headers under the
// real keys, as a sender with a bug (or an attacker holding a key) could.
func reseal(t *testing.T, outer, inner Header, payload []byte) []byte {
	t.Helper()
	from := testSealer(t, inner.From)
	plain := appendHeader([]byte{mpFixArray | sealedFields}, inner)
	plain = append(appendBinHeader(plain, len(payload)), payload...)
	var nonce [24]byte
	out := appendHeader([]byte{mpFixArray | envelopeFields}, outer)
	out = append(appendBinHeader(out, nonceSize), nonce[:]...)
	out = appendBinHeader(out, len(plain)+boxOverhead)
	return from.aead[inner.To].Seal(out, nonce[:], plain, nil)
}

// withOuter re-encodes env with an edited outer header; the box is
// untouched, so it still authenticates.
func withOuter(t *testing.T, env []byte, edit func(*Header)) []byte {
	t.Helper()
	e, err := parseEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	edit(&e.h)
	return e.appendTo(nil)
}

func TestOpenRejects(t *testing.T) {
	h := Header{Version: Version, Kind: KindMeasure, Loop: "loop-7", Tick: 1000, From: RoleSensor, To: RoleParty1}
	payload := []byte("a share of y")
	env, err := testSealer(t, RoleSensor).Seal(h, payload)
	if err != nil {
		t.Fatal(err)
	}
	p1 := testSealer(t, RoleParty1)
	if _, _, err := p1.Open(env); err != nil {
		t.Fatalf("Open(valid) = %v", err)
	}
	lonely, err := NewSealer(RoleParty1, testIdentity(t, RoleParty1), map[Role]string{RoleParty0: testIdentity(t, RoleParty0).PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := parseEnvelope(env)
	boxAt := len(env) - len(e.box)
	nonceAt := boxAt - 2 - nonceSize // the box header is bin8 here
	flip := func(i int) []byte {
		b := bytes.Clone(env)
		b[i] ^= 0x20
		return b
	}
	// raw builds an envelope from raw fields.
	raw := func(fields ...[]byte) []byte {
		return bytes.Join(fields, nil)
	}
	nonceBin := append([]byte{mpBin8, nonceSize}, e.nonce[:]...)
	boxBin := append(appendBinHeader(nil, len(e.box)), e.box...)
	u := func(v uint64) []byte { return appendUint(nil, v) }
	str := func(s string) []byte { return appendStr(nil, s) }

	cases := []struct {
		name string
		s    *Sealer
		data []byte
		want error
	}{
		{"tampered box byte", p1, flip(len(env) - 1), ErrAuth},
		{"tampered box first byte", p1, flip(boxAt), ErrAuth},
		{"tampered nonce", p1, flip(nonceAt + 5), ErrAuth},
		{"wrong recipient", testSealer(t, RoleParty0), env, ErrRecipient},
		{"outer recipient changed", p1, withOuter(t, env, func(h *Header) { h.To = RoleParty0 }), ErrRecipient},
		{"unknown sender", lonely, env, ErrUnknownSender},
		{"outer sender changed", p1, withOuter(t, env, func(h *Header) { h.From = RoleParty0; h.Kind = KindMul }), ErrAuth},
		{"outer tick changed", p1, withOuter(t, env, func(h *Header) { h.Tick++ }), ErrHeader},
		{"outer tick swapped", p1, withOuter(t, env, func(h *Header) { h.Tick = 999 }), ErrHeader},
		{"outer kind changed", p1, withOuter(t, env, func(h *Header) { h.Kind = KindSetup }), ErrHeader},
		{"outer loop changed", p1, withOuter(t, env, func(h *Header) { h.Loop = "loop-8" }), ErrHeader},
		{"sealed route differs", p1, reseal(t, h, with(h, func(h *Header) { h.To = RoleParty0 }), payload), ErrAuth},
		{"sealed version differs", p1, reseal(t, h, with(h, func(h *Header) { h.Version = 1 }), payload), ErrHeader},
		{"sealed tick differs", p1, reseal(t, h, with(h, func(h *Header) { h.Tick = 1001 }), payload), ErrHeader},
		{"sealed loop differs", p1, reseal(t, h, with(h, func(h *Header) { h.Loop = "loop-8" }), payload), ErrHeader},
		{"sealed kind differs", p1, reseal(t, h, with(h, func(h *Header) { h.Kind = KindSetup }), payload), ErrHeader},
		{"sealed layout wrong", p1, sealRaw(t, h, []byte{0x92, Version, 1}), ErrMalformed},
		{"sealed trailing byte", p1, sealRaw(t, h, append(append(appendHeader([]byte{0x97}, h), mpBin8, 0), 0)), ErrMalformed},
		{"version 1 (XSalsa20-Poly1305)", p1, withOuter(t, env, func(h *Header) { h.Version = 1 }), ErrVersion},
		{"version 3", p1, withOuter(t, env, func(h *Header) { h.Version = 3 }), ErrVersion},
		{"version 0", p1, withOuter(t, env, func(h *Header) { h.Version = 0 }), ErrVersion},
		{"version 3, other layout", p1, raw([]byte{0x93}, u(3), u(1), u(1)), ErrVersion},
		{"kind 0", p1, withOuter(t, env, func(h *Header) { h.Kind = 0 }), ErrKind},
		{"kind 14", p1, withOuter(t, env, func(h *Header) { h.Kind = 14 }), ErrKind},
		{"kind 300", p1, raw([]byte{0x98}, u(Version), u(300), str("l"), u(1), u(1), u(3), nonceBin, boxBin), ErrKind},
		{"role 0", p1, withOuter(t, env, func(h *Header) { h.From = 0 }), ErrRole},
		{"role 7", p1, withOuter(t, env, func(h *Header) { h.To = 7 }), ErrRole},
		{"role 256", p1, raw([]byte{0x98}, u(Version), u(1), str("l"), u(1), u(256), u(3), nonceBin, boxBin), ErrRole},
		{"forbidden route", p1, withOuter(t, env, func(h *Header) { h.Kind = KindTrunc }), ErrRole},
		{"oversize", p1, make([]byte, MaxEnvelope+1), ErrTooLarge},
		{"oversize valid prefix", p1, append(bytes.Clone(env), make([]byte, MaxEnvelope)...), ErrTooLarge},
		{"empty", p1, nil, ErrMalformed},
		{"not an array", p1, []byte{0xc0}, ErrMalformed},
		{"map", p1, raw([]byte{0x88}, env[1:]), ErrMalformed},
		{"trailing byte", p1, append(bytes.Clone(env), 0), ErrMalformed},
		{"7 fields", p1, raw([]byte{0x97}, env[1:boxAt-2]), ErrMalformed},
		{"9 fields", p1, raw([]byte{0x99}, env[1:], u(0)), ErrMalformed},
		{"long tick form", p1, raw([]byte{0x98}, u(Version), u(1), str("loop-7"), []byte{mpUint16, 0, 200}, u(1), u(3), nonceBin, boxBin), ErrMalformed},
		{"str8 loop", p1, raw([]byte{0x98}, u(Version), u(1), []byte{mpStr8, 6}, []byte("loop-7"), u(1000), u(1), u(3), nonceBin, boxBin), ErrMalformed},
		{"bin16 nonce", p1, raw([]byte{0x98}, u(Version), u(1), str("loop-7"), u(1000), u(1), u(3), []byte{mpBin16, 0, 24}, e.nonce[:], boxBin), ErrMalformed},
		{"short nonce", p1, raw([]byte{0x98}, u(Version), u(1), str("loop-7"), u(1000), u(1), u(3), []byte{mpBin8, 23}, e.nonce[:23], boxBin), ErrMalformed},
		{"long nonce", p1, raw([]byte{0x98}, u(Version), u(1), str("loop-7"), u(1000), u(1), u(3), []byte{mpBin8, 25}, e.nonce[:], []byte{0}, boxBin), ErrMalformed},
		{"box shorter than tag", p1, raw([]byte{0x98}, u(Version), u(1), str("loop-7"), u(1000), u(1), u(3), nonceBin, []byte{mpBin8, 15}, e.box[:15]), ErrMalformed},
		{"loop as bin", p1, raw([]byte{0x98}, u(Version), u(1), []byte{mpBin8, 6}, []byte("loop-7"), u(1000), u(1), u(3), nonceBin, boxBin), ErrMalformed},
		{"bad loop id", p1, withOuter(t, env, func(h *Header) { h.Loop = "a.b" }), ErrLoopID},
		{"wildcard loop id", p1, withOuter(t, env, func(h *Header) { h.Loop = ">" }), ErrLoopID},
		{"empty loop id", p1, withOuter(t, env, func(h *Header) { h.Loop = "" }), ErrLoopID},
		{"long loop id", p1, withOuter(t, env, func(h *Header) { h.Loop = strings.Repeat("a", 65) }), ErrLoopID},
	}
	for _, c := range cases {
		gotH, gotP, err := c.s.Open(c.data)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if gotH != (Header{}) || gotP != nil {
			t.Errorf("%s: error with a header or payload", c.name)
		}
		if Reason(err) != Reason(c.want) {
			t.Errorf("%s: Reason = %s, want %s", c.name, Reason(err), Reason(c.want))
		}
		if !strings.HasPrefix(err.Error(), "codec: ") {
			t.Errorf("%s: error %q lacks the prefix", c.name, err)
		}
	}
}

// sealRaw seals an arbitrary plaintext under h's keys.
func sealRaw(t *testing.T, h Header, plain []byte) []byte {
	t.Helper()
	var nonce [24]byte
	out := appendHeader([]byte{mpFixArray | envelopeFields}, h)
	out = append(appendBinHeader(out, nonceSize), nonce[:]...)
	out = appendBinHeader(out, len(plain)+boxOverhead)
	return testSealer(t, h.From).aead[h.To].Seal(out, nonce[:], plain, nil)
}

// TestOpenTruncated checks every strict prefix of a valid envelope.
func TestOpenTruncated(t *testing.T) {
	env, err := testSealer(t, RoleParty0).Seal(Header{Kind: KindTrunc, Loop: "t", Tick: 1 << 40, From: RoleParty0, To: RoleParty1}, bytes.Repeat([]byte{7}, 300))
	if err != nil {
		t.Fatal(err)
	}
	p1 := testSealer(t, RoleParty1)
	for n := 0; n < len(env); n++ {
		if _, _, err := p1.Open(env[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Open(first %d of %d bytes) = %v, want ErrMalformed", n, len(env), err)
		}
	}
}

// TestOpenEveryBitFlip flips each bit of an envelope: every result must be
// rejected, and never with a panic.
func TestOpenEveryBitFlip(t *testing.T) {
	h := Header{Kind: KindOutput, Loop: "flip", Tick: 300, From: RoleParty0, To: RoleActuator}
	env, err := testSealer(t, RoleParty0).Seal(h, []byte("u share"))
	if err != nil {
		t.Fatal(err)
	}
	act := testSealer(t, RoleActuator)
	for i := range env {
		for bit := 0; bit < 8; bit++ {
			b := bytes.Clone(env)
			b[i] ^= 1 << bit
			if gotH, _, err := act.Open(b); err == nil {
				t.Fatalf("byte %d bit %d: accepted as %v", i, bit, gotH)
			}
		}
	}
}

func TestHeaderString(t *testing.T) {
	h := Header{Kind: KindMul, Loop: "l1", Tick: 5, From: RoleParty0, To: RoleParty1}
	if got, want := h.String(), "mul loop=l1 tick=5 party0->party1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !reflect.DeepEqual(h, with(h, func(*Header) {})) {
		t.Error("with changed the header")
	}
}

// PeerKeys changes when the key of a role it covers changes, and only then:
// the sensor starts a new set-up when a recipient's key was rotated, and
// resumes it when only another role's (the plant's) was.
func TestPeerKeys(t *testing.T) {
	roles := []Role{RoleParty0, RoleParty1, RoleActuator, RoleDealer}
	sealer := func(peers map[Role]string) *Sealer {
		t.Helper()
		s, err := NewSealer(RoleSensor, testIdentity(t, RoleSensor), peers)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := sealer(testPeers(t)).PeerKeys(roles...)
	if again := sealer(testPeers(t)).PeerKeys(roles...); again != base {
		t.Fatal("the same keys give another digest")
	}
	other, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Role{RoleParty1, RolePlant} {
		peers := testPeers(t)
		peers[r] = other.PublicKey()
		if changed := sealer(peers).PeerKeys(roles...) != base; changed != (r != RolePlant) {
			t.Errorf("%s's key rotated: digest changed %v, want %v", r, changed, r != RolePlant)
		}
	}
	swapped := testPeers(t)
	swapped[RoleParty0], swapped[RoleParty1] = swapped[RoleParty1], swapped[RoleParty0]
	if sealer(swapped).PeerKeys(roles...) == base {
		t.Error("swapping party0's and party1's keys leaves the digest unchanged")
	}
}

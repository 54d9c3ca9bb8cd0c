package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestBrokerCarriesOnlyCiphertext: everything the broker carries while the
// loop runs (with the two-hop tick, and P0's items sealed rather than
// seed-compressed) is sealed to its recipient: each envelope on a duet
// subject, in a batch, in an offline item or in a set-up record opens for
// the role it is addressed to, and none of the plaintext it opens to, nor
// any 16 bytes of it, appears in what the broker saw (a message's body or
// its headers). The parties' state records and the sensor's resume record,
// written through the broker to JetStream KV, open under their writer's
// record key (and a state record's plaintext is not in what the broker
// saw). Every kind of message the loop sends must be among them, and a
// message on a subject the test does not know fails it, so that a new
// message sent in clear cannot pass unseen. Each envelope, re-addressed to
// every other role, fails to authenticate for that role: no role (P1 with
// P0's items or shares, say) can read what is sealed to another, whatever
// the broker does with the header. What the test skips as carrying no duet
// data (JetStream's API, acknowledgements, flow control, records read
// back), body and headers, holds no 16 bytes of any plaintext opened
// either. (pkg/codec's
// TestBrokerSeesOnlyCiphertext checks one envelope; this checks the
// traffic.)
func TestBrokerCarriesOnlyCiphertext(t *testing.T) {
	cs, ps := pendulum(t)
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: false, Fast: true, TwoHop: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1}, 50)
	sealers := map[codec.Role]*codec.Sealer{}
	for _, r := range codec.AllRoles {
		s, err := codec.NewSealer(r, c.Identity(r), c.PublicKeys())
		if err != nil {
			t.Fatal(err)
		}
		sealers[r] = s
	}
	tap, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	seen := make(chan *nats.Msg, 1<<16)
	sub, err := tap.ChanSubscribe(">", seen)
	if err != nil {
		t.Fatal(err)
	}
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.RunTicks(context.Background(), 60); err != nil {
		t.Fatal(err)
	}
	kinds := map[codec.Kind]int{}
	// scan fails if 16 bytes of body are in raw.
	scan := func(raw, body []byte, what string) error {
		for i := 0; i+16 <= len(body); i++ {
			if bytes.Count(body[i:i+16], []byte{0}) == 16 {
				continue // a cleared public field, or zero padding
			}
			if bytes.Contains(raw, body[i:i+16]) {
				return fmt.Errorf("%s: the broker saw 16 bytes of the plaintext in clear, at offset %d", what, i)
			}
		}
		return nil
	}
	// plains are the plaintexts opened (their public bytes cleared),
	// checked at the end against what the test skipped; tried counts, by
	// kind, the other roles whose keys were tried on an envelope.
	var plains [][]byte
	tried := map[codec.Kind]int{}
	// public are bytes of the plaintext the broker may see (an item's
	// nonce, its serial, travels in clear in the item message; a set-up's
	// stream, subject and modulus name are public).
	opened := func(raw, env []byte, what string, public ...[]byte) error {
		h, err := codec.PeekHeader(env)
		if err != nil {
			return fmt.Errorf("%s: not an envelope: %w", what, err)
		}
		s, ok := sealers[h.To]
		if !ok {
			return fmt.Errorf("%s: addressed to %s", what, h.To)
		}
		_, body, err := s.Open(env)
		if err != nil {
			return fmt.Errorf("%s: %s does not open it: %w", what, h.To, err)
		}
		kinds[h.Kind]++
		body = bytes.Clone(body)
		// A set-up's public fields: its stream, its subject and its
		// modulus's name are in the JetStream API's JSON too.
		switch h.Kind {
		case codec.KindSetup:
			var p codec.SetupPayload
			if err := codec.Unmarshal(body, &p); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			public = append(public, []byte(p.Stream), []byte(p.Params.Modulus))
		case codec.KindDealerSetup:
			var p codec.DealerSetupPayload
			if err := codec.Unmarshal(body, &p); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			public = append(public, []byte(p.Stream), []byte(p.Subject), []byte(p.Params.Modulus))
		}
		for _, p := range public {
			if i := bytes.Index(body, p); i >= 0 {
				clear(body[i : i+len(p)])
			}
		}
		for r, other := range sealers {
			if r == h.To {
				continue
			}
			_, _, err := other.Open(readdressed(t, env, r))
			switch {
			case errors.Is(err, codec.ErrAuth):
				tried[h.Kind]++
			case errors.Is(err, codec.ErrRole) && !codec.Allowed(h.Kind, h.From, r):
				// refused before decrypting: the kind never goes to r
			default:
				return fmt.Errorf("%s (%s to %s): re-addressed to %s, it opens with %v; want codec.ErrAuth", what, h.Kind, h.To, r, err)
			}
		}
		plains = append(plains, body)
		return scan(raw, body, fmt.Sprintf("%s (%s to %s)", what, h.Kind, h.To))
	}
	check := func(raw, env []byte, what string, public ...[]byte) {
		t.Helper()
		if err := opened(raw, env, what, public...); err != nil {
			t.Fatal(err)
		}
	}
	// The check itself: a payload carried in clear beside its envelope is
	// caught.
	payload, err := codec.Marshal(codec.TickPayload{SentUnixNano: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	payload = append(payload, bytes.Repeat([]byte{0x5a}, 32)...)
	env, err := sealers[codec.RoleSensor].Seal(codec.Header{Kind: codec.KindTick, Loop: "pendulum", Tick: 1, From: codec.RoleSensor, To: codec.RoleActuator}, payload)
	if err != nil {
		t.Fatal(err)
	}
	if opened(append(bytes.Clone(env), payload...), env, "a payload in clear") == nil {
		t.Fatal("the check is void: a payload carried in clear passed it")
	}
	// ... and a share another role opens: a party1 given party0's key (one
	// key for both parties) reads the measurement share sealed to party0.
	keys1 := maps.Clone(c.PublicKeys())
	keys1[codec.RoleParty1] = keys1[codec.RoleParty0]
	shared, err := codec.NewSealer(codec.RoleParty1, c.Identity(codec.RoleParty0), keys1)
	if err != nil {
		t.Fatal(err)
	}
	share, err := sealers[codec.RoleSensor].Seal(codec.Header{Kind: codec.KindMeasure, Loop: "pendulum", Tick: 1, From: codec.RoleSensor, To: codec.RoleParty0}, payload)
	if err != nil {
		t.Fatal(err)
	}
	real1 := sealers[codec.RoleParty1]
	sealers[codec.RoleParty1] = shared
	if err := opened(share, share, "a share two parties open"); err == nil || !strings.Contains(err.Error(), "re-addressed to party1") {
		t.Fatalf("the check is void: a share the other party opens passed it (%v)", err)
	}
	sealers[codec.RoleParty1] = real1
	kinds, plains, tried = map[codec.Kind]int{}, nil, map[codec.Kind]int{}
	// The set-up records were written before the tap: read them back.
	js, err := jetstream.New(tap)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []codec.Role{codec.RoleParty0, codec.RoleParty1, codec.RoleActuator, codec.RoleDealer} {
		kv, err := js.KeyValue(context.Background(), bus.SetupBucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(context.Background(), bus.SetupKey("pendulum", r))
		if err != nil {
			t.Fatal(err)
		}
		check(e.Value(), e.Value(), "the set-up record for "+r.String())
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	var keys [2][32]byte
	for i := range keys {
		if keys[i], err = party.StateKey(c.Identity(codec.PartyRole(i))); err != nil {
			t.Fatal(err)
		}
	}
	sensorKey, err := sensor.StateKey(c.Identity(codec.RoleSensor))
	if err != nil {
		t.Fatal(err)
	}
	stateRecords := [2]int{}
	// bySensor tells whether data is a record sealed under the sensor's
	// record key for key (the sensor's resume record): decoding it into no
	// fields fails, but only after it authenticated (a record that does not
	// open fails with ErrAuth or ErrOtherKey, one too short to be a record
	// before that).
	bySensor := func(key string, data []byte) error {
		err := codec.OpenRecord(&sensorKey, key, data, &struct{}{})
		if errors.Is(err, codec.ErrAuth) || errors.Is(err, codec.ErrOtherKey) || len(data) < 64 {
			return fmt.Errorf("not sealed under the sensor's record key: %v", err)
		}
		return nil
	}
	// classify checks one message the broker carried, or says it carries
	// no duet data (the JetStream API's JSON, acknowledgements, flow
	// control): skipped.
	var skippedRaw []byte // what classify skipped, body and headers
	classify := func(m *nats.Msg) (skipped bool, err error) {
		what := m.Subject
		// What the broker saw: the body and every header.
		raw := bytes.Clone(m.Data)
		for k, vs := range m.Header {
			raw = append(raw, k...)
			for _, v := range vs {
				raw = append(raw, v...)
			}
		}
		defer func() {
			if skipped {
				skippedRaw = append(skippedRaw, raw...)
			}
		}()
		switch {
		case len(m.Data) == 0 && (strings.HasPrefix(m.Subject, "$JS.") || strings.HasPrefix(m.Subject, "$KV.") || strings.HasPrefix(m.Subject, "_INBOX")):
			return true, nil // flow control, heartbeats, KV deletions (an empty body elsewhere is checked as any other)
		case strings.HasPrefix(m.Reply, "$JS.ACK."), strings.HasPrefix(m.Subject, bus.Prefix+".offline."):
			// An offline stream message: a dealer's publish, or its
			// delivery to a party.
			items, err := codec.PeekItems(m.Data, codec.MaxItemsPerMsg)
			if err != nil {
				return false, fmt.Errorf("%s: not an item message: %w", what, err)
			}
			for _, it := range items {
				for _, env := range [][]byte{it.P0, it.P1} {
					if err := opened(raw, env, what+" (an offline item)", it.Nonce[:]); err != nil {
						return false, err
					}
				}
			}
			return false, nil
		case m.Subject == bus.BatchSubject(0) || m.Subject == bus.BatchSubject(1):
			var first error
			if err := codec.SplitBatch(m.Data, func(env []byte) {
				if err := opened(raw, env, what); err != nil && first == nil {
					first = err
				}
			}); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			return false, first
		case strings.HasPrefix(m.Subject, bus.Prefix+"."):
			return false, opened(raw, m.Data, what)
		case strings.HasPrefix(m.Subject, "$KV."):
			bucket, key, _ := strings.Cut(strings.TrimPrefix(m.Subject, "$KV."), ".")
			for i := range keys {
				if bucket == party.StateBucket(i) {
					var rec codec.StateRecord
					if err := codec.OpenRecord(&keys[i], key, m.Data, &rec); err != nil {
						return false, fmt.Errorf("%s: party%d's state record does not open under its key: %w", what, i, err)
					}
					body, err := codec.Marshal(&rec)
					if err != nil {
						return false, err
					}
					stateRecords[i]++
					return false, scan(raw, body, what+" (a state record)")
				}
			}
			if bucket != bus.SetupBucket {
				return false, fmt.Errorf("%s: a write to an unknown bucket", what)
			}
			if _, err := codec.PeekHeader(m.Data); err == nil {
				return false, opened(raw, m.Data, what) // a set-up record
			}
			// The sensor's resume record: sealed under the sensor's record
			// key, which the decoding into no fields proves (a record that
			// does not open fails before it is decoded).
			if err := bySensor(key, m.Data); err != nil {
				return false, fmt.Errorf("%s: not a set-up record, nor the sensor's resume record: %w", what, err)
			}
			return false, nil
		case strings.HasPrefix(m.Subject, "$JS.API.") || strings.HasPrefix(m.Subject, "$JS.EVENT.") || strings.HasPrefix(m.Subject, "_INBOX"):
			if bytes.HasPrefix(m.Data, []byte("{")) {
				return true, nil // JetStream API requests, replies and advisories (JSON)
			}
			if _, err := codec.PeekHeader(m.Data); err == nil {
				return false, opened(raw, m.Data, what) // the plant's replies to the sensor, a record read back
			}
			// A record read back (a party's state, the sensor's resume
			// record), bound to its key, which the delivery does not name:
			// this loop's.
			for i := range keys {
				var rec codec.StateRecord
				if codec.OpenRecord(&keys[i], "pendulum", m.Data, &rec) == nil {
					return true, nil
				}
			}
			if bySensor(bus.SetupKey("pendulum", codec.RoleSensor), m.Data) == nil {
				return true, nil
			}
			return false, fmt.Errorf("%s: %d bytes that are no JSON, envelope or record", what, len(m.Data))
		}
		return false, fmt.Errorf("%s: a message on a subject the test does not know (%d bytes)", what, len(m.Data))
	}
	// The check itself: a state record in clear, a subject the test does
	// not know, and a payload carried in a header are caught.
	plain, err := codec.Marshal(&codec.StateRecord{Epoch: 1, Version: 2, Tick: 3})
	if err != nil {
		t.Fatal(err)
	}
	header := nats.Header{}
	header.Set("X", string(payload))
	for _, m := range []*nats.Msg{
		{Subject: "$KV." + party.StateBucket(0) + ".pendulum", Data: plain},
		{Subject: "$KV.other.pendulum", Data: plain},
		{Subject: "elsewhere.pendulum", Data: []byte("x")},
		{Subject: "elsewhere.pendulum", Header: header}, // an empty body, the payload in a header
		{Subject: bus.Prefix + ".pendulum.tick", Header: header},
		{Subject: bus.Prefix + ".pendulum.tick", Data: env, Header: header},
	} {
		if _, err := classify(m); err == nil {
			t.Fatalf("the check is void: %s passed it", m.Subject)
		}
	}
	// ... and a payload in the header of a message with an empty body,
	// which classify skips, is caught at the end.
	skippedRaw = nil
	if skip, err := classify(&nats.Msg{Subject: "$JS.FC.pendulum", Header: header}); !skip || err != nil {
		t.Fatalf("an empty flow-control message: skipped %v, %v; want skipped", skip, err)
	}
	if err := leak(skippedRaw, [][]byte{payload}); err == nil {
		t.Fatal("the check is void: a payload in the header of a skipped message passed it")
	}
	stateRecords, skippedRaw = [2]int{}, nil
	skipped := 0
	for len(seen) > 0 {
		skip, err := classify(<-seen)
		if err != nil {
			t.Fatal(err)
		}
		if skip {
			skipped++
		}
	}
	if err := leak(skippedRaw, plains); err != nil {
		t.Fatal(err)
	}
	for i, n := range stateRecords {
		if n == 0 {
			t.Errorf("no state record of party%d was seen: the test did not cover them", i)
		}
	}
	for _, k := range []codec.Kind{codec.KindSetup, codec.KindDealerSetup, codec.KindMaterial, codec.KindMeasure, codec.KindMeasureMasked,
		codec.KindMaskY, codec.KindPreT, codec.KindMul, codec.KindTrunc, codec.KindOutput, codec.KindTick, codec.KindPlantY, codec.KindPlantU} {
		if kinds[k] == 0 {
			t.Errorf("no %s message was seen: the test did not cover it", k)
		}
	}
	// The other party's key was tried on each party's shares: the
	// measurement's, the items' and the set-up's.
	for _, k := range []codec.Kind{codec.KindMeasure, codec.KindMaterial, codec.KindSetup} {
		if tried[k] == 0 {
			t.Errorf("no other role's key was tried on a %s message", k)
		}
	}
	t.Logf("opened %v and %v state records; other roles' keys tried, by kind, %v; %d messages of the JetStream API, acknowledgements and state records read back skipped", kinds, stateRecords, tried, skipped)
}

// readdressed is env with its To field set to role r; the sealed header and
// the box are left as they are.
func readdressed(t *testing.T, env []byte, r codec.Role) []byte {
	t.Helper()
	var fields []any
	if err := msgpack.Unmarshal(env, &fields); err != nil || len(fields) != 8 {
		t.Fatalf("an envelope of %d fields: %v", len(fields), err)
	}
	box, _ := fields[7].([]byte)
	boxHeader := 2
	if len(box) > 0xff {
		boxHeader = 3
	}
	if len(box) > 0xffff {
		boxHeader = 5
	}
	to := len(env) - len(box) - boxHeader - 2 - 24 - 1 // before the nonce's bin 8 header and its 24 bytes
	if env[to+1] != 0xc4 || env[to+2] != 24 || env[to] >= 0x80 {
		t.Fatalf("no To field before the nonce at byte %d of %x", to, env)
	}
	out := bytes.Clone(env)
	out[to] = byte(r)
	var again []any
	if err := msgpack.Unmarshal(out, &again); err != nil || len(again) != 8 || fmt.Sprint(again[5]) != fmt.Sprint(uint8(r)) {
		t.Fatalf("re-addressed to %d: %v (%v)", r, again, err)
	}
	return out
}

// leak says whether 16 bytes of any of plains are in raw.
func leak(raw []byte, plains [][]byte) error {
	windows := map[[16]byte]int{}
	for i, p := range plains {
		for j := 0; j+16 <= len(p); j++ {
			if w := [16]byte(p[j : j+16]); w != ([16]byte{}) {
				windows[w] = i
			}
		}
	}
	for j := 0; j+16 <= len(raw); j++ {
		if i, ok := windows[[16]byte(raw[j:j+16])]; ok {
			return fmt.Errorf("what the test skipped holds 16 bytes of plaintext %d (of %d) at byte %d", i, len(plains), j)
		}
	}
	return nil
}

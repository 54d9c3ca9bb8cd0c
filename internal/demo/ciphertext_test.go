package demo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// TestBrokerCarriesOnlyCiphertext: everything the broker carries while the
// loop runs (with the two-hop tick, and P0's items sealed rather than
// seed-compressed) is sealed to its recipient: each envelope on a duet
// subject, in a batch, in an offline item or in a set-up record opens for
// the role it is addressed to, and none of the plaintext it opens to, nor
// any 16 bytes of it, appears in what the broker saw. Every kind of message
// the loop sends must be among them, so that a new message sent in clear
// cannot pass unseen. (pkg/codec's TestBrokerSeesOnlyCiphertext checks one
// envelope; this checks the traffic.)
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
	// public are bytes of the plaintext the broker may see (an item's
	// nonce, its serial, travels in clear in the item message).
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
		for _, p := range public {
			if i := bytes.Index(body, p); i >= 0 {
				clear(body[i : i+len(p)])
			}
		}
		for i := 0; i+16 <= len(body); i += 8 {
			if bytes.Count(body[i:i+16], []byte{0}) == 16 {
				continue // a cleared public field, or zero padding
			}
			if bytes.Contains(raw, body[i:i+16]) {
				return fmt.Errorf("%s (%s to %s): the broker saw 16 bytes of the plaintext in clear, at offset %d", what, h.Kind, h.To, i)
			}
		}
		return nil
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
	kinds = map[codec.Kind]int{}
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
	skipped := 0
	for len(seen) > 0 {
		m := <-seen
		what := m.Subject
		switch {
		case len(m.Data) == 0:
		case strings.HasPrefix(m.Reply, "$JS.ACK."), strings.HasPrefix(m.Subject, bus.Prefix+".offline."):
			// An offline stream message: a dealer's publish, or its
			// delivery to a party.
			items, err := codec.PeekItems(m.Data, codec.MaxItemsPerMsg)
			if err != nil {
				t.Fatalf("%s: not an item message: %v", what, err)
			}
			for _, it := range items {
				for _, env := range [][]byte{it.P0, it.P1} {
					check(m.Data, env, what+" (an offline item)", it.Nonce[:])
				}
			}
		case m.Subject == bus.BatchSubject(0) || m.Subject == bus.BatchSubject(1):
			if err := codec.SplitBatch(m.Data, func(env []byte) { check(m.Data, env, what) }); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case strings.HasPrefix(m.Subject, bus.Prefix+"."):
			check(m.Data, m.Data, what)
		case strings.HasPrefix(m.Subject, "_INBOX") && bytes.HasPrefix(m.Data, []byte("{")):
			skipped++ // JetStream API replies (JSON)
		case strings.HasPrefix(m.Subject, "_INBOX"):
			if _, err := codec.PeekHeader(m.Data); err == nil {
				check(m.Data, m.Data, what) // the plant's replies to the sensor, a record read back
			} else {
				skipped++ // a state record read back (sealed with the party's own key), flow control
			}
		default:
			skipped++ // $JS.API requests, $KV state writes (sealed records), acknowledgements
		}
	}
	for _, k := range []codec.Kind{codec.KindSetup, codec.KindDealerSetup, codec.KindMaterial, codec.KindMeasure, codec.KindMeasureMasked,
		codec.KindMaskY, codec.KindPreT, codec.KindMul, codec.KindTrunc, codec.KindOutput, codec.KindTick, codec.KindPlantY, codec.KindPlantU} {
		if kinds[k] == 0 {
			t.Errorf("no %s message was seen: the test did not cover it", k)
		}
	}
	t.Logf("opened %v; %d messages of the JetStream API and the parties' own state records not envelopes", kinds, skipped)
}

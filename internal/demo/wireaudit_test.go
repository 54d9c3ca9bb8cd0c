package demo

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// wireAudit watches, as the broker carries them, every Protocol 1 opening
// a party sends the other (KindMul, and KindPreT with the two-hop tick) and
// checks that each entry of an item's mask opens one value only: an entry
// of T = x - V (or S = Φ - U) sent twice with different values would give
// the other party the difference of the two values. Cluster.Audit sees the
// multiplications the parties complete; this also sees the openings of
// ticks given up (abandoned, rolled back, re-run in three hops after a
// pre-opening), where an item taken again would show.
type wireAudit struct {
	t   *testing.T
	sub *nats.Subscription
	nc  *nats.Conn
	// sealers open what is sealed to each party.
	sealers [2]*codec.Sealer

	mu       sync.Mutex
	opened   map[auditKey]string // each mask entry's opening
	messages map[codec.Kind]int  // openings seen, by kind
	repeated int                 // entries seen again, with the same value
	bad      []string            // entries opened to two values
	errs     []string            // messages that would not open or decode
}

// auditKey names one entry of one item's mask as one party opened it. Item
// ids are the offline stream's sequences: a test that ran two set-up epochs
// (a new stream) would need the epoch in the key too.
type auditKey struct {
	from  codec.Role
	loop  string
	item  uint64
	which byte // 'T' or 'S'
	entry int
}

// startWireAudit subscribes to the parties' exchange, direct and batched.
func startWireAudit(t *testing.T, c *Cluster) *wireAudit {
	t.Helper()
	a := &wireAudit{t: t, opened: map[auditKey]string{}, messages: map[codec.Kind]int{}}
	for i, r := range []codec.Role{codec.RoleParty0, codec.RoleParty1} {
		s, err := codec.NewSealer(r, c.Identity(r), c.PublicKeys())
		if err != nil {
			t.Fatal(err)
		}
		a.sealers[i] = s
	}
	// Reconnecting at once after a restart of the server (as the chaos test
	// makes): the services reconnect within 250 ms, and what they send
	// after a restart is what the audit is for.
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a.nc = nc
	a.sub, err = nc.Subscribe(bus.Prefix+".>", a.onMsg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return a
}

func (a *wireAudit) onMsg(m *nats.Msg) {
	if m.Subject == bus.BatchSubject(0) || m.Subject == bus.BatchSubject(1) {
		if err := codec.SplitBatch(m.Data, a.onEnvelope); err != nil {
			a.fail(fmt.Sprintf("%s: %v", m.Subject, err))
		}
		return
	}
	a.onEnvelope(m.Data)
}

func (a *wireAudit) fail(s string) {
	a.mu.Lock()
	a.errs = append(a.errs, s)
	a.mu.Unlock()
}

func (a *wireAudit) onEnvelope(env []byte) {
	h, err := codec.PeekHeader(env)
	if err != nil || (h.Kind != codec.KindMul && h.Kind != codec.KindPreT) {
		return // not an envelope (an offline item message), or not an opening
	}
	to := 0
	if h.To == codec.RoleParty1 {
		to = 1
	}
	_, body, err := a.sealers[to].Open(env)
	if err != nil {
		a.fail(fmt.Sprintf("%s: %v", h, err))
		return
	}
	var p codec.MulPayload
	if err := codec.Unmarshal(body, &p); err != nil {
		a.fail(fmt.Sprintf("%s: %v", h, err))
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.messages[h.Kind]++
	for _, m := range []struct {
		which byte
		w     codec.MatrixWire
	}{{'T', p.T}, {'S', p.S}} {
		n := int(m.w.Rows) * int(m.w.Cols)
		if n == 0 {
			continue
		}
		if len(m.w.Data)%n != 0 {
			a.errs = append(a.errs, fmt.Sprintf("%s: %c of %d bytes for %d entries", h, m.which, len(m.w.Data), n))
			continue
		}
		bl := len(m.w.Data) / n
		for e := range n {
			k := auditKey{from: h.From, loop: h.Loop, item: p.Item, which: m.which, entry: e}
			v := string(m.w.Data[e*bl : (e+1)*bl])
			switch old, ok := a.opened[k]; {
			case !ok:
				a.opened[k] = v
			case old == v:
				a.repeated++
			default:
				a.bad = append(a.bad, fmt.Sprintf("%s: item %#x, %c[%d] opened to a second value", h, p.Item, m.which, e))
			}
		}
	}
}

// check fails the test if a mask entry was opened to two values, or an
// opening would not open; it wants openings of each kind in kinds.
func (a *wireAudit) check(kinds ...codec.Kind) {
	a.t.Helper()
	// Every message the server has sent the tap so far, handled before the
	// subscription closes (Unsubscribe drops what is queued).
	if err := a.nc.Flush(); err != nil {
		a.t.Error(err)
	}
	handled := make(chan struct{})
	if err := a.nc.Barrier(func() { close(handled) }); err != nil {
		a.t.Error(err)
	} else {
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			a.t.Error("wire audit: the tap's queued messages not handled in 30 s")
		}
	}
	if err := a.sub.Unsubscribe(); err != nil {
		a.t.Error(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) > 0 {
		a.t.Errorf("wire audit: %d mask entries opened to two values: %s", len(a.bad), strings.Join(a.bad[:min(len(a.bad), 5)], "; "))
	}
	if len(a.errs) > 0 {
		a.t.Errorf("wire audit: %d openings would not open: %s", len(a.errs), strings.Join(a.errs[:min(len(a.errs), 5)], "; "))
	}
	for _, k := range kinds {
		if a.messages[k] == 0 {
			a.t.Errorf("wire audit: no %s message seen", k)
		}
	}
	a.t.Logf("wire audit: %v openings, %d mask entries, %d seen again with the same value", a.messages, len(a.opened), a.repeated)
}

// The audit itself: an item's mask entry opened to a second value (as a
// party taking an item again would send) is caught, direct and in a batch,
// in T and in S; the same opening sent again (a resent Mul, or a
// pre-opening's state rows in a three-hop Mul after it) is not.
func TestWireAuditCatchesASecondOpening(t *testing.T) {
	sealers := testkeys.Sealers(t)
	a := &wireAudit{t: t, opened: map[auditKey]string{}, messages: map[codec.Kind]int{}}
	a.sealers = [2]*codec.Sealer{sealers[codec.RoleParty0], sealers[codec.RoleParty1]}
	f, err := mpc.ParseModulus(mpc.PresetM127)
	if err != nil {
		t.Fatal(err)
	}
	column := func(vals ...uint64) mpc.Matrix {
		m := mpc.NewMatrix(len(vals), 1)
		for i, v := range vals {
			m.Data[i] = f.FromUint64(v)
		}
		return m
	}
	s := column(7, 8)
	opening := func(kind codec.Kind, tick, item uint64, vals ...uint64) []byte {
		body, err := codec.Marshal(codec.MulPayload{Item: item, T: codec.PutMatrix(f, column(vals...)), S: codec.PutMatrix(f, s)})
		if err != nil {
			t.Fatal(err)
		}
		env, err := sealers[codec.RoleParty0].Seal(codec.Header{Kind: kind, Loop: "l", Tick: tick, From: codec.RoleParty0, To: codec.RoleParty1}, body)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	a.onMsg(&nats.Msg{Subject: bus.ExchangeSubject("l", 1), Data: opening(codec.KindPreT, 1, 5, 10, 11)})
	a.onMsg(&nats.Msg{Subject: bus.ExchangeSubject("l", 1), Data: opening(codec.KindMul, 2, 5, 10, 11, 12)})
	a.onMsg(&nats.Msg{Subject: bus.ExchangeSubject("l", 1), Data: opening(codec.KindMul, 2, 5, 10, 11, 12)})
	if len(a.bad) != 0 || len(a.errs) != 0 || a.repeated != 9 {
		t.Fatalf("one opening sent again: %v, %v, %d repeated; want nothing caught and 9 entries repeated", a.bad, a.errs, a.repeated)
	}
	a.onMsg(&nats.Msg{Subject: bus.ExchangeSubject("l", 1), Data: opening(codec.KindMul, 3, 5, 10, 11, 13)})
	if len(a.bad) != 1 || !strings.Contains(a.bad[0], "T[2]") {
		t.Fatalf("item 5 opened again, entry 2 to another value: caught %v, want T[2]", a.bad)
	}
	batch := codec.AppendBatch(nil, opening(codec.KindMul, 4, 5, 10, 99, 12))
	a.onMsg(&nats.Msg{Subject: bus.BatchSubject(1), Data: batch})
	if len(a.bad) != 2 || !strings.Contains(a.bad[1], "T[1]") {
		t.Fatalf("item 5 opened again in a batch, entry 1 to another value: caught %v, want T[1]", a.bad)
	}
	s = column(7, 9)
	a.onMsg(&nats.Msg{Subject: bus.ExchangeSubject("l", 1), Data: opening(codec.KindPreT, 5, 5, 10, 11)})
	if len(a.bad) != 3 || !strings.Contains(a.bad[2], "S[1]") {
		t.Fatalf("item 5's S opened to another value: caught %v, want S[1]", a.bad)
	}
}

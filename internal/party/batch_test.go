package party

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
)

func testSealer(t *testing.T, r codec.Role) *codec.Sealer {
	t.Helper()
	ids := map[codec.Role]*codec.Identity{}
	peers := map[codec.Role]string{}
	for _, role := range codec.AllRoles {
		raw := sha256.Sum256([]byte("duet party test " + role.String()))
		seed, err := nkeys.EncodeSeed(nkeys.PrefixByteCurve, raw[:])
		if err != nil {
			t.Fatal(err)
		}
		if ids[role], err = codec.ParseIdentity(seed); err != nil {
			t.Fatal(err)
		}
		peers[role] = ids[role].PublicKey()
	}
	s, err := codec.NewSealer(r, ids[r], peers)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// collect records what arrives on subject.
func collect(t *testing.T, nc *nats.Conn, subject string) func() [][]byte {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe(subject, ch); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() [][]byte {
		nc.Flush()
		var out [][]byte
		for {
			select {
			case m := <-ch:
				out = append(out, m.Data)
			case <-time.After(100 * time.Millisecond):
				return out
			}
		}
	}
}

// The batching rules: held while the dispatcher has more waiting, sent when
// it has none, when full, or before anything else the party publishes (so
// P0's Protocol 2 message still leaves before its output share); with
// nothing waiting a message goes out alone on its loop's subject.
func TestPeerBatching(t *testing.T) {
	nc := natstest.Conn(t)
	m := metrics.New("party0")
	s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a"}, Metrics: m, PeerBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	batches := collect(t, nc, bus.BatchSubject(1))
	direct := collect(t, nc, bus.ExchangeSubject("a", 1))
	outs := collect(t, nc, bus.OutputSubject("a"))
	env := func(i int) []byte { return []byte(fmt.Sprintf("envelope-%d", i)) }
	split := func(b []byte) (envs []string) {
		if err := codec.SplitBatch(b, func(e []byte) { envs = append(envs, string(e)) }); err != nil {
			t.Fatal(err)
		}
		return
	}

	// Nothing waiting: alone, on the loop's subject.
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(0)))
	if got := direct(); len(got) != 1 || !bytes.Equal(got[0], env(0)) {
		t.Fatalf("with nothing waiting: %q on the loop's subject, want envelope-0 alone", got)
	}
	// More waiting: held; the dispatcher's queue running empty sends them.
	s.hold(true)
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(1)))
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(2)))
	if got := batches(); len(got) != 0 {
		t.Fatalf("sent while held: %q", got)
	}
	s.hold(false)
	if got := batches(); len(got) != 1 || fmt.Sprint(split(got[0])) != "[envelope-1 envelope-2]" {
		t.Fatalf("after the queue ran empty: %q, want one batch of envelope-1, envelope-2", got)
	}
	// Another loop's message does not send what is held; a message of a
	// loop with an envelope held does, first.
	s.hold(true)
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(20)))
	s.before("b")
	if got := batches(); len(got) != 0 {
		t.Fatalf("sent before another loop's message: %q", got)
	}
	s.before("a")
	if got := batches(); len(got) != 1 || fmt.Sprint(split(got[0])) != "[envelope-20]" {
		t.Fatalf("before a message of the held envelope's loop: %q, want envelope-20", got)
	}
	s.hold(false)
	// Full at PeerBatch envelopes.
	s.hold(true)
	for i := 3; i < 7; i++ {
		must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(i)))
	}
	if got := batches(); len(got) != 1 || fmt.Sprint(split(got[0])) != "[envelope-3 envelope-4 envelope-5]" {
		t.Fatalf("a full batch: %q", got)
	}
	// An output share flushes what is held first.
	must(t, s.publish(bus.OutputSubject("a"), []byte("output")))
	if got := batches(); len(got) != 1 || fmt.Sprint(split(got[0])) != "[envelope-6]" {
		t.Fatalf("before the output share: %q, want the held envelope-6", got)
	}
	if got := outs(); len(got) != 1 {
		t.Fatalf("output share: %q", got)
	}
	// A large envelope is not batched: the batch goes first, then it.
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), env(7)))
	big := bytes.Repeat([]byte{1}, maxBatchBytes)
	must(t, s.sendPeer("a", bus.ExchangeSubject("a", 1), big))
	if got := batches(); len(got) != 1 || fmt.Sprint(split(got[0])) != "[envelope-7]" {
		t.Fatalf("before a large envelope: %q", got)
	}
	if got := direct(); len(got) != 1 || len(got[0]) != len(big) {
		t.Fatalf("a large envelope: %d messages on the loop's subject, want it alone", len(got))
	}
	s.hold(false)
	// 10 envelopes in 7 NATS messages (two alone, five batches).
	if msgs, envs := testutil.ToFloat64(m.PeerMessages), testutil.ToFloat64(m.PeerEnvelopes); msgs != 7 || envs != 10 {
		t.Errorf("counted %v messages, %v envelopes; want 7 and 10", msgs, envs)
	}

	// PeerBatch 1 never batches.
	s1, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a"}, PeerBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	s1.hold(true)
	must(t, s1.sendPeer("a", bus.ExchangeSubject("a", 1), env(8)))
	if got := direct(); len(got) != 1 {
		t.Fatalf("PeerBatch 1: %q on the loop's subject, want the envelope at once", got)
	}
	for _, n := range []int{-1, codec.MaxBatchEnvelopes + 1} {
		if _, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a"}, PeerBatch: n}); err == nil {
			t.Errorf("PeerBatch %d accepted", n)
		}
	}
}

// A batch is taken apart into its envelopes, each routed to its loop's
// worker; a malformed batch, another sender's or kind's envelope and an
// unknown loop are refused and counted, and nothing reaches a worker.
func TestDispatchBatch(t *testing.T) {
	nc := natstest.Conn(t)
	m := metrics.New("party1")
	s, err := New(nc, testSealer(t, codec.RoleParty1), Options{ID: 1, Loops: []string{"a", "b"}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"a", "b"} {
		w := newWorker(s, l)
		w.live.Store(false) // not in its event loop: deliver queues to its inbox
		s.workers[l] = w
	}
	p0, sensor := testSealer(t, codec.RoleParty0), testSealer(t, codec.RoleSensor)
	seal := func(s *codec.Sealer, h codec.Header) []byte {
		e, err := s.Seal(h, []byte("payload"))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	mulA := seal(p0, codec.Header{Kind: codec.KindMul, Loop: "a", Tick: 5, From: codec.RoleParty0, To: codec.RoleParty1})
	truncB := seal(p0, codec.Header{Kind: codec.KindTrunc, Loop: "b", Tick: 5, From: codec.RoleParty0, To: codec.RoleParty1})
	measA := seal(sensor, codec.Header{Kind: codec.KindMeasure, Loop: "a", Tick: 6, From: codec.RoleSensor, To: codec.RoleParty1})
	mulC := seal(p0, codec.Header{Kind: codec.KindMul, Loop: "c", Tick: 5, From: codec.RoleParty0, To: codec.RoleParty1})

	var batch []byte
	for _, e := range [][]byte{mulA, measA, truncB, mulC} {
		batch = codec.AppendBatch(batch, e)
	}
	s.dispatchBatch(context.Background(), &nats.Msg{Subject: bus.BatchSubject(1), Data: batch}, false)
	got := func(l string) []*nats.Msg {
		var ms []*nats.Msg
		for {
			select {
			case m := <-s.workers[l].inbox:
				ms = append(ms, m)
			default:
				return ms
			}
		}
	}
	a, b := got("a"), got("b")
	if len(a) != 1 || !bytes.Equal(a[0].Data, mulA) || a[0].Subject != bus.ExchangeSubject("a", 1) {
		t.Errorf("loop a received %d messages, want P0's Mul alone, as on its exchange subject", len(a))
	}
	if len(b) != 1 || !bytes.Equal(b[0].Data, truncB) {
		t.Errorf("loop b received %d messages, want P0's Trunc", len(b))
	}
	if r := testutil.ToFloat64(m.Rejects.WithLabelValues("kind")); r != 1 {
		t.Errorf("a measurement in a batch: %v kind rejects, want 1", r)
	}
	if r := testutil.ToFloat64(m.Rejects.WithLabelValues("header")); r != 1 {
		t.Errorf("an unknown loop in a batch: %v header rejects, want 1", r)
	}
	// Malformed batches reach no worker.
	for _, bad := range [][]byte{nil, []byte("not a batch"), {codec.BatchMagic}, batch[:len(batch)-1], append([]byte{codec.BatchMagic, 0}, mulA...)} {
		s.dispatchBatch(context.Background(), &nats.Msg{Subject: bus.BatchSubject(1), Data: bad}, false)
	}
	if n := len(got("a")) + len(got("b")); n != 0 {
		t.Errorf("malformed batches delivered %d messages", n)
	}
	if r := testutil.ToFloat64(m.Rejects.WithLabelValues("malformed")); r != 5 {
		t.Errorf("%v malformed rejects, want 5", r)
	}
}

// recordAll records everything published on nc's server, on one
// subscription so that the order across subjects is the order of
// publishing; the function returned shows what came since it was last
// called, until 100 ms pass without a message: a batch to party 1 as
// batch[its envelopes], anything else as subject:data.
func recordAll(t *testing.T, nc *nats.Conn) func() string {
	t.Helper()
	type got struct {
		subj string
		data []byte
	}
	ch := make(chan got, 64)
	sub, err := nc.Subscribe(">", func(msg *nats.Msg) { ch <- got{msg.Subject, msg.Data} })
	must(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	must(t, nc.Flush())
	return func() string {
		t.Helper()
		must(t, nc.Flush())
		var b strings.Builder
		for {
			select {
			case g := <-ch:
				if g.subj == bus.BatchSubject(1) {
					var envs []string
					must(t, codec.SplitBatch(g.data, func(e []byte) { envs = append(envs, string(e)) }))
					fmt.Fprintf(&b, "batch%v ", envs)
				} else {
					fmt.Fprintf(&b, "%s:%s ", g.subj, g.data)
				}
			case <-time.After(100 * time.Millisecond):
				return strings.TrimSpace(b.String())
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The deferred work's messages (sendAfter): nothing leaves until the batch
// ends (flushAfter) or PeerBatch pre-openings are gathered; then what the
// dispatcher holds for the other party goes first, then the pre-openings
// (one alone on its loop's subject, several as one batch), then the mask
// shares, each on its own subject, so that no mask share leaves before the
// pre-opening gathered with it.
func TestAfterBatching(t *testing.T) {
	nc := natstest.Conn(t)
	m := metrics.New("party0")
	s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a", "b"}, Metrics: m, PeerBatch: 3})
	if err != nil {
		t.Fatal(err)
	}
	read := recordAll(t, nc)
	exA, exB := bus.ExchangeSubject("a", 1), bus.ExchangeSubject("b", 1)
	maskA, maskB := bus.MaskYSubject("a"), bus.MaskYSubject("b")

	// Gathered, not sent, until the batch ends.
	must(t, s.sendAfter("a", true, exA, []byte("preA")))
	must(t, s.sendAfter("a", false, maskA, []byte("maskA")))
	must(t, s.sendAfter("b", true, exB, []byte("preB")))
	must(t, s.sendAfter("b", false, maskB, []byte("maskB")))
	if g := read(); g != "" {
		t.Fatalf("sent before the batch ended: %s", g)
	}
	// What the dispatcher holds leaves first.
	s.hold(true)
	must(t, s.sendPeer("a", exA, []byte("mulA")))
	must(t, s.flushAfter())
	want := fmt.Sprintf("batch[mulA] batch[preA preB] %s:maskA %s:maskB", maskA, maskB)
	if g := read(); g != want {
		t.Fatalf("at the batch's end: %s\nwant %s", g, want)
	}
	s.hold(false)
	// One pre-opening goes alone on its loop's subject.
	must(t, s.sendAfter("a", true, exA, []byte("preA2")))
	must(t, s.sendAfter("a", false, maskA, []byte("maskA2")))
	must(t, s.flushAfter())
	if g, want := read(), fmt.Sprintf("%s:preA2 %s:maskA2", exA, maskA); g != want {
		t.Fatalf("a lone pre-opening: %s\nwant %s", g, want)
	}
	// PeerBatch pre-openings send what is gathered, masks included.
	for i := range 4 {
		must(t, s.sendAfter("a", false, maskA, fmt.Appendf(nil, "m%d", i)))
		must(t, s.sendAfter("a", true, exA, fmt.Appendf(nil, "p%d", i)))
	}
	want = fmt.Sprintf("batch[p0 p1 p2] %s:m0 %s:m1 %s:m2", maskA, maskA, maskA)
	if g := read(); g != want {
		t.Fatalf("a full batch: %s\nwant %s", g, want)
	}
	must(t, s.flushAfter())
	if g, want := read(), fmt.Sprintf("%s:p3 %s:m3", exA, maskA); g != want {
		t.Fatalf("the rest: %s\nwant %s", g, want)
	}
	must(t, s.flushAfter()) // nothing gathered: nothing sent
	if g := read(); g != "" {
		t.Fatalf("an empty batch sent %s", g)
	}
	// 8 envelopes in 5 NATS messages (the dispatcher's batch of one, two
	// batches, two alone).
	if msgs, envs := testutil.ToFloat64(m.PeerMessages), testutil.ToFloat64(m.PeerEnvelopes); msgs != 5 || envs != 8 {
		t.Errorf("counted %v messages, %v envelopes; want 5 and 8", msgs, envs)
	}
}

// P0's Protocol 2 messages held while other loops' deferred work is due
// (deferPeer) leave with the next message to the other party, ahead of it,
// or at the end of the deferred work's batch, ahead of its pre-openings;
// never on their own while anything else goes out, and never before the
// dispatcher's own held messages.
func TestDeferredTrunc(t *testing.T) {
	nc := natstest.Conn(t)
	m := metrics.New("party0")
	s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a", "b"}, Metrics: m, PeerBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	read := recordAll(t, nc)
	exA, exB, outA := bus.ExchangeSubject("a", 1), bus.ExchangeSubject("b", 1), bus.OutputSubject("a")

	// Held through the dispatcher's queue running empty and an output share.
	must(t, s.deferPeer([]byte("truncA")))
	must(t, s.deferPeer([]byte("truncB")))
	s.hold(true)
	s.hold(false)
	must(t, s.publish(outA, []byte("outA")))
	if g, want := read(), outA+":outA"; g != want {
		t.Fatalf("with Protocol 2 messages held: %s\nwant %s", g, want)
	}
	// The next message to the other party takes them along, behind them.
	must(t, s.sendPeer("b", exB, []byte("mulB")))
	if g, want := read(), "batch[truncA truncB mulB]"; g != want {
		t.Fatalf("the next message to the other party: %s\nwant %s", g, want)
	}
	// While the dispatcher holds messages, those go first, then the held
	// Protocol 2 messages, then the message sent.
	s.hold(true)
	must(t, s.sendPeer("a", exA, []byte("mulA")))
	must(t, s.deferPeer([]byte("truncB2")))
	must(t, s.sendPeer("b", exB, []byte("mulB2")))
	s.hold(false)
	if g, want := read(), "batch[mulA truncB2 mulB2]"; g != want {
		t.Fatalf("behind the dispatcher's held messages: %s\nwant %s", g, want)
	}
	// A batch that would pass PeerBatch goes out first.
	s.hold(true)
	for _, e := range []string{"m1", "m2", "m3"} {
		must(t, s.sendPeer("a", exA, []byte(e)))
	}
	must(t, s.deferPeer([]byte("t1")))
	must(t, s.sendPeer("b", exB, []byte("m4")))
	s.hold(false)
	if g, want := read(), "batch[m1 m2 m3] batch[t1 m4]"; g != want {
		t.Fatalf("past PeerBatch: %s\nwant %s", g, want)
	}
	// The deferred work's batch: they lead its pre-openings, and its mask
	// shares follow.
	must(t, s.deferPeer([]byte("truncA3")))
	must(t, s.sendAfter("a", true, exA, []byte("preA")))
	must(t, s.sendAfter("a", false, bus.MaskYSubject("a"), []byte("maskA")))
	must(t, s.flushAfter())
	if g, want := read(), "batch[truncA3 preA] "+bus.MaskYSubject("a")+":maskA"; g != want {
		t.Fatalf("at the deferred work's end: %s\nwant %s", g, want)
	}
	// Alone, at the end of a batch that gathered nothing.
	must(t, s.deferPeer([]byte("truncA4")))
	must(t, s.flushAfter())
	if g, want := read(), "batch[truncA4]"; g != want {
		t.Fatalf("at the end of an empty batch: %s\nwant %s", g, want)
	}
	// PeerBatch of them go at once; the dispatcher's exit sends the rest.
	for _, e := range []string{"u1", "u2", "u3", "u4", "u5"} {
		must(t, s.deferPeer([]byte(e)))
	}
	if g, want := read(), "batch[u1 u2 u3 u4]"; g != want {
		t.Fatalf("PeerBatch held: %s\nwant %s", g, want)
	}
	s.flushAll()
	if g, want := read(), "batch[u5]"; g != want {
		t.Fatalf("at the dispatcher's exit: %s\nwant %s", g, want)
	}
	// 19 envelopes in 8 NATS messages.
	if msgs, envs := testutil.ToFloat64(m.PeerMessages), testutil.ToFloat64(m.PeerEnvelopes); msgs != 8 || envs != 19 {
		t.Errorf("counted %v messages, %v envelopes; want 8 and 19", msgs, envs)
	}
}

// pending reports a begun batch of deferred work until it is taken.
func TestAfterQueuePending(t *testing.T) {
	q := newAfterQueue(time.Millisecond)
	if q.pending() {
		t.Fatal("an empty queue is pending")
	}
	q.add(&worker{})
	if !q.pending() {
		t.Fatal("a queued worker is not pending")
	}
	q.take()
	if q.pending() {
		t.Fatal("pending after take")
	}
}

// sendTrunc holds P0's Protocol 2 message only while other loops' deferred
// work is due, the loop's ticks are spaced well apart and the other party
// takes batches; the message held is the sealed Trunc of its tick, sent at
// the end of the deferred work's batch.
func TestSendTruncDefers(t *testing.T) {
	nc := natstest.Conn(t)
	p1 := testSealer(t, codec.RoleParty1)
	batches := collect(t, nc, bus.BatchSubject(1))
	direct := collect(t, nc, bus.ExchangeSubject("a", 1))
	open := func(env []byte) codec.Header {
		t.Helper()
		h, _, err := p1.Open(env)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, peerBatch := range []int{1, 16} {
		s, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: []string{"a", "b"}, PeerBatch: peerBatch, PersistDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.after = newAfterQueue(time.Hour) // not running: flushAfter is called below
		w := newWorker(s, "a")
		w.out.trunc = codec.TruncPayload{Item: 7}
		// No other loop's work due: at once, alone.
		w.sendTrunc(1)
		if got := direct(); len(got) != 1 || open(got[0]).Tick != 1 || open(got[0]).Kind != codec.KindTrunc {
			t.Fatalf("PeerBatch %d, nothing due: %d messages on the loop's subject, want Trunc(1)", peerBatch, len(got))
		}
		s.after.add(newWorker(s, "b"))
		// Back-to-back ticks (the collection's 100 ms apart, against a
		// PersistDelay of 1 s): at once, though other work is due.
		w.sendTrunc(2)
		if got := direct(); len(got) != 1 || open(got[0]).Tick != 2 {
			t.Fatalf("PeerBatch %d, back-to-back ticks: %d messages, want Trunc(2) at once", peerBatch, len(got))
		}
		// The previous tick a minute ago: spaced well apart (more than
		// truncSpacing times the PersistDelay of 1 s).
		w.lastTrunc = time.Now().Add(-time.Minute)
		w.sendTrunc(3)
		if peerBatch == 1 {
			if got := direct(); len(got) != 1 || open(got[0]).Tick != 3 {
				t.Fatalf("PeerBatch 1, work due: %d messages, want Trunc(3) at once", len(got))
			}
			continue
		}
		if got := append(direct(), batches()...); len(got) != 0 {
			t.Fatalf("sent while other loops' work is due: %d messages", len(got))
		}
		must(t, s.flushAfter())
		got := batches()
		if len(got) != 1 {
			t.Fatalf("at the batch's end: %d batches, want 1", len(got))
		}
		var hs []codec.Header
		must(t, codec.SplitBatch(got[0], func(e []byte) { hs = append(hs, open(e)) }))
		if len(hs) != 1 || hs[0].Kind != codec.KindTrunc || hs[0].Tick != 3 || hs[0].Loop != "a" {
			t.Fatalf("at the batch's end: %+v, want loop a's Trunc(3)", hs)
		}
	}
}

// The dispatcher counts its subscription's last drops when it stops, not
// only every 200 ms: before, the drops since the last count were lost.
func TestDispatchCountsTheLastDrops(t *testing.T) {
	nc := natstest.Conn(t)
	m := metrics.New("party1")
	s, err := New(nc, testSealer(t, codec.RoleParty1), Options{ID: 1, Loops: []string{"a"}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	s.inbox = make(chan *nats.Msg, 1) // room for one message: the rest are dropped
	sub, err := nc.ChanSubscribe("drops.test", s.inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const sent = 10
	for range sent {
		if err := nc.Publish("drops.test", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for give := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if d, _ := sub.Dropped(); d == sent-1 {
			break
		}
		if time.Now().After(give) {
			d, err := sub.Dropped()
			t.Fatalf("%d dropped (%v), want %d", d, err, sent-1)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.dispatch(ctx, sub)
	if got := testutil.ToFloat64(m.Rejects.WithLabelValues("overload")); got != sent-1 {
		t.Errorf("%v overload rejects counted, want %d", got, sent-1)
	}
}

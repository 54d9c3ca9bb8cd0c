package party

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
)

// TestStateAcks runs the acknowledgement router against a real JetStream
// KV bucket: a stored write's result carries its token and revision, and
// the server's acknowledgement has the form the direct reader takes; a
// refused write carries JetStream's error code; a forgotten write's late
// acknowledgement is dropped; a malformed one is an ErrMalformed result and
// counted; no responders is an error; a reply to no token is ignored. Each
// result delivered, and only those, is followed by its write's then.
func TestStateAcks(t *testing.T) {
	nc := natstest.Conn(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "acks", Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	var bad atomic.Int32 // malformed acknowledgements counted
	a, err := newStateAcks(nc, func(error) { bad.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan ackResult, 1)
	var thens atomic.Int32
	then := func(ackResult) { thens.Add(1) }
	wait := func(what string) ackResult {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no result", what)
		}
		return ackResult{}
	}
	nothing := func(what string) {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-ch:
			t.Fatalf("%s was delivered: %+v", what, r)
		case <-time.After(200 * time.Millisecond):
		}
	}
	write := func(expect string, reply string) {
		t.Helper()
		m := nats.NewMsg("$KV.acks.k")
		m.Data, m.Reply = []byte("v"), reply
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expect)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}

	tok, reply := a.register(ch, then)
	write("0", reply)
	if r := wait("stored"); r.token != tok || r.err != nil || r.seq != 1 {
		t.Fatalf("stored write: %+v, want token %d, revision 1", r, tok)
	}
	// The server's acknowledgement, as it is on the wire, takes the direct path.
	m := nats.NewMsg("$KV.acks.k")
	m.Data = []byte("w")
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "1")
	raw, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq, ok := pubAckSeq(raw.Data); !ok || seq != 2 {
		t.Fatalf("the direct reader did not take %q (%d, %v)", raw.Data, seq, ok)
	}
	if r := parsePubAck(raw); r.err != nil || r.seq != 2 {
		t.Fatalf("parsePubAck(%q) = %+v", raw.Data, r)
	}

	tok, reply = a.register(ch, then)
	write("1", reply) // stale: the key is at revision 2
	r := wait("refused")
	if r.token != tok || r.err == nil || r.errCode != int(jetstream.JSErrCodeStreamWrongLastSequence) {
		t.Fatalf("refused write: %+v, want err_code %d", r, jetstream.JSErrCodeStreamWrongLastSequence)
	}

	tok, reply = a.register(ch, then)
	a.forget(tok)
	write("2", reply)
	nothing("a forgotten write's result")

	tok, reply = a.register(ch, then)
	if err := nc.Publish(reply, []byte(`{"stream":"KV_acks","seq":`)); err != nil {
		t.Fatal(err)
	}
	if r := wait("malformed"); r.token != tok || !errors.Is(r.err, codec.ErrMalformed) || bad.Load() != 1 {
		t.Fatalf("malformed acknowledgement: %+v, %d counted", r, bad.Load())
	}

	tok, reply = a.register(ch, then)
	if err := nc.PublishMsg(&nats.Msg{Subject: "duet.nobody.here", Reply: reply, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if r := wait("no responders"); r.token != tok || r.err == nil || errors.Is(r.err, codec.ErrMalformed) {
		t.Fatalf("no responders: %+v", r)
	}

	for _, subj := range []string{a.prefix + "x", a.prefix + "99999"} {
		if err := nc.Publish(subj, []byte(`{"stream":"KV_acks","seq":5}`)); err != nil {
			t.Fatal(err)
		}
	}
	nothing("a reply to no write")
	if n := thens.Load(); n != 4 { // stored, refused, malformed, no responders
		t.Fatalf("then called %d times, want 4", n)
	}
}

// TestPubAckSeq: the direct reader takes exactly {"stream":"<name>","seq":N}
// and leaves every other form to the JSON decoder, which reads the same.
func TestPubAckSeq(t *testing.T) {
	for _, c := range []struct {
		in  string
		seq uint64
		ok  bool
	}{
		{`{"stream":"KV_duet-state-party0","seq":42}`, 42, true},
		{`{"stream":"s","seq":18446744073709551615}`, 0, false}, // 20 digits: left to JSON
		{`{"stream":"s","seq":0}`, 0, false},
		{`{"stream":"s","seq":42,"duplicate":true}`, 0, false},
		{`{"stream":"s","domain":"d","seq":42}`, 0, false},
		{`{"stream":"s","seq":4x2}`, 0, false},
		{`{"stream":"","seq":42}`, 0, false},
		{`{"stream":"s","seq":}`, 0, false},
		{`{"stream":"s","seq":0042}`, 0, false},        // leading zeros: not JSON
		{`{"stream":"a\","seq":5}`, 0, false},          // an escaped quote: the name does not end there
		{"{\"stream\":\"a\x01\",\"seq\":5}", 0, false}, // a control character: not JSON
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}`, 0, false},
	} {
		seq, ok := pubAckSeq([]byte(c.in))
		if seq != c.seq && ok || ok != c.ok {
			t.Errorf("pubAckSeq(%s) = %d, %v; want %d, %v", c.in, seq, ok, c.seq, c.ok)
		}
	}
	if r := parsePubAck(&nats.Msg{Data: []byte(`{"stream":"s","seq":42,"duplicate":true}`)}); r.err != nil || r.seq != 42 {
		t.Errorf("a duplicate's acknowledgement: %+v", r)
	}
	if r := parsePubAck(&nats.Msg{Data: []byte(`{"error":{"code":503,"description":"no stream"}}`)}); r.err == nil || r.errCode != -1 {
		t.Errorf("an error without err_code: %+v", r)
	}
	if r := parsePubAck(&nats.Msg{Data: []byte(`{"stream":"s"}`)}); !errors.Is(r.err, codec.ErrMalformed) {
		t.Errorf("an acknowledgement without a sequence: %+v", r)
	}
	if r := parsePubAck(&nats.Msg{}); !errors.Is(r.err, codec.ErrMalformed) {
		t.Errorf("an empty acknowledgement: %+v", r)
	}
}

// TestStateAcksFailOnDisconnect: when the connection to the server is lost,
// every write in flight ends at once with nats.ErrDisconnected (its
// acknowledgement went with the connection), instead of leaving the loop to
// wait out its timeout, and its then is called with that result; close
// stops the router's status watcher.
func TestStateAcksFailOnDisconnect(t *testing.T) {
	ns, nc := natstest.Start(t)
	a, err := newStateAcks(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	chs := []chan ackResult{make(chan ackResult, 1), make(chan ackResult, 1)}
	var tokens []uint64
	var thens atomic.Int32
	for _, ch := range chs {
		tok, _ := a.register(ch, func(r ackResult) {
			if errors.Is(r.err, nats.ErrDisconnected) {
				thens.Add(1)
			}
		})
		tokens = append(tokens, tok)
	}
	ns.Shutdown()
	for i, ch := range chs {
		select {
		case r := <-ch:
			if r.token != tokens[i] || !errors.Is(r.err, nats.ErrDisconnected) {
				t.Fatalf("write %d after the server went away: %+v", i, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("write %d: no result after the server went away", i)
		}
	}
	a.mu.Lock()
	n := len(a.wait)
	a.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d writes still awaited", n)
	}
	for deadline := time.Now().Add(5 * time.Second); thens.Load() != 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := thens.Load(); n != 2 {
		t.Fatalf("then called %d times after the server went away, want 2", n)
	}
	a.close()
	select {
	case <-a.watched:
	case <-time.After(5 * time.Second):
		t.Fatal("the status watcher still runs after close")
	}
}

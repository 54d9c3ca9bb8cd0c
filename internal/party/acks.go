package party

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/pkg/codec"
)

// stateAcks routes the acknowledgements of a party service's state writes
// (JetStream publishes to its KV bucket, one per loop and tick) to the loops
// waiting for them: one subscription per service on a wildcard under the
// connection's inbox prefix, and one token per write in the reply subject.
// It replaces JetStream's asynchronous publisher on this path, which costs a
// future with its channels per write and decodes every acknowledgement's
// JSON by reflection. A loop has at most one write in flight, so each loop
// has a channel of capacity one for its result.
type stateAcks struct {
	prefix  string // reply subjects are prefix + token
	nc      *nats.Conn
	sub     *nats.Subscription
	status  chan nats.Status // reconnecting or closed: see watch
	watched chan struct{}    // closed when watch returns
	// malformed counts an acknowledgement that does not decode.
	malformed func(error)

	mu   sync.Mutex
	next uint64
	wait map[uint64]ackWaiter
}

// ackWaiter is where a write's result goes: sent on ch, then, if set, then
// is called with it (outside the router's lock).
type ackWaiter struct {
	ch   chan<- ackResult
	then func(ackResult)
}

// ackResult is the outcome of one state write.
type ackResult struct {
	token uint64
	seq   uint64 // the stored record's revision
	// errCode is JetStream's err_code when the write was refused (e.g. a
	// stale revision), err why it was not stored.
	errCode int
	err     error
}

func newStateAcks(nc *nats.Conn, malformed func(error)) (*stateAcks, error) {
	a := &stateAcks{prefix: nc.NewInbox() + ".", nc: nc, malformed: malformed, wait: map[uint64]ackWaiter{}}
	sub, err := nc.Subscribe(a.prefix+"*", a.deliver)
	if err != nil {
		return nil, fmt.Errorf("subscribing to state write acknowledgements: %w", err)
	}
	a.sub = sub
	a.status, a.watched = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED), make(chan struct{})
	go a.watch()
	return a, nil
}

// watch fails every write in flight when the connection is lost, as
// JetStream's publisher does: their acknowledgements went with the old
// connection, and a loop must retry at once rather than wait out its
// timeout (a restarted NATS server would otherwise cost each loop a
// stall of saveTimeout).
func (a *stateAcks) watch() {
	defer close(a.watched)
	for st := range a.status {
		a.failAll(nats.ErrDisconnected)
		if st == nats.CLOSED {
			return
		}
	}
}

// failAll ends every write in flight with err.
func (a *stateAcks) failAll(err error) {
	a.mu.Lock()
	tokens := slices.Collect(maps.Keys(a.wait))
	a.mu.Unlock()
	for _, token := range tokens {
		a.end(token, ackResult{token: token, err: err})
	}
}

// fail ends one write with err (its publish failed), as failAll does.
func (a *stateAcks) fail(token uint64, err error) { a.end(token, ackResult{token: token, err: err}) }

// end delivers the result r of write token, if it is still awaited, and
// then calls its then.
func (a *stateAcks) end(token uint64, r ackResult) {
	a.mu.Lock()
	wt, ok := a.wait[token]
	if ok {
		a.endLocked(token, wt, r)
	}
	a.mu.Unlock()
	if ok && wt.then != nil {
		wt.then(r)
	}
}

// endLocked delivers a write's result and stops awaiting it (under mu).
// The channel has room: a loop has one write in flight.
func (a *stateAcks) endLocked(token uint64, wt ackWaiter, r ackResult) {
	delete(a.wait, token)
	select {
	case wt.ch <- r:
	default:
	}
}

// close stops the router (the service's loops are done with it).
func (a *stateAcks) close() {
	_ = a.sub.Unsubscribe()
	a.nc.RemoveStatusListener(a.status) // closes the channel: watch returns
}

// register numbers a new write and returns its reply subject: its result
// will be sent on ch, which must have room for it, and then, if not nil,
// then is called with it.
func (a *stateAcks) register(ch chan<- ackResult, then func(ackResult)) (token uint64, reply string) {
	a.mu.Lock()
	a.next++
	token = a.next
	a.wait[token] = ackWaiter{ch: ch, then: then}
	a.mu.Unlock()
	return token, a.prefix + strconv.FormatUint(token, 10)
}

// forget drops a write whose result is no longer awaited (it timed out or
// was not published): a late acknowledgement of it is dropped. Once forget
// returns, no result of that write is sent any more.
func (a *stateAcks) forget(token uint64) {
	a.mu.Lock()
	delete(a.wait, token)
	a.mu.Unlock()
}

func (a *stateAcks) deliver(m *nats.Msg) {
	if len(m.Subject) <= len(a.prefix) {
		return
	}
	token, err := strconv.ParseUint(m.Subject[len(a.prefix):], 10, 64)
	if err != nil {
		return // not one of ours: nothing waits for it
	}
	res := parsePubAck(m)
	res.token = token
	if errors.Is(res.err, codec.ErrMalformed) && a.malformed != nil {
		a.malformed(res.err)
	}
	a.end(token, res)
}

// parsePubAck reads JetStream's acknowledgement of a publish: the stream
// sequence, or why the message was not stored. The common form,
// {"stream":"...","seq":N}, is read directly; anything else is decoded as
// JSON.
func parsePubAck(m *nats.Msg) ackResult {
	if len(m.Data) == 0 {
		if st := m.Header.Get("Status"); st != "" { // 503: no responders
			return ackResult{err: fmt.Errorf("state write not stored: status %s %s", st, m.Header.Get("Description"))}
		}
		return ackResult{err: fmt.Errorf("%w: empty state write acknowledgement", codec.ErrMalformed)}
	}
	if seq, ok := pubAckSeq(m.Data); ok {
		return ackResult{seq: seq}
	}
	var r struct { // JetStream's own response types
		jetstream.PubAck
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return ackResult{err: fmt.Errorf("%w: state write acknowledgement: %v", codec.ErrMalformed, err)}
	}
	switch {
	case r.Error != nil:
		code := int(r.Error.ErrorCode)
		if code == 0 {
			code = -1 // refused, without JetStream's code
		}
		return ackResult{errCode: code, err: fmt.Errorf("state write refused: %w", r.Error)}
	case r.Stream == "" || r.Sequence == 0:
		return ackResult{err: fmt.Errorf("%w: state write acknowledgement without a stream sequence", codec.ErrMalformed)}
	}
	return ackResult{seq: r.Sequence}
}

// pubAckSeq reads N from an acknowledgement of exactly the form
// {"stream":"<name>","seq":N}; ok is false for any other. It takes only
// what JSON reads the same way: a name without escapes or control
// characters, and N without leading zeros (FuzzPubAck).
func pubAckSeq(b []byte) (seq uint64, ok bool) {
	const head, key = `{"stream":"`, `","seq":`
	if !bytes.HasPrefix(b, []byte(head)) {
		return 0, false
	}
	b = b[len(head):]
	i := bytes.IndexByte(b, '"')
	if i <= 0 || !bytes.HasPrefix(b[i:], []byte(key)) {
		return 0, false
	}
	for _, c := range b[:i] {
		if c < 0x20 || c == '\\' {
			return 0, false
		}
	}
	b = b[i+len(key):]
	if len(b) < 2 || b[len(b)-1] != '}' {
		return 0, false
	}
	digits := b[:len(b)-1]
	if len(digits) > 19 || digits[0] == '0' { // 19 digits always fit in 64 bits
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		seq = seq*10 + uint64(c-'0')
	}
	return seq, seq > 0
}

package bus

import (
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Write coalescing for a connection that carries many loops.
//
// On this path each NATS message costs a write system call at the sender and
// a read (and a write, and a read) through the server: the loopback TCP stack
// is most of that cost, and it is paid per call, not per byte. A party
// service that serves hundreds of loops publishes tens of thousands of small
// messages a second, and the client's flusher writes whatever has gathered
// each time it wakes: when it wakes for every message, every message is a
// call.
//
// A coalescing connection lets a burst of writes through at once (a single
// loop's tick never waits) but, once the connection writes more often than
// once per interval, holds what comes next and writes it in one call when the
// interval is up. It is a token bucket of system calls: burst calls at once,
// then one per interval. Under load the bytes of many messages share a call
// and the server reads them in one; the price is at most one interval of
// latency per message, paid only while the connection is that busy.

// coalesceBurst is how many writes pass at once after a quiet spell: a tick's
// messages on one connection (a party's exchange and output share, a state
// write) never wait behind each other.
const coalesceBurst = 4

// heldWriteTimeout bounds a held write, which the timer makes after the
// client's own write (and its deadline) has returned: nats.go's default
// flusher timeout.
const heldWriteTimeout = time.Minute

// coalesceMax is the pending bytes written at once without waiting for the
// interval: a batch that large already amortizes its call.
const coalesceMax = 64 << 10

// CoalesceWrites makes the connection coalesce its writes (see above); every
// is the shortest time between two system calls once the burst is spent. 0 or
// less: no coalescing. It dials through the options' CustomDialer if one is
// set before it, else a net.Dialer with the connect timeout (nats.Dialer is
// not used); TLS, if configured, runs over the coalescing connection.
func CoalesceWrites(every time.Duration) nats.Option {
	if every <= 0 {
		return func(*nats.Options) error { return nil }
	}
	return func(o *nats.Options) error {
		d := o.CustomDialer
		if d == nil {
			d = &net.Dialer{Timeout: o.Timeout}
		}
		o.CustomDialer = &coalescingDialer{next: d, every: every}
		return nil
	}
}

type coalescingDialer struct {
	next  nats.CustomDialer
	every time.Duration
}

func (d *coalescingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.next.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return newCoalescingConn(c, d.every), nil
}

// SkipTLSHandshake lets nats.go's TLS (over this connection) work as with
// its own dialer.
func (d *coalescingDialer) SkipTLSHandshake() bool {
	if s, ok := d.next.(interface{ SkipTLSHandshake() bool }); ok {
		return s.SkipTLSHandshake()
	}
	return false
}

type coalescingConn struct {
	net.Conn
	every time.Duration

	mu      sync.Mutex
	tokens  float64   // calls allowed now (at most coalesceBurst)
	at      time.Time // when tokens was last brought up to date
	pending []byte    // held bytes, written in order before anything later
	armed   bool      // the timer will write pending
	timer   *time.Timer
	err     error // a held write's failure: every later Write returns it
	closed  bool
	// deadline is the client's write deadline, applied to its own writes
	// (under mu, so that a held write's deadline never replaces it).
	deadline time.Time
}

func newCoalescingConn(c net.Conn, every time.Duration) *coalescingConn {
	cc := &coalescingConn{Conn: c, every: every, tokens: coalesceBurst, at: time.Now()}
	cc.timer = time.AfterFunc(time.Hour, cc.flushHeld)
	cc.timer.Stop()
	return cc
}

// refill brings the bucket up to now (mu held).
func (c *coalescingConn) refill(now time.Time) {
	c.tokens += float64(now.Sub(c.at)) / float64(c.every)
	if c.tokens > coalesceBurst {
		c.tokens = coalesceBurst
	}
	c.at = now
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	now := time.Now()
	c.refill(now)
	if len(c.pending) == 0 && c.tokens >= 1 {
		c.tokens--
		_ = c.Conn.SetWriteDeadline(c.deadline)
		n, err := c.Conn.Write(p)
		if err != nil {
			c.err = err
		}
		return n, err
	}
	c.pending = append(c.pending, p...)
	if len(c.pending) >= coalesceMax {
		// Written at once, at a token if there is one: the bucket never
		// goes below empty, so what is held next waits at most one
		// interval (below), as promised.
		c.tokens = max(c.tokens-1, 0)
		_ = c.Conn.SetWriteDeadline(c.deadline)
		return len(p), c.writeHeld()
	}
	if !c.armed {
		c.armed = true
		c.timer.Reset(time.Duration((1 - c.tokens) * float64(c.every)))
	}
	return len(p), nil
}

// writeHeld writes the held bytes in one call (mu held). On failure the
// connection is closed, so that the client's reader sees it and reconnects.
func (c *coalescingConn) writeHeld() error {
	if len(c.pending) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.pending)
	c.pending = c.pending[:0]
	if err != nil {
		c.err = err
		_ = c.Conn.Close()
	}
	return err
}

func (c *coalescingConn) flushHeld() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	if c.closed || c.err != nil {
		return
	}
	if len(c.pending) == 0 {
		return // written meanwhile (coalesceMax): no call, no token
	}
	now := time.Now()
	c.refill(now)
	c.tokens = max(c.tokens-1, 0)
	_ = c.Conn.SetWriteDeadline(now.Add(heldWriteTimeout))
	_ = c.writeHeld()
}

// SetWriteDeadline records the client's deadline for its own writes.
func (c *coalescingConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

// SetDeadline sets the read deadline and records the write deadline.
func (c *coalescingConn) SetDeadline(t time.Time) error {
	_ = c.SetWriteDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

// Close writes what is held, then closes.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.timer.Stop()
		if c.err == nil {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second)) // a closing client does not wait long
			_ = c.writeHeld()
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

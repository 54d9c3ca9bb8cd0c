package bus

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/natstest"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
	fail   atomic.Bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("injected write failure")
	}
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// tcpPair is a real loopback TCP connection: the client end counted and
// coalesced, and everything the server end reads.
func tcpPair(t *testing.T, every time.Duration) (*coalescingConn, *countingConn, func() []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The listener is closed once its one connection is accepted, not as
	// tcpPair returns: closed before the accept, it resets the connection
	// waiting in its queue, and the client's first write failed with
	// "connection reset by peer" (a CI run, once).
	t.Cleanup(func() { _ = ln.Close() })
	var got bytes.Buffer
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err := ln.Accept()
		_ = ln.Close()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, 4096)
		for {
			n, err := s.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: raw}
	c := newCoalescingConn(cc, every)
	t.Cleanup(func() { _ = c.Close() })
	// received waits until the client end is closed and the server end has
	// read everything.
	received := func() []byte {
		_ = c.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the server end did not see the connection close")
		}
		mu.Lock()
		defer mu.Unlock()
		return got.Bytes()
	}
	return c, cc, received
}

// A quiet connection writes at once: a burst of up to coalesceBurst writes
// reaches the socket before Write returns, so a single loop's tick never
// waits.
func TestCoalesceBurstPassesAtOnce(t *testing.T) {
	c, cc, received := tcpPair(t, time.Hour)
	for i := 0; i < coalesceBurst; i++ {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if got := cc.writes.Load(); got != int64(i+1) {
			t.Fatalf("write %d: %d socket writes, want %d (no wait within the burst)", i, got, i+1)
		}
	}
	// The next one is held (the interval is an hour) and written on Close.
	if _, err := c.Write([]byte{9}); err != nil {
		t.Fatal(err)
	}
	if got := cc.writes.Load(); got != coalesceBurst {
		t.Fatalf("%d socket writes after the burst, want %d (the fifth held)", got, coalesceBurst)
	}
	if got, want := received(), []byte{0, 1, 2, 3, 9}; !bytes.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
}

// Under a steady stream of writes the socket sees about one write per
// interval, and every byte arrives once, in order.
func TestCoalesceBusyConnection(t *testing.T) {
	const every = 2 * time.Millisecond
	c, cc, received := tcpPair(t, every)
	var want bytes.Buffer
	began := time.Now()
	for i := 0; i < 5000; i++ {
		msg := []byte(fmt.Sprintf("PUB x %d\r\n", i))
		want.Write(msg)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	elapsed := time.Since(began)
	got := received()
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("received %d bytes, want %d, in order", len(got), want.Len())
	}
	// The bucket allows coalesceBurst at once, one per interval after that,
	// and the write on Close.
	limit := int64(coalesceBurst + 2 + elapsed/every)
	if n := cc.writes.Load(); n > limit || n >= 5000 {
		t.Fatalf("%d socket writes for 5000 writes in %v, want at most %d", n, elapsed, limit)
	}
	t.Logf("5000 writes in %v: %d socket writes", elapsed, cc.writes.Load())
}

// Held bytes go out when the interval is up, without another write to
// push them.
func TestCoalesceHeldBytesGoOutByThemselves(t *testing.T) {
	const every = 20 * time.Millisecond
	c, cc, received := tcpPair(t, every)
	for i := 0; i < coalesceBurst+3; i++ {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for cc.writes.Load() != coalesceBurst+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d socket writes, want %d: the held bytes were not written", cc.writes.Load(), coalesceBurst+1)
		}
		time.Sleep(time.Millisecond)
	}
	if got := received(); len(got) != coalesceBurst+3 {
		t.Fatalf("received %d bytes, want %d", len(got), coalesceBurst+3)
	}
}

// A write held once the burst is spent waits at most one interval, however
// the bucket was spent: held bytes that reach coalesceMax go out at once,
// and the timer armed for them then fires on nothing. Before, each took a
// token the bucket did not have, and the next held write waited (1 −
// tokens) intervals: two here, more with each such flush.
func TestCoalesceHoldsAtMostOneInterval(t *testing.T) {
	c, cc, received := tcpPair(t, time.Hour) // no refill to speak of
	for i := 0; i < coalesceBurst; i++ {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Write([]byte{9}); err != nil { // held: the timer armed
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, coalesceMax)); err != nil { // over coalesceMax: written at once
		t.Fatal(err)
	}
	if got := cc.writes.Load(); got != coalesceBurst+1 {
		t.Fatalf("%d socket writes, want %d (the held bytes at coalesceMax written at once)", got, coalesceBurst+1)
	}
	c.flushHeld() // the armed timer fires with nothing held
	if got := cc.writes.Load(); got != coalesceBurst+1 {
		t.Fatalf("%d socket writes after the timer fired on nothing, want %d", got, coalesceBurst+1)
	}
	c.mu.Lock()
	tokens := c.tokens
	c.mu.Unlock()
	if wait := 1 - tokens; wait > 1 {
		t.Fatalf("the next held write would wait %.2f intervals (tokens %.2f), want at most one", wait, tokens)
	}
	if got := received(); len(got) != coalesceBurst+1+coalesceMax {
		t.Fatalf("received %d bytes, want %d", len(got), coalesceBurst+1+coalesceMax)
	}
}

// A held write that fails is reported by the next Write, and the socket is
// closed so that the client's reader sees it and reconnects.
func TestCoalesceHeldWriteFailure(t *testing.T) {
	const every = 5 * time.Millisecond
	c, cc, _ := tcpPair(t, every)
	for i := 0; i < coalesceBurst; i++ {
		if _, err := c.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	cc.fail.Store(true)
	if _, err := c.Write([]byte{2}); err != nil {
		t.Fatalf("a held write failed at once: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held write's failure was not recorded")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := c.Write([]byte{3}); err == nil || err.Error() != "injected write failure" {
		t.Fatalf("Write after a failed held write: %v, want the failure", err)
	}
	if _, err := cc.Conn.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the socket is still open after a failed held write (read: %v)", err)
	}
}

// The client's write deadline applies to its own writes: a write past it
// fails as a timeout (nats.go's flusher sets one around every write).
func TestCoalesceKeepsTheClientsDeadline(t *testing.T) {
	c, _, _ := tcpPair(t, time.Millisecond)
	if err := c.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past the deadline = %v, want a timeout", err)
	}
}

// Through a real NATS server: a client whose writes are coalesced delivers
// every message once and in order, with far fewer socket writes than
// messages.
func TestCoalescedNATSConnection(t *testing.T) {
	srv, _ := natstest.Start(t)
	var counted *countingConn
	dial := &recordingDialer{onDial: func(c *countingConn) { counted = c }}
	pub, err := nats.Connect(srv.ClientURL(), nats.SetCustomDialer(dial), CoalesceWrites(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const n = 20000
	got := make(chan int, n)
	if _, err := sub.Subscribe("coalesce.test", func(m *nats.Msg) {
		var i int
		_, _ = fmt.Sscanf(string(m.Data), "%d", &i)
		got <- i
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := pub.Publish("coalesce.test", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		select {
		case v := <-got:
			if v != i {
				t.Fatalf("message %d arrived as number %d", v, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d messages arrived", i, n)
		}
	}
	if w := counted.writes.Load(); w >= n/10 {
		t.Fatalf("%d socket writes for %d messages: not coalesced", w, n)
	}
	t.Logf("%d messages in %d socket writes", n, counted.writes.Load())
}

// recordingDialer dials TCP and counts the connection's writes (under the
// coalescing connection, which wraps whatever dialer is set).
type recordingDialer struct {
	onDial func(*countingConn)
}

func (d *recordingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	cc := &countingConn{Conn: c}
	d.onDial(cc)
	return cc, nil
}

// Across a server restart: what a coalescing connection held when its socket
// died is lost with it, as bytes in the socket's buffer are, but nothing
// arrives twice, out of order or torn, and publishing goes on after the
// reconnect.
func TestCoalesceAcrossServerRestart(t *testing.T) {
	start := func(port int) *server.Server {
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatal("embedded NATS server did not start")
		}
		return ns
	}
	ns := start(-1)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	reconnect := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond)}
	pub, err := nats.Connect(url, append(reconnect, CoalesceWrites(time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := nats.Connect(url, reconnect...)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var mu sync.Mutex
	var got []int
	bad := 0
	if _, err := sub.Subscribe("coalesce.restart", func(m *nats.Msg) {
		var i int
		if _, err := fmt.Sscanf(string(m.Data), "msg-%d", &i); err != nil || len(m.Data) != len(fmt.Sprintf("msg-%d", i)) {
			mu.Lock()
			bad++
			mu.Unlock()
			return
		}
		mu.Lock()
		got = append(got, i)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		i := 0
		for {
			select {
			case <-stop:
				done <- i
				return
			default:
			}
			_ = pub.Publish("coalesce.restart", []byte(fmt.Sprintf("msg-%d", i)))
			i++
			time.Sleep(20 * time.Microsecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	ns.Shutdown()
	ns.WaitForShutdown()
	time.Sleep(100 * time.Millisecond)
	ns = start(port)
	defer ns.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for !pub.IsConnected() || !sub.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("the clients did not reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Both clients have reconnected; the subscriber's interest is restored
	// before anything published from here on.
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := len(got)
	mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	sent := <-done
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if bad > 0 {
		t.Fatalf("%d torn or corrupt messages", bad)
	}
	for k := 1; k < len(got); k++ {
		if got[k] <= got[k-1] {
			t.Fatalf("message %d arrived after %d: duplicated or out of order", got[k], got[k-1])
		}
	}
	if len(got)-before < 100 {
		t.Fatalf("%d messages after the reconnect (of %d sent in all): publishing did not resume", len(got)-before, sent)
	}
	t.Logf("%d sent, %d received (%d after the reconnect)", sent, len(got), len(got)-before)
}

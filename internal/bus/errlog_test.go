package bus

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testlog"
)

// natsErrors returns the "nats error" records logged to l so far.
func natsErrors(t *testing.T, l *testlog.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "nats error" {
			out = append(out, rec)
		}
	}
	return out
}

// A publish the server denies on every tick (a service under an older ACL)
// is logged once with the subject the server names, each other denied
// subject once too, and the same one again only after errorLogEvery, with
// how many were not logged meanwhile.
func TestConnectLogsRepeatedErrorsOnce(t *testing.T) {
	ns := natstest.Server(t, &server.Options{Users: []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"denied.>"}}}}}})
	old := errorLogEvery
	errorLogEvery = 300 * time.Millisecond
	t.Cleanup(func() { errorLogEvery = old })
	var sink testlog.Buffer
	nc, err := Connect(ns.ClientURL(), "test", slog.New(slog.NewJSONHandler(&sink, nil)), nil, nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	burst := func(subject string, n int) {
		for range n {
			if err := nc.Publish(subject, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(want int) []map[string]any {
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := natsErrors(t, &sink)
			if len(got) >= want || time.Now().After(deadline) {
				time.Sleep(50 * time.Millisecond) // and nothing more comes
				return natsErrors(t, &sink)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	burst("denied.a", 20)
	burst("denied.b", 20)
	got := wait(2)
	if len(got) != 2 || !strings.Contains(got[0]["err"].(string), "denied.a") || !strings.Contains(got[1]["err"].(string), "denied.b") {
		t.Fatalf("after 20 denied publishes on each of two subjects: %v, want one line per subject", got)
	}
	time.Sleep(errorLogEvery + 50*time.Millisecond)
	burst("denied.a", 1)
	got = wait(3)
	if len(got) != 3 || !strings.Contains(got[2]["err"].(string), "denied.a") || got[2]["repeats_not_logged"] != float64(19) {
		t.Fatalf("after the interval: %v, want one more line for denied.a with 19 not logged", got)
	}
}

// A server that cannot be reached (a wrong DUET_NATS_URL, TLS on one side
// only) is logged at the first failed attempt and not again within
// errorLogEvery, with the URL's password redacted: the service used to
// retry for ever without a line.
func TestUnreachableServerLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var sink testlog.Buffer
	nc, err := Connect("nats://u:hunter2@"+addr, "test", slog.New(slog.NewJSONHandler(&sink, nil)), nil)
	if err != nil {
		t.Fatal(err) // retrying on a failed connection, Connect returns at once
	}
	t.Cleanup(nc.Close)
	failed := func() []string {
		var out []string
		for _, line := range strings.Split(sink.String(), "\n") {
			if strings.Contains(line, "nats connection attempt failed") {
				out = append(out, line)
			}
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(failed()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // four more attempts, 250 ms apart
	got := failed()
	if len(got) == 0 {
		t.Fatalf("no line for the failed attempts: %q", sink.String())
	}
	// One line per distinct error (the first attempt's "no servers
	// available", then each retry's "connection refused").
	seen := map[string]bool{}
	for _, line := range got {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if e, _ := rec["err"].(string); seen[e] {
			t.Errorf("%q logged again within errorLogEvery: %q", e, sink.String())
		} else {
			seen[e] = true
		}
		if strings.Contains(line, "hunter2") || !strings.Contains(line, addr) {
			t.Errorf("the line %q should name %s with the password redacted", line, addr)
		}
	}
}

// TestRefusedLoginRetriedForever: a server that refuses the connection's
// credentials (a user it does not know yet, as while keys are rotated and
// the server not yet reloaded) is tried again for as long as the service
// runs. nats.go closes a connection for good when the same server refuses
// it twice in a row, and the service never connected again, even once the
// server knew the user.
func TestRefusedLoginRetriedForever(t *testing.T) {
	ns := natstest.Server(t, &server.Options{Users: []*server.User{{Username: "u", Password: "p"}}})
	var sink testlog.Buffer
	nc, err := Connect(ns.ClientURL(), "test", slog.New(slog.NewJSONHandler(&sink, nil)), nil, nats.UserInfo("u", "wrong"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	time.Sleep(2 * time.Second) // eight attempts, 250 ms apart
	if nc.IsClosed() {
		t.Fatalf("the connection was closed for good after refused logins (last error %v)", nc.LastError())
	}
	if nc.IsConnected() {
		t.Fatal("connected with a wrong password")
	}
	if o := nc.Opts; o.PingInterval != PingInterval || o.MaxPingsOut != MaxPingsOut {
		t.Errorf("pings every %v, %d unanswered at most; want %v and %d", o.PingInterval, o.MaxPingsOut, PingInterval, MaxPingsOut)
	}
}

// TestFailedHandshakeLoggedAgain: an attempt that fails after the dial (TLS
// wanted by the client, which the server does not offer) is logged once per
// errorLogEvery for as long as it goes on, as a failed dial is. nats.go
// reports only failed dials to ReconnectErrHandler (and the very first
// failure), so such a service logged one line and then retried silently.
func TestFailedHandshakeLoggedAgain(t *testing.T) {
	defer func(every, watch time.Duration) { errorLogEvery, reconnectWatch = every, watch }(errorLogEvery, reconnectWatch)
	errorLogEvery, reconnectWatch = 300*time.Millisecond, 50*time.Millisecond
	ns := natstest.Server(t, &server.Options{})
	var sink testlog.Buffer
	nc, err := Connect(ns.ClientURL(), "test", slog.New(slog.NewJSONHandler(&sink, nil)), nil, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Three lines, 300 ms apart at the least, come within a second; a
	// loaded machine may take longer, an error logged once never does.
	lines := func() int { return strings.Count(sink.String(), "nats connection attempt failed") }
	for end := time.Now().Add(10 * time.Second); lines() < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d lines for 10 s of failed attempts, logged at most every 300 ms: want at least 3:\n%s", lines(), sink.String())
		}
	}
}

// TestAttemptKeyDropsAddresses: two failed attempts that differ only in
// their addresses (a new local port each time) are one error to the log's
// rate limit; before, each attempt's was new and every one was logged.
func TestAttemptKeyDropsAddresses(t *testing.T) {
	at := func(port int) error {
		return &net.OpError{Op: "read", Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: port},
			Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 4222}, Err: syscall.ECONNRESET}
	}
	a, b := attemptKey(at(41234)), attemptKey(at(41235))
	if a != b || strings.Contains(a, "41234") {
		t.Fatalf("keys %q and %q: want one, without the addresses", a, b)
	}
	if k := attemptKey(fmt.Errorf("nats: %w", at(1))); k != a {
		t.Fatalf("a wrapped error's key %q, want %q", k, a)
	}
	if k := attemptKey(errors.New("nats: secure connection not available")); k != "nats: secure connection not available" {
		t.Fatalf("key %q of another error, want its text", k)
	}
}

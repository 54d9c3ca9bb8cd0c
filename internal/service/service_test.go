package service

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
)

// runPlant runs a service of the plant's role with the environment as set,
// and reports whether its run function was reached.
func runPlant(t *testing.T) (ran bool, err error) {
	t.Helper()
	var cfg struct{ config.Common }
	err = Run(context.Background(), "test", func() codec.Role { return codec.RolePlant }, &cfg, &cfg.Common, nil,
		func(context.Context, *Env) error { ran = true; return nil })
	return ran, err
}

// A DUET_HTTP_ADDR that cannot be bound stops the service with an error
// naming it, before anything else starts; it used to be logged by the HTTP
// goroutine while the service ran without /metrics and /readyz.
func TestBadHTTPAddrStopsTheService(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{busy.Addr().String(), "127.0.0.1:notaport", "127.0.0.1:99999"} {
		t.Setenv("DUET_HTTP_ADDR", addr)
		t.Setenv("DUET_KEYS_DIR", t.TempDir()) // no keys: reached, they would fail next
		ran, err := runPlant(t)
		if ran || err == nil {
			t.Fatalf("DUET_HTTP_ADDR=%s: ran %v, err %v; want an error before the run", addr, ran, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "DUET_HTTP_ADDR") || !strings.Contains(msg, addr) {
			t.Errorf("DUET_HTTP_ADDR=%s: error %q does not name the variable and its value", addr, msg)
		}
	}
}

// A service that stops on a later error (here: no keys) releases the
// address it bound.
func TestHTTPAddrReleasedOnError(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	t.Setenv("DUET_HTTP_ADDR", addr)
	t.Setenv("DUET_KEYS_DIR", t.TempDir())
	ran, err := runPlant(t)
	if ran || err == nil || strings.Contains(err.Error(), "DUET_HTTP_ADDR") {
		t.Fatalf("ran %v, err %v; want the keys' error", ran, err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is still bound after the service stopped: %v", err)
	}
	again.Close()
}

// The common variables' bad values stop the service before anything
// starts, each error naming its variable: slog alone took "info+2", nats.go
// dialled 127.0.0.1:4222 for an empty URL, and a CA file that is no
// certificate failed at the connection, naming neither.
func TestBadCommonValuesStopTheService(t *testing.T) {
	notPEM := t.TempDir() + "/ca.pem"
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, val string }{
		{"DUET_LOG_LEVEL", "info+2"},
		{"DUET_LOG_LEVEL", "verbose"},
		{"DUET_NATS_URL", " "},
		{"DUET_TLS_CA", notPEM},
		{"DUET_TLS_CA", t.TempDir() + "/missing.pem"},
	} {
		t.Run(c.key+"="+c.val, func(t *testing.T) {
			t.Setenv("DUET_HTTP_ADDR", "")
			t.Setenv(c.key, c.val)
			ran, err := runPlant(t)
			if ran || err == nil || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("ran %v, err %v; want an error naming %s", ran, err, c.key)
			}
		})
	}
	t.Setenv("DUET_HTTP_ADDR", "")
	t.Setenv("DUET_KEYS_DIR", t.TempDir())
	t.Setenv("DUET_LOG_LEVEL", "WARN") // the four names in any case
	if _, err := runPlant(t); err == nil || strings.Contains(err.Error(), "DUET_LOG_LEVEL") {
		t.Fatalf("DUET_LOG_LEVEL=WARN: %v; want it accepted (and the missing keys refused)", err)
	}
}

// TestConnectionClosedForGoodStopsTheService: a connection nats.go closes
// for good (here after the server's "maximum control line exceeded", one of
// the server errors it does not reconnect after) ends the service with an
// error naming it, so that it is restarted. Before, the service stayed up,
// not ready and still live by /healthz, and never connected again.
func TestConnectionClosedForGoodStopsTheService(t *testing.T) {
	ns := natstest.Server(t, &server.Options{MaxControlLine: 256})
	dir := t.TempDir()
	if err := keys.Generate(dir, false); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DUET_HTTP_ADDR", "")
	t.Setenv("DUET_KEYS_DIR", dir)
	t.Setenv("DUET_NATS_URL", ns.ClientURL())
	done := make(chan error, 1)
	go func() {
		var cfg struct{ config.Common }
		done <- Run(t.Context(), "test", func() codec.Role { return codec.RolePlant }, &cfg, &cfg.Common, nil,
			func(ctx context.Context, env *Env) error {
				for !env.NC.IsConnected() {
					time.Sleep(10 * time.Millisecond)
				}
				// A control line over the server's maximum.
				if err := env.NC.Publish("duet."+strings.Repeat("x", 300), nil); err != nil {
					return err
				}
				env.NC.Flush()
				<-ctx.Done()
				return nil
			})
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "nats connection closed for good") {
			t.Fatalf("Run: %v, want the connection closed for good named", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the service ran on with its connection closed for good")
	}
}

// The HTTP server closes a kept-alive connection left idle, and one whose
// request never ends: before, only the request's header had a timeout, so
// idle connections were held for ever.
func TestHTTPServerClosesIdleConnections(t *testing.T) {
	defer func(r, w, i time.Duration) { httpReadTimeout, httpWriteTimeout, httpIdleTimeout = r, w, i }(httpReadTimeout, httpWriteTimeout, httpIdleTimeout)
	httpReadTimeout, httpIdleTimeout = 300*time.Millisecond, 200*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }))
	go srv.Serve(ln)
	defer srv.Close()
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c) // until the server closes it
		return err == nil
	}
	for _, c := range []struct{ what, req string }{
		{"an idle kept-alive connection", "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"a connection with a request body that never ends", "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"},
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(c.req)); err != nil {
			t.Fatal(err)
		}
		if !closed(conn) {
			t.Errorf("%s was still open 5 s on", c.what)
		}
	}
}

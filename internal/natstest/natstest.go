// Package natstest starts a real NATS server with JetStream for tests.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Conn starts an embedded NATS server with JetStream (stopped at the end of
// the test) and returns a connection to it (closed then too).
func Conn(t testing.TB) *nats.Conn {
	t.Helper()
	_, nc := Start(t)
	return nc
}

// Start is Conn that also returns the server, for a test that stops it.
func Start(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	ns := Server(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return ns, nc
}

// Server starts an embedded NATS server with opts (on 127.0.0.1, a free
// port, quiet), stopped at the end of the test.
func Server(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoSigs, opts.NoLog = "127.0.0.1", -1, true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server did not start")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

package sensor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A loop whose offline item the server cannot carry is refused at start,
// naming the limit: the dealers would otherwise fail every refill and the
// parties never get an item. The same loop with seed compression fits.
func TestItemOverMaxPayloadRefused(t *testing.T) {
	cs := pendulumController(t)
	ns := natstest.Server(t, &server.Options{MaxPayload: 1024})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sealer := testkeys.Sealers(t)[codec.RoleSensor]
	// The pendulum's per-tick item: 1,136 bytes of payload uncompressed,
	// 592 compressed (mpc.DealerBytesPerTick: P1's shares, the nonce and
	// its tag).
	_, err = New(nc, sealer, Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: false})
	if err == nil || !strings.Contains(err.Error(), "max_payload of 1024") {
		t.Fatalf("an uncompressed item through a 1,024-byte max_payload: %v", err)
	}
	if _, err := New(nc, sealer, Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: true}); err != nil {
		t.Fatalf("a compressed item through a 1,024-byte max_payload: %v", err)
	}
}

// A sensor started before its NATS server (bus.Connect retries the first
// connection) knows no max_payload when New runs, which then cannot refuse
// the loop: Setup waits for the connection, saying so, and refuses it
// then, naming the limit. Before, the check was skipped and the dealers
// failed every refill. The wait ends with the context (SIGTERM).
func TestItemSizeCheckedOnceConnected(t *testing.T) {
	cs := pendulumController(t)
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the server started below
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	nc, err := bus.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port), "sensor-test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected before the server started")
	}
	var logs testlog.Buffer
	s, err := New(nc, testkeys.Sealers(t)[codec.RoleSensor], Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: false,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("New with the first connection still tried: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err = s.Setup(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Setup with no server, its context ended: %v, want the context's error", err)
	}
	if !strings.Contains(logs.String(), "waiting for the NATS connection") {
		t.Errorf("the wait is not logged:\n%s", logs.String())
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true, MaxPayload: 1024})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server did not start")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The pendulum's uncompressed item: 1,136 bytes of payload.
	if err := s.Setup(ctx); err == nil || !strings.Contains(err.Error(), "max_payload of 1024") {
		t.Fatalf("an uncompressed item through a 1,024-byte max_payload, the server up after New: %v", err)
	}
}

// A queue or set-up bucket the server refuses (here: three replicas on a
// single server; a storage type that cannot change in place is another
// case) names the variables it was made with and what they must satisfy.
func TestRefusedStorageNamesTheVariables(t *testing.T) {
	cs := pendulumController(t)
	nc := natstest.Conn(t)
	s, err := New(nc, testkeys.Sealers(t)[codec.RoleSensor], Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: true, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Setup(t.Context())
	if err == nil || !strings.Contains(err.Error(), "DUET_REPLICAS=3") || !strings.Contains(err.Error(), "DUET_FILE_STORE=false") {
		t.Fatalf("three replicas on one server: %v, want an error naming DUET_REPLICAS=3 and DUET_FILE_STORE", err)
	}
	// The set-up bucket's refusal goes through the same wrapping; an error
	// that is not the server's refusal (a cancelled start) is left bare.
	if err := s.storageErr(context.Canceled); err != context.Canceled {
		t.Errorf("a cancelled start: %v, want it unwrapped", err)
	}
}

// A controller the sensor cannot size or encode names where it came from
// (DUET_CONTROLLER and its path, set by Config.Options).
func TestControllerErrorNamesItsSource(t *testing.T) {
	cs := pendulumController(t)
	cs.B[0][0] = 1e6 // outside Q<18,9>
	_, err := New(natstest.Conn(t), testkeys.Sealers(t)[codec.RoleSensor], Options{Loop: "pendulum", Controller: cs, ControllerFrom: "DUET_CONTROLLER big.json", Variant: mpc.PerTick})
	if err == nil || !strings.Contains(err.Error(), "DUET_CONTROLLER big.json: ") || !strings.Contains(err.Error(), `field "B"`) {
		t.Fatalf("a value outside Q<18,9>: %v, want an error naming DUET_CONTROLLER big.json and the field", err)
	}
}

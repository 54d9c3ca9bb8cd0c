package sensor

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A loop whose offline item the server cannot carry is refused at start,
// naming the limit: the dealers would otherwise fail every refill and the
// parties never get an item. The same loop with seed compression fits.
func TestItemOverMaxPayloadRefused(t *testing.T) {
	cs, err := mpc.LoadControllerSpec("../../examples/qube-servo2/controller.json")
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.Server(t, &server.Options{MaxPayload: 1024})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sealer := testkeys.Sealers(t)[codec.RoleSensor]
	// The pendulum's per-tick item: 1,136 bytes of payload uncompressed,
	// 576 compressed (Measured results, Dealer).
	_, err = New(nc, sealer, Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: false})
	if err == nil || !strings.Contains(err.Error(), "max_payload of 1024") {
		t.Fatalf("an uncompressed item through a 1,024-byte max_payload: %v", err)
	}
	if _, err := New(nc, sealer, Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: true}); err != nil {
		t.Fatalf("a compressed item through a 1,024-byte max_payload: %v", err)
	}
}

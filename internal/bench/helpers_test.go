package bench

import (
	"context"
	"os"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/duet-mpc/duet/internal/demo"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// TestMain runs this test binary as a floor relay when a test's floor
// started it as one (NewFloorRigRelays), and the tests otherwise.
func TestMain(m *testing.M) {
	if RelayMain() {
		return
	}
	os.Exit(m.Run())
}

// startServer starts an embedded NATS server for one test.
func startServer(t *testing.T) string {
	t.Helper()
	_, url := startServerNS(t)
	return url
}

// startServerNS is startServer with the server itself.
func startServerNS(t *testing.T) (*server.Server, string) {
	t.Helper()
	// Labelled as the bench labels its embedded server (roles.go).
	var ns *server.Server
	var dir string
	var err error
	withRole(context.Background(), RoleBroker, func(context.Context) { ns, dir, err = demo.StartServer() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		_ = os.RemoveAll(dir)
	})
	return ns, ns.ClientURL()
}

// startRig starts an embedded server and a rig on it, closed when the test
// ends.
func startRig(t *testing.T) *rig {
	t.Helper()
	r, err := newRig(context.Background(), startServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

func pendulum(t testing.TB) (mpc.ControllerSpec, plant.Spec) {
	t.Helper()
	cs, ps, _, err := sim.LoadSpecs("../../examples/qube-servo2/controller.json", "../../examples/qube-servo2/plant.json")
	if err != nil {
		t.Fatal(err)
	}
	return cs, ps
}

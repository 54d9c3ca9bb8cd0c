package demo

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A publish the server denies fails nowhere but in the connection's
// asynchronous error: the service counts it (duet_nats_errors_total), as
// the DuetNATSPermissionDenied alert needs. Before, it was only logged.
func TestDeniedPublishCounted(t *testing.T) {
	cs, ps := pendulum(t)
	c := startWith(t, Options{Controller: cs, Plant: ps, Variant: mpc.PerTick, Compress: true, Fast: true, ACL: true,
		Period: 40 * time.Millisecond, Deadline: 250 * time.Millisecond, Dealers: 1, LowWater: 100}, 50)
	nc, _, m, err := c.connAs("intruder", codec.RoleActuator)
	if err != nil {
		t.Fatal(err)
	}
	// The actuator may not send measurements.
	if err := nc.Publish("duet.pendulum.measure.p0", []byte("x")); err != nil {
		t.Fatalf("publish: %v (the denial comes asynchronously)", err)
	}
	_ = nc.Flush()
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(m.NATSErrors.WithLabelValues("permission")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the denied publish was not counted within 5 s")
		}
	}
	if got := testutil.ToFloat64(m.NATSErrors.WithLabelValues("other")); got != 0 {
		t.Errorf("%v other errors counted", got)
	}
}

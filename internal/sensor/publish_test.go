package sensor

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/internal/testkeys"
	"github.com/duet-mpc/duet/internal/testlog"
	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A sensor whose connection refuses its messages (closed here; in a long
// outage, its reconnect buffer full) logs the notices it cannot send as it
// logs the ticks lost, the first and then once a minute with a count: before,
// every refused message was a warning of its own, 25 a second at 40 ms. The
// ticks count as misses, none as sent.
func TestUnpublishedNoticesLoggedOnce(t *testing.T) {
	cs := pendulumController(t)
	nc := natstest.Conn(t)
	var logs testlog.Buffer
	m := metrics.New("sensor")
	s, err := New(nc, testkeys.Sealers(t)[codec.RoleSensor], Options{Loop: "pendulum", Controller: cs, Variant: mpc.PerTick, Compress: true,
		Fast: true, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.plantUp = true // the plant had answered: its reads failing cost ticks
	const ticks = 100
	if err := s.RunN(t.Context(), ticks); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "tick notice not published"); n != 1 {
		t.Errorf("%d warnings of a notice not published over %d ticks, want 1:\n%s", n, ticks, out)
	}
	if n := strings.Count(out, "\n"); n > 3 {
		t.Errorf("%d log lines over %d ticks lost, want at most 3:\n%s", n, ticks, out)
	}
	if got := testutil.ToFloat64(m.Misses.WithLabelValues("pendulum")); got != ticks {
		t.Errorf("%v misses, want %d", got, ticks)
	}
	if got := testutil.ToFloat64(m.Ticks.WithLabelValues("pendulum")); got != 0 {
		t.Errorf("%v ticks counted as sent, want 0", got)
	}
}

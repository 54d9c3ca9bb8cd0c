package demo

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// The counters the alert rules watch with increase() are exported at 0 by
// every service of a cluster just started, before their first event: a series
// that first appears with its first event shows Prometheus no increase, so
// the alert would miss it (one forged message, a loop's first miss).
func TestAlertedCountersExportedAtZero(t *testing.T) {
	c := startCluster(t, mpc.PerTick, 1)
	const loop = "pendulum"
	series := map[string]map[string]float64{} // service -> "name{labels}" -> value
	for svc, m := range c.Metrics {
		fams, err := m.Reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		series[svc] = map[string]float64{}
		for _, f := range fams {
			for _, s := range f.Metric {
				var ls []string
				for _, lp := range s.Label {
					if lp.GetName() != "service" {
						ls = append(ls, lp.GetName()+"="+lp.GetValue())
					}
				}
				sort.Strings(ls)
				series[svc][f.GetName()+"{"+strings.Join(ls, ",")+"}"] = s.GetCounter().GetValue()
			}
		}
	}
	want := func(svc, name string, labels ...string) {
		t.Helper()
		sort.Strings(labels)
		key := name + "{" + strings.Join(labels, ",") + "}"
		v, ok := series[svc][key]
		if !ok {
			t.Errorf("%s does not export %s", svc, key)
		} else if v != 0 {
			t.Errorf("%s: %s = %v on a loop without trouble, want 0", svc, key, v)
		}
	}
	services := []string{"sensor", "party0", "party1", "actuator", "plant"}
	for _, svc := range append(services, c.Dealers()...) {
		for _, r := range []string{"auth", "replay", "kind", "malformed", "header", "range", "instance", "overload"} {
			want(svc, "duet_rejects_total", "reason="+r)
		}
	}
	for _, svc := range []string{"actuator", "plant"} {
		want(svc, "duet_deadline_misses_total", "loop="+loop)
	}
	for _, i := range []int{0, 1} {
		svc := fmt.Sprintf("party%d", i)
		for _, r := range party.AbandonReasons {
			want(svc, "duet_ticks_abandoned_total", "loop="+loop, "reason="+r)
		}
		for _, k := range metrics.MismatchKinds {
			want(svc, "duet_mismatches_total", "loop="+loop, "kind="+k)
		}
	}
	for _, svc := range c.Dealers() {
		want(svc, "duet_offline_publish_errors_total", "loop="+loop)
	}
	if len(c.Dealers()) == 0 {
		t.Fatal("no dealer")
	}
}

// Package monitoring_test checks deploy/prometheus/duet-alerts.yaml (and, the
// same way, the Grafana dashboard duet-dashboard.json) without a Prometheus
// server: the file decodes strictly as a Prometheus rule file,
// every expression parses as PromQL (Prometheus's own parser), every metric
// it selects is one the services export, with the labels it matches and
// groups by, every label value it matches is one the services set (a service
// only among those that set that metric), and every annotation is a valid
// template that names only labels the alert carries. scripts/e2e.sh checks
// that the running services label their metrics with their roles.
package monitoring_test

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/duet-mpc/duet/internal/metrics"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/pkg/codec"
)

const rulesFile = "duet-alerts.yaml"

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// targetLabels are added by Prometheus to every scraped series.
var targetLabels = []string{"instance", "job"}

// exported returns every series name the services export and its label
// names (a histogram as its _bucket, _count and _sum series).
func exported(t *testing.T) map[string][]string {
	t.Helper()
	m := metrics.New("actuator")
	m.Rejects.WithLabelValues("r").Inc()
	m.Ticks.WithLabelValues("l").Inc()
	m.Misses.WithLabelValues("l").Inc()
	m.Abandoned.WithLabelValues("l", "r").Inc()
	m.Held.WithLabelValues("l").Inc()
	m.Mismatches.WithLabelValues("l", "k").Inc()
	m.ItemsConsumed.WithLabelValues("l").Inc()
	m.ItemsPrepared.WithLabelValues("l").Inc()
	m.ItemsDiscarded.WithLabelValues("l").Inc()
	m.ItemsPublished.WithLabelValues("l").Inc()
	m.QueueDepth.WithLabelValues("l").Set(1)
	m.LowWater.WithLabelValues("l").Inc()
	m.QueueFull.WithLabelValues("l").Inc()
	m.PublishErrors.WithLabelValues("l").Inc()
	m.TickLatency.WithLabelValues("l").Observe(0.001)
	m.TickPaths.WithLabelValues("l", "p").Inc()
	fams, err := m.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range fams {
		var names []string
		if len(f.Metric) > 0 {
			for _, lp := range f.Metric[0].Label {
				names = append(names, lp.GetName())
			}
		}
		names = append(names, targetLabels...)
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[f.GetName()+"_bucket"] = append(slices.Clone(names), "le")
			out[f.GetName()+"_count"] = names
			out[f.GetName()+"_sum"] = names
		default:
			out[f.GetName()] = names
		}
	}
	return out
}

// knownValues are the values a label other than service can take, where
// duet sets them: by metric name and label name (service: setters).
func knownValues() map[string]map[string][]string {
	return map[string]map[string][]string{
		"duet_rejects_total":         {"reason": metrics.RejectReasons()},
		"duet_ticks_abandoned_total": {"reason": party.AbandonReasons},
		"duet_mismatches_total":      {"kind": metrics.MismatchKinds},
		"duet_tick_paths_total":      {"path": metrics.TickPathLabels},
		"duet_nats_errors_total":     {"kind": metrics.NATSErrorKinds},
	}
}

// allRoles are every role's name, the values of the service label.
var allRoles = func() []string {
	var out []string
	for _, r := range codec.AllRoles {
		out = append(out, r.String())
	}
	return out
}()

var parties = []string{"party0", "party1"}

// setters are the roles whose services set each duet_ metric (a histogram
// by its base name), from the services' code: an alert that selects a metric
// by a service that never sets it would never fire.
var setters = map[string][]string{
	"duet_rejects_total":                allRoles,
	"duet_nats_reconnects_total":        allRoles,
	"duet_nats_errors_total":            allRoles,
	"duet_ticks_total":                  {"sensor", "party0", "party1", "actuator"},
	"duet_deadline_misses_total":        {"sensor", "party0", "party1", "actuator", "plant"},
	"duet_ticks_abandoned_total":        parties,
	"duet_measurements_held_total":      parties,
	"duet_mismatches_total":             {"sensor", "party0", "party1", "actuator"},
	"duet_tick_paths_total":             {"sensor", "party0", "party1"},
	"duet_items_consumed_total":         parties,
	"duet_items_prepared_total":         parties,
	"duet_items_discarded_total":        parties,
	"duet_peer_messages_total":          parties,
	"duet_peer_envelopes_total":         parties,
	"duet_peer_held_total":              {"party0"},
	"duet_items_published_total":        {"dealer"},
	"duet_queue_depth":                  {"dealer"},
	"duet_offline_publish_errors_total": {"dealer"},
	"duet_queue_full_total":             {"dealer"},
	"duet_queue_low_water_total":        {"dealer", "party0", "party1"},
	"duet_tick_latency_seconds":         {"actuator"},
}

// baseName strips a histogram series' suffix.
func baseName(series string) string {
	for _, suf := range []string{"_bucket", "_count", "_sum"} {
		if b, ok := strings.CutSuffix(series, suf); ok {
			if _, known := setters[b]; known {
				return b
			}
		}
	}
	return series
}

// TestSettersCoverEveryMetric keeps the table above complete: a new duet_
// metric needs a row.
func TestSettersCoverEveryMetric(t *testing.T) {
	set := setters
	for name := range exported(t) {
		if strings.HasPrefix(name, "duet_") {
			if _, ok := set[baseName(name)]; !ok {
				t.Errorf("%s: add the roles that set it to setters", name)
			}
		}
	}
}

// matchedValues lists the values a matcher names: one for = and !=, each
// alternative of a plain alternation for =~ and !~.
func matchedValues(t *testing.T, m string, typ string, v string) []string {
	if typ == "=" || typ == "!=" {
		return []string{v}
	}
	if !regexp.MustCompile(`^[a-z0-9_]+(\|[a-z0-9_]+)*$`).MatchString(v) {
		t.Errorf("%s: regular expression %q is not a plain alternation of label values; extend the test to check it", m, v)
		return nil
	}
	return strings.Split(v, "|")
}

// decodeFile reads a file of this directory and decodes it into v.
func decodeFile(t *testing.T, name string, v any, decode func([]byte, any) error) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := decode(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	decodeFile(t, rulesFile, &f, func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) })
	var rules []rule
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a group needs a name and rules", g.Name)
		}
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return rules
}

func TestAlertRules(t *testing.T) {
	series := exported(t)
	values := knownValues()
	p := parser.NewParser(parser.Options{})
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		t.Run(r.Alert, func(t *testing.T) {
			if r.Alert == "" || seen[r.Alert] {
				t.Fatalf("alert name %q empty or used twice", r.Alert)
			}
			seen[r.Alert] = true
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("for: %v", err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("severity %q, want warning or critical", s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("summary and description are required")
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("expr does not parse: %v", err)
			}
			if typ := expr.Type(); typ != parser.ValueTypeVector {
				t.Errorf("expr is a %s, want an instant vector", typ)
			}
			checkSelectors(t, expr, series, values)
			out, known := outputLabels(expr, series)
			checkAnnotations(t, r, out, known)
		})
	}
}

// selectors are the vector selectors under n.
func selectors(n parser.Node) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

func checkSelectors(t *testing.T, expr parser.Expr, series map[string][]string, values map[string]map[string][]string) {
	t.Helper()
	for _, vs := range selectors(expr) {
		labels, ok := series[vs.Name]
		if !ok {
			t.Errorf("%s: no service exports this metric", vs)
			continue
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" {
				continue
			}
			if !slices.Contains(labels, m.Name) {
				t.Errorf("%s: %s has no label %q (it has %v)", vs, vs.Name, m.Name, labels)
				continue
			}
			allowed := values[vs.Name][m.Name]
			if m.Name == "service" {
				allowed = setters[baseName(vs.Name)]
			}
			if allowed == nil {
				continue
			}
			for _, v := range matchedValues(t, vs.String(), m.Type.String(), m.Value) {
				if !slices.Contains(allowed, v) {
					t.Errorf("%s: no service sets %s=%q on %s (values: %v)", vs, m.Name, v, vs.Name, allowed)
				}
			}
		}
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		var by []string
		var under []parser.Node
		switch n := n.(type) {
		case *parser.AggregateExpr:
			if !n.Without {
				by, under = n.Grouping, []parser.Node{n.Expr}
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil && n.VectorMatching.On {
				by, under = n.VectorMatching.MatchingLabels, []parser.Node{n.LHS, n.RHS}
			}
		}
		for _, u := range under {
			for _, vs := range labelSources(u) {
				for _, l := range by {
					if labels, ok := series[vs.Name]; ok && !slices.Contains(labels, l) {
						t.Errorf("grouping or matching by %q, but %s has no such label (it has %v)", l, vs.Name, labels)
					}
				}
			}
		}
		return nil
	})
}

// labelSources are the vector selectors under n whose labels n's result
// series carry: those of and's and unless's left side only (their right
// side filters, its labels are not kept), those of every other expression.
func labelSources(n parser.Node) []*parser.VectorSelector {
	switch n := n.(type) {
	case *parser.BinaryExpr:
		if n.Op == parser.LAND || n.Op == parser.LUNLESS {
			return labelSources(n.LHS)
		}
		return append(labelSources(n.LHS), labelSources(n.RHS)...)
	case *parser.ParenExpr:
		return labelSources(n.Expr)
	}
	return selectors(n)
}

// outputLabels are the labels the expression's result series carry; known
// is false where the test cannot tell.
func outputLabels(e parser.Expr, series map[string][]string) (labels []string, known bool) {
	switch e := e.(type) {
	case *parser.ParenExpr:
		return outputLabels(e.Expr, series)
	case *parser.VectorSelector:
		return series[e.Name], true
	case *parser.MatrixSelector:
		return outputLabels(e.VectorSelector, series)
	case *parser.AggregateExpr:
		if e.Without {
			return nil, false
		}
		return e.Grouping, true
	case *parser.NumberLiteral:
		return nil, true
	case *parser.BinaryExpr:
		l, lk := outputLabels(e.LHS, series)
		if e.LHS.Type() == parser.ValueTypeScalar {
			return outputLabels(e.RHS, series)
		}
		return l, lk
	case *parser.Call:
		switch e.Func.Name {
		case "rate", "increase", "irate", "delta":
			return outputLabels(e.Args[0], series)
		case "histogram_quantile":
			l, k := outputLabels(e.Args[1], series)
			return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == "le" }), k
		case "absent":
			var out []string
			for _, vs := range selectors(e.Args[0]) {
				for _, m := range vs.LabelMatchers {
					if m.Type.String() == "=" && m.Name != "__name__" {
						out = append(out, m.Name)
					}
				}
			}
			return out, true
		}
	}
	return nil, false
}

var labelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// checkAnnotations parses each annotation as Prometheus does (text/template
// with $labels and $value defined) and checks the labels it names are on
// the alert's series.
func checkAnnotations(t *testing.T, r rule, out []string, known bool) {
	t.Helper()
	funcs := template.FuncMap{}
	for _, f := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "title", "toUpper", "toLower"} {
		funcs[f] = func(v any) string { return "" }
	}
	for _, k := range slices.Sorted(maps.Keys(r.Annotations)) {
		text := r.Annotations[k]
		src := "{{$labels := .Labels}}{{$value := .Value}}" + text
		tmpl, err := template.New(k).Funcs(funcs).Option("missingkey=zero").Parse(src)
		if err != nil {
			t.Errorf("annotation %s: %v", k, err)
			continue
		}
		data := struct {
			Labels map[string]string
			Value  float64
		}{map[string]string{}, 0.5}
		for _, l := range out {
			data.Labels[l] = "x"
		}
		if err := tmpl.Execute(&strings.Builder{}, data); err != nil {
			t.Errorf("annotation %s: %v", k, err)
		}
		if !known {
			continue
		}
		for _, m := range labelRef.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(out, m[1]) {
				t.Errorf("annotation %s names $labels.%s, but the alert's series carry only %v", k, m[1], out)
			}
		}
	}
}

const dashboardFile = "duet-dashboard.json"

type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		GridPos struct {
			X, Y, W, H int
		} `json:"gridPos"`
		Targets []struct {
			RefID        string `json:"refId"`
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaVars stand in for the dashboard's variables so that its queries
// parse as the PromQL Grafana sends.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$loop", ".+")

var legendRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// TestDashboard checks deploy/prometheus/duet-dashboard.json as the alert
// rules are checked: every panel query parses, selects what the services
// export by labels and values they set, and its legend names only labels its
// series carry; the loop variable's query reads a label that exists.
func TestDashboard(t *testing.T) {
	var d dashboard
	decodeFile(t, dashboardFile, &d, json.Unmarshal)
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, schemaVersion %d, %d panels: all are required", dashboardFile, d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	series := exported(t)
	values := knownValues()
	p := parser.NewParser(parser.Options{})
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_]+)\)$`).FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		e, err := p.ParseExpr(m[1])
		if err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
			continue
		}
		checkSelectors(t, e, series, values)
		if l, _ := outputLabels(e, series); !slices.Contains(l, m[2]) {
			t.Errorf("variable %s: %s has no label %q", v.Name, m[1], m[2])
		}
	}
	ids := map[int]bool{}
	for _, pn := range d.Panels {
		t.Run(pn.Title, func(t *testing.T) {
			if pn.Title == "" || ids[pn.ID] || pn.GridPos.W == 0 || pn.GridPos.H == 0 || len(pn.Targets) == 0 {
				t.Fatalf("panel %d: a title, a unique id, a size and a query are required", pn.ID)
			}
			ids[pn.ID] = true
			refs := map[string]bool{}
			for _, tg := range pn.Targets {
				if tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("refId %q empty or used twice", tg.RefID)
				}
				refs[tg.RefID] = true
				e, err := p.ParseExpr(grafanaVars.Replace(tg.Expr))
				if err != nil {
					t.Errorf("%s: %v", tg.Expr, err)
					continue
				}
				checkSelectors(t, e, series, values)
				out, known := outputLabels(e, series)
				if !known {
					continue
				}
				for _, m := range legendRef.FindAllStringSubmatch(tg.LegendFormat, -1) {
					if !slices.Contains(out, m[1]) {
						t.Errorf("legend %q names %s, but %s carries only %v", tg.LegendFormat, m[1], tg.Expr, out)
					}
				}
			}
		})
	}
}

package k8s_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// update rewrites the generated k8s/monitoring/prometheusrule.yaml from the
// rules file (make k8s-monitoring).
var update = flag.Bool("update", false, "regenerate k8s/monitoring/prometheusrule.yaml from deploy/prometheus/duet-alerts.yaml")

const (
	rulesFile     = "../deploy/prometheus/duet-alerts.yaml"
	ruleCRFile    = "monitoring/prometheusrule.yaml"
	monitoringDir = "monitoring"
	// monitoringNS is the namespace the NetworkPolicies let scrape.
	monitoringNS = "monitoring"
)

// prometheusRule is the PrometheusRule holding the rules file: its lines,
// comments included, indented under spec.
func prometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString("# GENERATED from deploy/prometheus/duet-alerts.yaml by `make k8s-monitoring`:\n")
	b.WriteString("# edit that file, not this one (`go test ./k8s` fails while they differ).\n")
	b.WriteString("apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: duet\nspec:\n")
	for line := range strings.Lines(string(rules)) {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.Bytes()
}

// TestPrometheusRuleGenerated: the PrometheusRule is the rules file, as
// generated, so the alerts tested by promtool and by the live Prometheus of
// the end-to-end test are the ones a cluster gets.
func TestPrometheusRuleGenerated(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRule(rules)
	if *update {
		if err := os.WriteFile(ruleCRFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ruleCRFile)
	if err != nil {
		t.Fatalf("%v (generate it: make k8s-monitoring)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("k8s/%s differs from what deploy/prometheus/duet-alerts.yaml generates: run make k8s-monitoring", ruleCRFile)
	}
}

// TestMonitoring renders k8s/monitoring, decodes its objects strictly into
// the Prometheus Operator's types, and checks them against the rules file and
// the rendered deployment: every rule is there, the PodMonitor selects every
// duet service's pod and nothing else, on a port each of them names and that
// the NetworkPolicies open to the monitoring namespace.
func TestMonitoring(t *testing.T) {
	m := renderObjects(t, monitoringDir)
	var rule *monitoringv1.PrometheusRule
	var pm *monitoringv1.PodMonitor
	for _, o := range m.objects {
		switch o := o.(type) {
		case *monitoringv1.PrometheusRule:
			rule = o
		case *monitoringv1.PodMonitor:
			pm = o
		default:
			t.Errorf("k8s/monitoring renders a %T (want a PrometheusRule and a PodMonitor)", o)
		}
	}
	if rule == nil || pm == nil {
		t.Fatalf("k8s/monitoring renders PrometheusRule %v, PodMonitor %v: want both", rule != nil, pm != nil)
	}
	checkRules(t, rule)
	for _, dir := range builds(t) {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			checkPodMonitor(t, render(t, dir), pm)
		})
	}
}

// checkRules: the PrometheusRule holds the rules file's groups and alerts in
// order, each with its expression.
func checkRules(t *testing.T, rule *monitoringv1.PrometheusRule) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if rule.Namespace != "duet" {
		t.Errorf("PrometheusRule in namespace %q, want duet", rule.Namespace)
	}
	alerts := 0
	if len(rule.Spec.Groups) != len(file.Groups) {
		t.Fatalf("PrometheusRule has %d groups, %s %d", len(rule.Spec.Groups), rulesFile, len(file.Groups))
	}
	for i, g := range rule.Spec.Groups {
		fg := file.Groups[i]
		if g.Name != fg.Name || len(g.Rules) != len(fg.Rules) {
			t.Errorf("group %d: %s with %d rules, want %s with %d", i, g.Name, len(g.Rules), fg.Name, len(fg.Rules))
			continue
		}
		for j, r := range g.Rules {
			fr := fg.Rules[j]
			if r.Alert == "" || r.Alert != fr.Alert || r.Expr.String() != fr.Expr.String() || r.Expr.String() == "" {
				t.Errorf("group %s rule %d: %q %q, want %q %q", g.Name, j, r.Alert, r.Expr.String(), fr.Alert, fr.Expr.String())
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: no severity label or summary annotation", r.Alert)
			}
			alerts++
		}
	}
	if alerts < 10 {
		t.Errorf("only %d alerts in the PrometheusRule", alerts)
	}
}

// checkPodMonitor: the PodMonitor scrapes every duet service (and not NATS,
// which serves no Prometheus metrics), in the namespace the services run in,
// on a container port they all name, which Prometheus may reach.
func checkPodMonitor(t *testing.T, r *rendered, pm *monitoringv1.PodMonitor) {
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatalf("PodMonitor selector: %v", err)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor has %d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || *ep.Port == "" {
		t.Fatalf("PodMonitor endpoint names no port")
	}
	if ep.Path != "" && ep.Path != "/metrics" {
		t.Errorf("PodMonitor path %q: the services serve /metrics", ep.Path)
	}
	for _, rl := range ep.RelabelConfigs {
		if rl.TargetLabel == "service" {
			t.Errorf("PodMonitor relabels into `service`, the metrics' own role label")
		}
	}
	for _, w := range r.workloads {
		role := w.role()
		_, isService := services[role]
		if sel.Matches(labels.Set(w.tpl.Labels)) != isService {
			t.Errorf("PodMonitor selects %s: %v, want %v", w, !isService, isService)
			continue
		}
		if !isService {
			continue
		}
		if ns := w.namespace; ns != pm.Namespace {
			t.Errorf("%s runs in namespace %q, the PodMonitor is in %q", w, ns, pm.Namespace)
		}
		var cp *corev1.ContainerPort
		for _, c := range w.tpl.Spec.Containers {
			for i, p := range c.Ports {
				if p.Name == *ep.Port {
					cp = &c.Ports[i]
				}
			}
		}
		if cp == nil {
			t.Errorf("%s has no container port named %q", w, *ep.Port)
			continue
		}
		if !monitoringMayScrape(r, &w, cp.ContainerPort) {
			t.Errorf("%s: the NetworkPolicies do not let namespace %s reach port %d", w, monitoringNS, cp.ContainerPort)
		}
	}
	// Every role is there once: checkWorkloads (TestManifests) asserts it.
}

// monitoringMayScrape: some NetworkPolicy selecting w lets pods of the
// monitoring namespace in on port n.
func monitoringMayScrape(r *rendered, w *workload, n int32) bool {
	return policyAdmits(r, w, n, true, func(p networkingv1.NetworkPolicyPeer) bool {
		return p.NamespaceSelector != nil && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == monitoringNS
	})
}

// TestMonitoringSelectorLabel follows k8s/monitoring's own instructions for
// an operator that selects by label (kube-prometheus-stack's release label):
// a kustomization of the user's over it adds the label to both objects and
// leaves the PodMonitor's pod selector as it was.
func TestMonitoringSelectorLabel(t *testing.T) {
	abs, err := filepath.Abs(monitoringDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, abs) // kustomize takes no absolute path
	if err != nil {
		t.Fatal(err)
	}
	k := "resources: [" + rel + "]\nlabels:\n  - pairs: {release: kube-prometheus-stack}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	base := renderObjects(t, monitoringDir)
	m := renderObjects(t, dir)
	if len(m.objects) != len(base.objects) || len(m.objects) != 2 {
		t.Fatalf("%d objects over k8s/monitoring's %d, want 2", len(m.objects), len(base.objects))
	}
	for i, o := range m.objects {
		meta := o.(metav1.Object)
		if meta.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("%s: labels %v, want release=kube-prometheus-stack", meta.GetName(), meta.GetLabels())
		}
		if pm, ok := o.(*monitoringv1.PodMonitor); ok {
			want := base.objects[i].(*monitoringv1.PodMonitor).Spec.Selector
			if !reflect.DeepEqual(pm.Spec.Selector, want) {
				t.Errorf("the label changed the PodMonitor's selector: %+v, want %+v", pm.Spec.Selector, want)
			}
		}
	}
}

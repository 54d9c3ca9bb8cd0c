// Package k8s_test renders the Kubernetes manifests (kustomize base and every
// overlay) with kustomize's Go API, decodes every object strictly into its
// k8s.io/api type, and checks the deployment's security and availability
// rules; it also checks that every DUET_ variable given to a service, here
// and in docker-compose.yml, is one of that service's configuration fields
// with a valid value, and that k8s/monitoring (the Prometheus Operator's
// PodMonitor and PrometheusRule) matches the deployment and the alerting
// rules. No cluster, Docker or network is needed.
package k8s_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/keys"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
)

// roleLabel names a pod's role; the node groups carry the same label.
const roleLabel = "duet.io/role"

// services are the duet roles, each with its configuration struct.
var services = map[string]func() any{
	"sensor":   func() any { return &sensor.Config{} },
	"party0":   func() any { return &party.Config{} },
	"party1":   func() any { return &party.Config{} },
	"actuator": func() any { return &actuator.Config{} },
	"dealer":   func() any { return &dealer.Config{} },
	"plant":    func() any { return &plantsvc.Config{} },
}

// kinds maps each kind the manifests may contain to its API version and
// typed object. Anything else is an error: extend the table (and the checks).
var kinds = map[string]struct {
	apiVersion string
	new        func() any
}{
	"Namespace":               {"v1", func() any { return &corev1.Namespace{} }},
	"ConfigMap":               {"v1", func() any { return &corev1.ConfigMap{} }},
	"Service":                 {"v1", func() any { return &corev1.Service{} }},
	"Deployment":              {"apps/v1", func() any { return &appsv1.Deployment{} }},
	"StatefulSet":             {"apps/v1", func() any { return &appsv1.StatefulSet{} }},
	"HorizontalPodAutoscaler": {"autoscaling/v2", func() any { return &autoscalingv2.HorizontalPodAutoscaler{} }},
	"PodDisruptionBudget":     {"policy/v1", func() any { return &policyv1.PodDisruptionBudget{} }},
	"NetworkPolicy":           {"networking.k8s.io/v1", func() any { return &networkingv1.NetworkPolicy{} }},
	"StorageClass":            {"storage.k8s.io/v1", func() any { return &storagev1.StorageClass{} }},
	// k8s/monitoring, for the Prometheus Operator.
	"PrometheusRule": {"monitoring.coreos.com/v1", func() any { return &monitoringv1.PrometheusRule{} }},
	"PodMonitor":     {"monitoring.coreos.com/v1", func() any { return &monitoringv1.PodMonitor{} }},
}

// builds are the kustomizations rendered: the base and every overlay.
func builds(t *testing.T) []string {
	t.Helper()
	dirs := []string{"base"}
	overlays, err := filepath.Glob("overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	if len(dirs) < 2 {
		t.Fatalf("no overlay under k8s/overlays")
	}
	return dirs
}

// rendered is one kustomization's output, decoded.
type rendered struct {
	dir       string
	objects   []any
	workloads []workload
	policies  []*networkingv1.NetworkPolicy
	pdbs      []*policyv1.PodDisruptionBudget
	hpas      []*autoscalingv2.HorizontalPodAutoscaler
	services  []*corev1.Service
	configs   []*corev1.ConfigMap
}

// workload is a Deployment or StatefulSet.
type workload struct {
	kind, name string
	replicas   int32
	tpl        *corev1.PodTemplateSpec
	sts        *appsv1.StatefulSet
	namespace  string
}

func (w workload) String() string { return w.kind + "/" + w.name }
func (w workload) role() string   { return w.tpl.Labels[roleLabel] }

// render runs kustomize on dir and decodes every object strictly: an unknown
// or misspelled field, or a kind or API version not in kinds, fails; so does
// a deployment without a workload.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	r := renderObjects(t, dir)
	if len(r.workloads) == 0 {
		t.Fatalf("%s renders no workload", dir)
	}
	return r
}

// renderObjects is render for any kustomization.
func renderObjects(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{dir: dir}
	for _, res := range m.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, res.CurId(), err)
		}
		obj, err := decode(y)
		if err != nil {
			t.Errorf("%s: %s/%s: %v", dir, res.GetKind(), res.GetName(), err)
			continue
		}
		r.objects = append(r.objects, obj)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.workloads = append(r.workloads, workload{"Deployment", o.Name, ptrOr(o.Spec.Replicas, 1), &o.Spec.Template, nil, o.Namespace})
		case *appsv1.StatefulSet:
			r.workloads = append(r.workloads, workload{"StatefulSet", o.Name, ptrOr(o.Spec.Replicas, 1), &o.Spec.Template, o, o.Namespace})
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas = append(r.hpas, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ConfigMap:
			r.configs = append(r.configs, o)
		}
	}
	return r
}

// decode strictly unmarshals one object into the type its kind names.
func decode(y []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(y, &tm); err != nil {
		return nil, err
	}
	k, ok := kinds[tm.Kind]
	if !ok {
		return nil, fmt.Errorf("kind %q is not one the test knows (add it to kinds)", tm.Kind)
	}
	if tm.APIVersion != k.apiVersion {
		return nil, fmt.Errorf("%s has apiVersion %q, want %q", tm.Kind, tm.APIVersion, k.apiVersion)
	}
	obj := k.new()
	if err := yaml.UnmarshalStrict(y, obj); err != nil {
		return nil, fmt.Errorf("strict decoding: %w", err)
	}
	return obj, nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// TestStrictDecoderRejectsMisspelledFields checks the checker: a misspelled
// field must fail.
func TestStrictDecoderRejectsMisspelledFields(t *testing.T) {
	good := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      enableServiceLinks: false\n"
	if _, err := decode([]byte(good)); err != nil {
		t.Fatalf("decode(good) = %v", err)
	}
	for _, bad := range []string{
		strings.Replace(good, "enableServiceLinks", "enableServiceLink", 1),
		strings.Replace(good, "apps/v1", "apps/v1beta1", 1),
		strings.Replace(good, "Deployment", "Deploymnet", 1),
	} {
		if _, err := decode([]byte(bad)); err == nil {
			t.Errorf("decode accepted:\n%s", bad)
		}
	}
}

func TestManifests(t *testing.T) {
	for _, dir := range builds(t) {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			r := render(t, dir)
			checkWorkloads(t, r)
			checkParties(t, r)
			checkSecrets(t, r)
			checkNetworkPolicies(t, r)
			checkPDBs(t, r)
			checkNATS(t, r)
			checkDealerHPA(t, r)
			checkEnv(t, r)
			checkStorageClasses(t, r)
		})
	}
}

// checkStorageClasses: a volume claim that names a storage class names one
// the build defines (no cluster has a class of a given name by default: the
// EKS add-on that provisions EBS volumes creates none), and that class
// provisions from EBS.
func checkStorageClasses(t *testing.T, r *rendered) {
	classes := map[string]*storagev1.StorageClass{}
	for _, o := range r.objects {
		if sc, ok := o.(*storagev1.StorageClass); ok {
			classes[sc.Name] = sc
		}
	}
	for _, w := range r.workloads {
		if w.sts == nil {
			continue
		}
		for _, pvc := range w.sts.Spec.VolumeClaimTemplates {
			name := pvc.Spec.StorageClassName
			if name == nil {
				continue // the cluster's default class
			}
			sc, ok := classes[*name]
			if !ok {
				t.Errorf("%s: volume claim %s asks for storage class %q, which the build does not define", w, pvc.Name, *name)
				continue
			}
			if sc.Provisioner != "ebs.csi.aws.com" {
				t.Errorf("storage class %s: provisioner %q, want ebs.csi.aws.com (the add-on in k8s/eks/cluster.yaml)", sc.Name, sc.Provisioner)
			}
		}
	}
}

// tickPath: the roles a tick passes through (the dealers fill the queues
// off it).
var tickPath = map[string]bool{"sensor": true, "party0": true, "party1": true, "actuator": true, "plant": true}

// checkWorkloads: every duet role is deployed once, and every pod and
// container follows the common rules.
func checkWorkloads(t *testing.T, r *rendered) {
	seen := map[string]int{}
	for _, w := range r.workloads {
		role := w.role()
		seen[role]++
		spec := &w.tpl.Spec
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks must be false", w)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken must be false (no service needs the API)", w)
		}
		if len(spec.InitContainers) > 0 {
			t.Errorf("%s: init containers are not expected (check their probes and resources)", w)
		}
		for _, c := range spec.Containers {
			where := fmt.Sprintf("%s container %s", w, c.Name)
			if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Errorf("%s: needs both a liveness and a readiness probe", where)
			}
			if _, ok := services[role]; ok {
				if p := c.LivenessProbe; p != nil && (p.HTTPGet == nil || p.HTTPGet.Path != "/healthz") {
					t.Errorf("%s: liveness probe must GET /healthz", where)
				}
				if p := c.ReadinessProbe; p != nil && (p.HTTPGet == nil || p.HTTPGet.Path != "/readyz") {
					t.Errorf("%s: readiness probe must GET /readyz", where)
				}
			}
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[res]; !ok {
					t.Errorf("%s: no %s request", where, res)
				}
				if _, ok := c.Resources.Limits[res]; !ok {
					t.Errorf("%s: no %s limit", where, res)
				}
			}
			// On the tick's path a CPU limit under 2 throttles: Go runs
			// at least two threads under any limit (GOMAXPROCS =
			// max(ceil(limit), 2)), which use a 1-CPU quota up in half a
			// 100-ms CFS period and stand still for the rest, up to 50 ms,
			// longer than DUET_DEADLINE.
			if tickPath[role] {
				if lim, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && lim.Cmp(resource.MustParse("2")) < 0 {
					t.Errorf("%s: CPU limit %s on the tick's path, want at least 2 (Go's GOMAXPROCS floor under a limit)", where, lim.String())
				}
			}
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s: want allowPrivilegeEscalation false, readOnlyRootFilesystem true, capabilities drop ALL", where)
			}
			// The namespace enforces the restricted Pod Security Standard:
			// non-root and the runtime's seccomp profile, for every pod.
			psc := w.tpl.Spec.SecurityContext
			nonRoot := psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot && (psc.RunAsUser == nil || *psc.RunAsUser != 0)
			seccomp := psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
			if !nonRoot || !seccomp {
				t.Errorf("%s: the restricted Pod Security Standard wants runAsNonRoot (no runAsUser 0) and seccomp RuntimeDefault", where)
			}
			if c.Image == "" || strings.HasSuffix(c.Image, ":latest") && r.dir != "base" {
				t.Errorf("%s: image %q: overlays pin a tag", where, c.Image)
			}
		}
	}
	for role := range services {
		if seen[role] != 1 {
			t.Errorf("role %s is deployed by %d workloads, want 1", role, seen[role])
		}
	}
	for role, n := range seen {
		if _, ok := services[role]; !ok && role != "nats" {
			t.Errorf("workload with unknown %s %q (%d)", roleLabel, role, n)
		}
	}
}

func find(r *rendered, role string) *workload {
	for i := range r.workloads {
		if r.workloads[i].role() == role {
			return &r.workloads[i]
		}
	}
	return nil
}

// nodeRoles returns the values of roleLabel a pod's required node affinity
// allows (nil: any node).
func nodeRoles(w *workload) []string {
	a := w.tpl.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		found := false
		for _, e := range term.MatchExpressions {
			if e.Key == roleLabel && e.Operator == corev1.NodeSelectorOpIn {
				out = append(out, e.Values...)
				found = true
			}
		}
		if !found {
			return nil // this term allows nodes of any role
		}
	}
	return out
}

// antiAffine reports whether w must not share topologyKey with other.
func antiAffine(w, other *workload, topologyKey string) bool {
	a := w.tpl.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != topologyKey || term.NamespaceSelector != nil || len(term.Namespaces) > 0 {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(other.tpl.Labels)) {
			return true
		}
	}
	return false
}

// checkParties: P0 and P1 are single-replica StatefulSets, in different
// zones (required anti-affinity), only on their own node group and never on
// a dealer's node.
func checkParties(t *testing.T, r *rendered) {
	dealerW := find(r, "dealer")
	for i := 0; i < 2; i++ {
		me, other := find(r, fmt.Sprintf("party%d", i)), find(r, fmt.Sprintf("party%d", 1-i))
		if me == nil || other == nil || dealerW == nil {
			t.Fatalf("missing party or dealer workload")
		}
		if me.kind != "StatefulSet" || me.replicas != 1 {
			t.Errorf("%s: want a StatefulSet with 1 replica, have %s with %d", me, me.kind, me.replicas)
		}
		if !antiAffine(me, other, "topology.kubernetes.io/zone") {
			t.Errorf("%s: no required pod anti-affinity against %s across topology.kubernetes.io/zone", me, other)
		}
		if !antiAffine(me, dealerW, "kubernetes.io/hostname") {
			t.Errorf("%s: no required pod anti-affinity against the dealers' nodes", me)
		}
		mine := nodeRoles(me)
		if len(mine) != 1 || mine[0] != me.role() {
			t.Errorf("%s: required node affinity %s=%v, want exactly [%s]", me, roleLabel, mine, me.role())
		}
		for _, w := range r.workloads {
			if w.role() == me.role() {
				continue
			}
			theirs := nodeRoles(&w)
			if theirs == nil {
				t.Errorf("%s: no required node affinity on %s: it could land on %s's nodes", w, roleLabel, me)
			}
			for _, v := range theirs {
				if slices.Contains(mine, v) {
					t.Errorf("%s may run on %s's node group %s=%s", w, me, roleLabel, v)
				}
			}
		}
	}
}

// mount is a Secret as a pod sees it.
type mount struct {
	secret string
	items  []corev1.KeyToPath
	mode   *int32
	volume string
}

func secretsOf(spec *corev1.PodSpec) []mount {
	var out []mount
	for _, v := range spec.Volumes {
		if s := v.Secret; s != nil {
			out = append(out, mount{s.SecretName, s.Items, s.DefaultMode, v.Name})
		}
		if p := v.Projected; p != nil {
			for _, src := range p.Sources {
				if s := src.Secret; s != nil {
					out = append(out, mount{s.Name, s.Items, p.DefaultMode, v.Name})
				}
			}
		}
	}
	for _, c := range spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				out = append(out, mount{secret: e.ValueFrom.SecretKeyRef.Name})
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				out = append(out, mount{secret: e.SecretRef.Name})
			}
		}
	}
	return out
}

// checkSecrets: one key Secret per role, mounted by that role's pods only,
// exposing only <role>.seed and <role>.nats.nk (its end-to-end key and its
// NATS user) with a mode keys.Load accepts; no Secret is shared between
// roles; the keys directory is DUET_KEYS_DIR.
func checkSecrets(t *testing.T, r *rendered) {
	users := map[string][]string{}
	for _, w := range r.workloads {
		role := w.role()
		own := false
		for _, m := range secretsOf(&w.tpl.Spec) {
			users[m.secret] = append(users[m.secret], role)
			// The NATS server's TLS key: its group (fsGroup, the server's
			// user) may read it, others not (the default mode is 0644).
			if m.secret == "duet-nats-tls" && (m.mode == nil || *m.mode&0o007 != 0) {
				t.Errorf("%s: %s must be mounted with a mode without other bits (defaultMode 0440)", w, m.secret)
			}
			if owner, ok := strings.CutPrefix(m.secret, "duet-key-"); ok {
				if owner != role {
					t.Errorf("%s (%s) mounts %s, the key of %s", w, role, m.secret, owner)
					continue
				}
				own = true
				want := role + ".seed"
				if len(m.items) != 2 || m.items[0].Key != want || m.items[0].Path != want ||
					m.items[1].Key != role+".nats.nk" || m.items[1].Path != role+".nats.nk" {
					t.Errorf("%s: %s must project exactly %s and %s.nats.nk (items %v)", w, m.secret, want, role, m.items)
				}
				mode := m.mode
				if len(m.items) >= 1 && m.items[0].Mode != nil {
					mode = m.items[0].Mode
				}
				if mode == nil || *mode&0o077 != 0 {
					t.Errorf("%s: %s must be mounted with a mode without group or other bits", w, want)
				} else {
					checkSeedReadable(t, &w, want, *mode)
				}
				checkKeysDir(t, &w, m.volume)
			}
		}
		if _, isService := services[role]; isService && !own {
			t.Errorf("%s mounts no duet-key-%s Secret", w, role)
		}
	}
	for secret, roles := range users {
		slices.Sort(roles)
		if roles = slices.Compact(roles); len(roles) > 1 {
			t.Errorf("Secret %s is mounted by several roles: %v", secret, roles)
		}
	}
	if roles := users["duet-controller"]; len(roles) == 0 || roles[0] != "sensor" {
		t.Errorf("Secret duet-controller (the controller spec) must be mounted by the sensor only, is by %v", roles)
	}
}

// checkKeysDir: the volume holding the seed is mounted at DUET_KEYS_DIR and
// also carries the public keys.
func checkKeysDir(t *testing.T, w *workload, volume string) {
	for _, c := range w.tpl.Spec.Containers {
		dir := envOf(&c)["DUET_KEYS_DIR"]
		ok := false
		for _, vm := range c.VolumeMounts {
			if vm.Name == volume && vm.MountPath == dir && vm.ReadOnly {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s container %s: the key volume %s is not mounted read-only at DUET_KEYS_DIR %q", w, c.Name, volume, dir)
		}
	}
	for _, v := range w.tpl.Spec.Volumes {
		if v.Name != volume {
			continue
		}
		pubs := false
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil && src.ConfigMap.Name == "duet-pubkeys" {
					pubs = true
				}
			}
		}
		if !pubs {
			t.Errorf("%s: volume %s lacks the ConfigMap duet-pubkeys (every role's .pub)", w, volume)
		}
	}
}

func envOf(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// selects reports whether a policy applies to w.
func selects(np *networkingv1.NetworkPolicy, w *workload) bool {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	return err == nil && sel.Matches(labels.Set(w.tpl.Labels))
}

type port struct {
	proto string
	n     int32
}

func (p port) String() string { return fmt.Sprintf("%d/%s", p.n, p.proto) }

func portsOf(ps []networkingv1.NetworkPolicyPort) ([]port, bool) {
	if len(ps) == 0 {
		return nil, false // every port
	}
	var out []port
	for _, p := range ps {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		if p.Port == nil || p.EndPort != nil || p.Port.IntVal == 0 {
			return nil, false
		}
		out = append(out, port{proto, p.Port.IntVal})
	}
	return out, true
}

// checkNetworkPolicies: a default deny for every pod in both directions, and
// no allow rule opens more than the loop needs.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	deny := false
	for _, np := range r.policies {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
			slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) &&
			len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 {
			deny = true
		}
	}
	if !deny {
		t.Errorf("no default-deny NetworkPolicy (podSelector {}, policyTypes Ingress and Egress, no rules)")
	}
	dns := []port{{"UDP", 53}, {"TCP", 53}}
	allowed := func(role string) (in, out []port) {
		switch {
		case role == "nats":
			return []port{{"TCP", 4222}, {"TCP", 6222}, {"TCP", 8222}}, append([]port{{"TCP", 6222}}, dns...)
		default:
			return []port{{"TCP", 9100}}, append([]port{{"TCP", 4222}}, dns...)
		}
	}
	for _, w := range r.workloads {
		in, out := allowed(w.role())
		for _, np := range r.policies {
			if !selects(np, &w) {
				continue
			}
			for _, rule := range np.Spec.Ingress {
				ps, ok := portsOf(rule.Ports)
				if !ok || len(rule.From) == 0 {
					t.Errorf("NetworkPolicy %s opens every port or every source into %s", np.Name, w)
				}
				for _, p := range ps {
					if !slices.Contains(in, p) {
						t.Errorf("NetworkPolicy %s opens %s into %s (allowed: %v)", np.Name, p, w, in)
					}
				}
			}
			for _, rule := range np.Spec.Egress {
				ps, ok := portsOf(rule.Ports)
				if !ok || len(rule.To) == 0 {
					t.Errorf("NetworkPolicy %s opens every port or every destination out of %s", np.Name, w)
				}
				for _, p := range ps {
					if !slices.Contains(out, p) {
						t.Errorf("NetworkPolicy %s opens %s out of %s (allowed: %v)", np.Name, p, w, out)
					}
				}
			}
		}
	}
	// Each duet service can reach NATS on 4222, and NATS lets it in.
	natsW := find(r, "nats")
	for role := range services {
		w := find(r, role)
		if w == nil || natsW == nil {
			continue
		}
		if !policyAllows(r, w, natsW, 4222, false) || !policyAllows(r, natsW, w, 4222, true) {
			t.Errorf("%s cannot reach NATS on 4222 through the NetworkPolicies", w)
		}
	}
	if natsW != nil && (!policyAllows(r, natsW, natsW, 6222, false) || !policyAllows(r, natsW, natsW, 6222, true)) {
		t.Errorf("the NATS servers cannot reach each other on 6222")
	}
}

// policyAllows: egress from w to peer on port (ingress: into w from peer).
func policyAllows(r *rendered, w, peer *workload, n int32, ingress bool) bool {
	return policyAdmits(r, w, n, ingress, func(p networkingv1.NetworkPolicyPeer) bool {
		if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		return err == nil && sel.Matches(labels.Set(peer.tpl.Labels))
	})
}

// policyAdmits: some NetworkPolicy selecting w has a rule in the given
// direction that names TCP port n and a peer for which matches holds.
func policyAdmits(r *rendered, w *workload, n int32, ingress bool, matches func(networkingv1.NetworkPolicyPeer) bool) bool {
	for _, np := range r.policies {
		if !selects(np, w) {
			continue
		}
		var rules []struct {
			peers []networkingv1.NetworkPolicyPeer
			ports []networkingv1.NetworkPolicyPort
		}
		if ingress {
			for _, ru := range np.Spec.Ingress {
				rules = append(rules, struct {
					peers []networkingv1.NetworkPolicyPeer
					ports []networkingv1.NetworkPolicyPort
				}{ru.From, ru.Ports})
			}
		} else {
			for _, ru := range np.Spec.Egress {
				rules = append(rules, struct {
					peers []networkingv1.NetworkPolicyPeer
					ports []networkingv1.NetworkPolicyPort
				}{ru.To, ru.Ports})
			}
		}
		for _, ru := range rules {
			ps, _ := portsOf(ru.ports)
			if !slices.Contains(ps, port{"TCP", n}) {
				continue
			}
			if slices.ContainsFunc(ru.peers, matches) {
				return true
			}
		}
	}
	return false
}

// checkPDBs: a PodDisruptionBudget covers every workload.
func checkPDBs(t *testing.T, r *rendered) {
	for _, w := range r.workloads {
		n := 0
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(w.tpl.Labels)) {
				n++
				if p.Spec.MinAvailable == nil && p.Spec.MaxUnavailable == nil {
					t.Errorf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", p.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s is covered by %d PodDisruptionBudgets, want 1", w, n)
		}
	}
}

// checkNATS: a JetStream cluster of three with a volume each, routes to
// every server, a headless service, and streams no more replicated than
// there are servers.
func checkNATS(t *testing.T, r *rendered) {
	w := find(r, "nats")
	if w == nil || w.sts == nil {
		t.Fatalf("NATS must be a StatefulSet labelled %s=nats", roleLabel)
	}
	if w.replicas != 3 {
		t.Errorf("%s: %d replicas, want 3", w, w.replicas)
	}
	if len(w.sts.Spec.VolumeClaimTemplates) == 0 {
		t.Errorf("%s: no volumeClaimTemplates for the JetStream store", w)
	}
	headless := false
	for _, s := range r.services {
		if s.Name == w.sts.Spec.ServiceName && s.Spec.ClusterIP == corev1.ClusterIPNone && s.Spec.PublishNotReadyAddresses {
			headless = true
		}
	}
	if !headless {
		t.Errorf("%s: service %q must be headless and publish not-ready addresses", w, w.sts.Spec.ServiceName)
	}
	var conf string
	for _, cm := range r.configs {
		if c, ok := cm.Data["nats.conf"]; ok {
			conf = c
		}
	}
	if !strings.Contains(conf, "jetstream") {
		t.Errorf("nats.conf: JetStream is not enabled")
	}
	if !strings.Contains(conf, "\nno_sublist_cache: true\n") {
		t.Errorf("nats.conf: the subject-match cache is enabled (no_sublist_cache: true missing)")
	}
	for i := int32(0); i < w.replicas; i++ {
		route := fmt.Sprintf("nats://%s-%d.%s:6222", w.name, i, w.sts.Spec.ServiceName)
		if !strings.Contains(conf, route) {
			t.Errorf("nats.conf: no cluster route %s", route)
		}
	}
	// JetStream replicas: the sensor's queue and set-up records, the
	// parties' persisted state, replicated on every server (the base as
	// well: it runs three, and its NATS budget lets one be drained).
	for role, key := range map[string]string{"sensor": "DUET_REPLICAS", "party0": "DUET_STATE_REPLICAS", "party1": "DUET_STATE_REPLICAS"} {
		s := find(r, role)
		if s == nil {
			continue
		}
		for _, c := range s.tpl.Spec.Containers {
			var n int32 = 1
			if v, ok := envOf(&c)[key]; ok {
				fmt.Sscan(v, &n)
			}
			if n > w.replicas {
				t.Errorf("%s: %s=%d exceeds the %d NATS servers", role, key, n, w.replicas)
			}
			if n != w.replicas {
				t.Errorf("%s: %s %s=%d, want it replicated on all %d servers", r.dir, role, key, n, w.replicas)
			}
		}
	}
}

// checkDealerHPA: the dealers, and only they, scale horizontally.
func checkDealerHPA(t *testing.T, r *rendered) {
	if len(r.hpas) != 1 {
		t.Fatalf("%d HorizontalPodAutoscalers, want 1 (dealer)", len(r.hpas))
	}
	h := r.hpas[0]
	ref := h.Spec.ScaleTargetRef
	if ref.Kind != "Deployment" || ref.Name != "dealer" || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA %s scales %s %s/%s, want the dealer Deployment", h.Name, ref.APIVersion, ref.Kind, ref.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas || len(h.Spec.Metrics) == 0 {
		t.Errorf("HPA %s: want minReplicas >= 1, maxReplicas >= minReplicas and a metric", h.Name)
	}
}

// checkEnv: every DUET_ variable of a duet container is a field of that
// service's Config, with a value the service accepts; others have none.
func checkEnv(t *testing.T, r *rendered) {
	for _, w := range r.workloads {
		for _, c := range w.tpl.Spec.Containers {
			env := map[string]string{}
			for _, e := range c.Env {
				if !strings.HasPrefix(e.Name, config.Prefix+"_") {
					continue
				}
				if e.ValueFrom != nil {
					t.Errorf("%s: %s comes from valueFrom; set DUET_ values directly", w, e.Name)
				}
				env[e.Name] = e.Value
			}
			if len(c.EnvFrom) > 0 {
				t.Errorf("%s container %s: envFrom hides which DUET_ variables are set", w, c.Name)
			}
			checkServiceEnv(t, fmt.Sprintf("%s: %s container %s", r.dir, w, c.Name), w.role(), env)
		}
	}
}

// checkServiceEnv validates env against the Config of role (none for other roles).
func checkServiceEnv(t *testing.T, where, role string, env map[string]string) {
	t.Helper()
	newCfg, ok := services[role]
	if !ok {
		for k := range env {
			t.Errorf("%s: %s set, but %q is not a duet service", where, k, role)
		}
		return
	}
	known := map[string]bool{}
	for _, k := range config.Keys(newCfg()) {
		known[k] = true
	}
	var unknown []string
	for k := range env {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		t.Errorf("%s: %v are not configuration fields of the %s service", where, unknown, role)
		return
	}
	if err := loadWith(newCfg(), env); err != nil {
		t.Errorf("%s: the %s service would refuse its configuration: %v", where, role, err)
	}
	if role == "party0" || role == "party1" {
		if want := role[len(role)-1:]; env["DUET_PARTY"] != want {
			t.Errorf("%s: DUET_PARTY=%q, want %s", where, env["DUET_PARTY"], want)
		}
	}
}

// loadWith runs config.Load with exactly env as the DUET_ environment.
func loadWith(cfg any, env map[string]string) error {
	saved := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.Prefix+"_") {
			saved[k] = v
			os.Unsetenv(k)
		}
	}
	defer func() {
		for k := range env {
			os.Unsetenv(k)
		}
		for k, v := range saved {
			os.Setenv(k, v)
		}
	}()
	for k, v := range env {
		os.Setenv(k, v)
	}
	return config.Load(cfg, nil, io.Discard)
}

// TestComposeEnv checks docker-compose.yml, with the e2e override on top:
// each duet service gets only its own DUET_ variables, with valid values;
// the others get none; metrics are published on 127.0.0.1 only.
func TestComposeEnv(t *testing.T) {
	envs := map[string]map[string]string{}
	for _, file := range []string{"../docker-compose.yml", "../scripts/e2e.compose.yml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Services map[string]map[string]any `json:"services"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(doc.Services) == 0 {
			t.Fatalf("%s: no services", file)
		}
		for name, svc := range doc.Services {
			env, err := composeEnv(svc["environment"])
			if err != nil {
				t.Errorf("%s: service %s: %v", file, name, err)
				continue
			}
			if envs[name] == nil {
				envs[name] = map[string]string{}
			}
			for k, v := range env {
				envs[name][k] = v // compose merges an override's environment by key
			}
			ports, _ := svc["ports"].([]any)
			for _, p := range ports {
				if s := fmt.Sprint(p); !strings.HasPrefix(s, "127.0.0.1:") {
					t.Errorf("%s: service %s: port %q is not bound to 127.0.0.1", file, name, s)
				}
			}
		}
	}
	for role := range services {
		if envs[role] == nil {
			t.Errorf("docker-compose.yml has no service %s", role)
		} else if envs[role]["DUET_NATS_URL"] == "" {
			t.Errorf("docker-compose.yml: service %s has no DUET_NATS_URL (missed the common environment?)", role)
		}
	}
	for name, env := range envs {
		checkServiceEnv(t, "docker-compose.yml: service "+name, name, env)
	}
}

// composeDefault matches compose's "${NAME:-default}" interpolation.
var composeDefault = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}`)

// composeEnv reads a compose environment: a map or a list of KEY=VALUE.
// Only DUET_ variables are returned.
func composeEnv(v any) (map[string]string, error) {
	env := map[string]string{}
	add := func(k, val string) {
		if strings.HasPrefix(k, config.Prefix+"_") {
			// A value "${NAME:-default}" is compose's interpolation: with
			// NAME unset, as here, it is the default.
			env[k] = composeDefault.ReplaceAllString(val, "$1")
		}
	}
	switch e := v.(type) {
	case nil:
	case map[string]any:
		for k, val := range e {
			s := ""
			if val != nil {
				s = fmt.Sprint(val)
			}
			add(k, s)
		}
	case []any:
		for _, kv := range e {
			k, val, _ := strings.Cut(fmt.Sprint(kv), "=")
			add(k, val)
		}
	default:
		return nil, fmt.Errorf("environment is a %T", v)
	}
	return env, nil
}

// TestEKSClusterConfig checks k8s/eks/cluster.yaml against the manifests:
// a node group for every role label the pods require, P0's and P1's in
// disjoint zones and tainted for their party alone.
func TestEKSClusterConfig(t *testing.T) {
	b, err := os.ReadFile("eks/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		APIVersion        string   `json:"apiVersion"`
		Kind              string   `json:"kind"`
		AvailabilityZones []string `json:"availabilityZones"`
		ManagedNodeGroups []struct {
			Name              string            `json:"name"`
			AvailabilityZones []string          `json:"availabilityZones"`
			Labels            map[string]string `json:"labels"`
			Taints            []struct {
				Key, Value, Effect string
			} `json:"taints"`
		} `json:"managedNodeGroups"`
	}
	if err := yaml.Unmarshal(b, &cc); err != nil {
		t.Fatal(err)
	}
	if cc.Kind != "ClusterConfig" || !strings.HasPrefix(cc.APIVersion, "eksctl.io/") {
		t.Fatalf("cluster.yaml is %s %s, want an eksctl ClusterConfig", cc.APIVersion, cc.Kind)
	}
	zones := map[string][]string{}
	tainted := map[string]bool{}
	for _, ng := range cc.ManagedNodeGroups {
		role := ng.Labels[roleLabel]
		if role == "" {
			t.Errorf("node group %s has no %s label", ng.Name, roleLabel)
			continue
		}
		zones[role] = append(zones[role], ng.AvailabilityZones...)
		for _, tn := range ng.Taints {
			if tn.Key == roleLabel && tn.Value == role && tn.Effect == "NoSchedule" {
				tainted[role] = true
			}
		}
	}
	r := render(t, "overlays/eks")
	for _, w := range r.workloads {
		for _, role := range nodeRoles(&w) {
			if _, ok := zones[role]; !ok {
				t.Errorf("%s needs nodes labelled %s=%s: no such node group", w, roleLabel, role)
			}
		}
	}
	for _, p := range []string{"party0", "party1"} {
		if !tainted[p] {
			t.Errorf("node group %s is not tainted %s=%s:NoSchedule", p, roleLabel, p)
		}
		if len(zones[p]) == 0 {
			t.Errorf("node group %s names no availability zone", p)
		}
	}
	for _, z := range zones["party0"] {
		if slices.Contains(zones["party1"], z) {
			t.Errorf("party0 and party1 node groups share zone %s", z)
		}
	}
}

// checkSeedReadable: the kubelet writes a Secret volume's files as root with
// the mode asked for and, if the pod has an fsGroup, gives them that group
// and adds group read (0440). The service must run as a non-root user that
// can read its seed, and keys.Load must accept what it finds.
func checkSeedReadable(t *testing.T, w *workload, seed string, mode int32) {
	t.Helper()
	sc := w.tpl.Spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: must run as a non-root user (runAsUser != 0, runAsNonRoot)", w)
		return
	}
	perm := os.FileMode(mode)
	if sc.FSGroup == nil {
		t.Errorf("%s: without an fsGroup, %s (root-owned, mode %04o) is unreadable by uid %d", w, seed, perm, *sc.RunAsUser)
		return
	}
	perm |= 0o440
	if !keys.SeedModeAllowed(perm, true) {
		t.Errorf("%s: keys.Load refuses %s as the kubelet leaves it (root, group %d, mode %04o)", w, seed, *sc.FSGroup, perm)
	}
	if sc.RunAsGroup == nil || *sc.RunAsGroup != *sc.FSGroup {
		t.Errorf("%s: runAsGroup should be the fsGroup (%v)", w, *sc.FSGroup)
	}
}

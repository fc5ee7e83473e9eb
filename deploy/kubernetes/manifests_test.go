package kubernetes

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/embed-stack/embed-stack/internal/e2e"
)

// manifests are every object of the directory, decoded strictly.
type manifests struct {
	deploy  *appsv1.Deployment
	service *corev1.Service
	hpa     *autoscalingv2.HorizontalPodAutoscaler
	pdb     *policyv1.PodDisruptionBudget
	adapter *corev1.ConfigMap
	kust    *kustomization
	job     *batchv1.Job                  // embed-job.yaml, applied per job
	pvc     *corev1.PersistentVolumeClaim // embed-job.yaml's volume
	files   []string
}

// kustomization is the part of kustomize's Kustomization these manifests use; any
// other field fails the strict decode.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// adapterConfig is the Prometheus adapter's rule file (its "custom" rules).
type adapterConfig struct {
	Rules []struct {
		SeriesQuery string `json:"seriesQuery"`
		Resources   struct {
			Overrides map[string]struct {
				Resource string `json:"resource"`
			} `json:"overrides"`
		} `json:"resources"`
		Name struct {
			Matches string `json:"matches"`
			As      string `json:"as"`
		} `json:"name"`
		MetricsQuery string `json:"metricsQuery"`
	} `json:"rules"`
}

// decodeStrict decodes one YAML document into out, refusing unknown and duplicate
// fields and values of the wrong type.
func decodeStrict(t *testing.T, where string, doc []byte, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, out); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	m := &manifests{files: files}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			where := f + " document " + string(rune('1'+i))
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var dst any
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				m.deploy = &appsv1.Deployment{}
				dst = m.deploy
			case "v1 Service":
				m.service = &corev1.Service{}
				dst = m.service
			case "autoscaling/v2 HorizontalPodAutoscaler":
				m.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				dst = m.hpa
			case "policy/v1 PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				dst = m.pdb
			case "v1 ConfigMap":
				m.adapter = &corev1.ConfigMap{}
				dst = m.adapter
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				m.kust = &kustomization{}
				dst = m.kust
			case "batch/v1 Job":
				m.job = &batchv1.Job{}
				dst = m.job
			case "v1 PersistentVolumeClaim":
				m.pvc = &corev1.PersistentVolumeClaim{}
				dst = m.pvc
			default:
				t.Fatalf("%s: unexpected %s %s", where, tm.APIVersion, tm.Kind)
			}
			decodeStrict(t, where, []byte(doc), dst)
		}
	}
	for name, missing := range map[string]bool{"Deployment": m.deploy == nil, "Service": m.service == nil,
		"HorizontalPodAutoscaler": m.hpa == nil, "PodDisruptionBudget": m.pdb == nil, "adapter ConfigMap": m.adapter == nil, "Kustomization": m.kust == nil,
		"Job": m.job == nil, "PersistentVolumeClaim": m.pvc == nil} {
		if missing {
			t.Errorf("no %s among %v", name, files)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// TestStrictDecodeRefusesMistakes shows the validator can fail: a misspelt field, a
// wrong type and a bad quantity are refused.
func TestStrictDecodeRefusesMistakes(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n", `unknown field "replica"`},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nspec:\n  replicas: two\n", "cannot unmarshal"},
		{"bad quantity", "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    resources:\n      requests:\n        memory: 2GiB\n", "quantities must match"},
		{"duplicate key", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n", "already set in map"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var obj any
			switch {
			case strings.Contains(tt.doc, "Deployment"):
				obj = &appsv1.Deployment{}
			case strings.Contains(tt.doc, "Pod"):
				obj = &corev1.Pod{}
			default:
				obj = &corev1.Service{}
			}
			err := yaml.UnmarshalStrict([]byte(tt.doc), obj)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestManifestsAreConsistent checks the objects against each other and against what
// the server serves.
func TestManifestsAreConsistent(t *testing.T) {
	m := load(t)
	d := m.deploy
	podLabels := labels.Set(d.Spec.Template.Labels)
	selects := func(what string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s selector %v does not select the pods (labels %v): %v", what, sel, podLabels, err)
		}
	}
	selects("Deployment", d.Spec.Selector)
	selects("PodDisruptionBudget", m.pdb.Spec.Selector)
	if s := labels.SelectorFromSet(m.service.Spec.Selector); s.Empty() || !s.Matches(podLabels) {
		t.Errorf("Service selector %v does not select the pods", m.service.Spec.Selector)
	}

	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want http 8080", c.Ports)
	}
	if !slices.Equal(c.Args, []string{"serve", "--addr=0.0.0.0:8080"}) {
		t.Errorf("args %v, want serve --addr=0.0.0.0:8080 (the port the probes and Service use)", c.Args)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/health"}, {"liveness", c.LivenessProbe, "/health"}, {"readiness", c.ReadinessProbe, "/ready"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on port http", p.name, p.probe, p.path)
		}
	}
	// The startup probe must outlast a model download on a slow link: 10 minutes.
	if sp := c.StartupProbe; sp != nil && sp.PeriodSeconds*sp.FailureThreshold < 600 {
		t.Errorf("startup probe allows %ds, want at least 600s for the model download", sp.PeriodSeconds*sp.FailureThreshold)
	}
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Memory().Cmp(resource.MustParse("2Gi")) < 0 || lim.Memory().Cmp(*req.Memory()) < 0 {
		t.Errorf("memory request %v limit %v: want ≥ 2Gi (docs/scaling.md) and limit ≥ request", req.Memory(), lim.Memory())
	}
	if cpu := req.Cpu().Value(); strings.TrimSpace(envOf(c, "EMBED_STACK_THREADS")) != req.Cpu().String() {
		t.Errorf("EMBED_STACK_THREADS %q, want the CPU request %d: llama.cpp should use the cores it is given", envOf(c, "EMBED_STACK_THREADS"), cpu)
	}

	if ref := m.service.Spec.Ports; len(ref) != 1 || ref[0].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v, want one targeting port http", ref)
	}
	st := m.hpa.Spec.ScaleTargetRef
	if st.APIVersion != "apps/v1" || st.Kind != "Deployment" || st.Name != d.Name {
		t.Errorf("HPA scales %+v, want the Deployment %s", st, d.Name)
	}
	if min := m.hpa.Spec.MinReplicas; min == nil || *min < 2 || *min > m.hpa.Spec.MaxReplicas {
		t.Errorf("HPA replicas %v..%d: want at least 2, so the PDB's one disruption leaves a replica serving", min, m.hpa.Spec.MaxReplicas)
	}
	if m.pdb.Spec.MaxUnavailable == nil || m.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", m.pdb.Spec.MaxUnavailable)
	}
	if len(m.hpa.Spec.Metrics) != 1 || m.hpa.Spec.Metrics[0].Pods == nil {
		t.Fatalf("HPA metrics %+v, want one Pods metric", m.hpa.Spec.Metrics)
	}
	hpaMetric := m.hpa.Spec.Metrics[0].Pods.Metric.Name

	var ac adapterConfig
	decodeStrict(t, "prometheus-adapter.yaml config.yaml", []byte(m.adapter.Data["config.yaml"]), &ac)
	if len(ac.Rules) != 1 {
		t.Fatalf("%d adapter rules, want 1", len(ac.Rules))
	}
	rule := ac.Rules[0]
	if rule.Name.As != hpaMetric {
		t.Errorf("the adapter exposes %q, the HPA reads %q", rule.Name.As, hpaMetric)
	}
	if rule.Resources.Overrides["pod"].Resource != "pod" || rule.Resources.Overrides["namespace"].Resource != "namespace" {
		t.Errorf("adapter resource overrides %+v, want pod and namespace", rule.Resources.Overrides)
	}
	series := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{`).FindStringSubmatch(rule.SeriesQuery)
	if series == nil || !regexp.MustCompile(rule.Name.Matches).MatchString(series[1]) {
		t.Fatalf("adapter seriesQuery %q and name.matches %q disagree", rule.SeriesQuery, rule.Name.Matches)
	}

	var resources []string
	for _, f := range m.files {
		if f != "kustomization.yaml" && f != "prometheus-adapter.yaml" && f != "embed-job.yaml" {
			resources = append(resources, f)
		}
	}
	got := slices.Clone(m.kust.Resources)
	slices.Sort(got)
	if !slices.Equal(got, resources) {
		t.Errorf("kustomization resources %v, want %v", m.kust.Resources, resources)
	}

	t.Run("the binary accepts the Deployment's settings", func(t *testing.T) {
		bin, _ := e2e.Paths(t)
		env := os.Environ()
		for _, e := range c.Env {
			env = append(env, e.Name+"="+e.Value)
		}
		cmd := exec.Command(bin, append(slices.Clone(c.Args), "--print-config")...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v --print-config: %v\n%s", c.Args, err, out)
		}
		for _, e := range c.Env {
			if !strings.HasPrefix(e.Name, "EMBED_STACK_") {
				continue
			}
			key := strings.ToLower(strings.TrimPrefix(e.Name, "EMBED_STACK_"))
			// A list setting (model) prints as a TOML array of the one value.
			want := regexp.MustCompile(`(?m)^` + key + ` +=  *\[?"?` + regexp.QuoteMeta(e.Value) + `"?\]? +# env$`)
			if !want.Match(out) {
				t.Errorf("%s=%s is not in effect:\n%s", e.Name, e.Value, out)
			}
		}
		if !regexp.MustCompile(`(?m)^addr +=  *"0\.0\.0\.0:8080" +# flag$`).Match(out) {
			t.Errorf("--addr=0.0.0.0:8080 not in effect:\n%s", out)
		}

		// The same settings on loopback with the test model: the probed paths answer,
		// and after one request /metrics holds the series the adapter reads.
		s := e2e.Serve(t)
		for _, path := range []string{"/health", "/ready"} {
			if code, _ := get(t, s.URL+path); code != http.StatusOK {
				t.Errorf("GET %s: %d, want 200", path, code)
			}
		}
		e2e.Embeddings(t, s.URL, map[string]any{"input": "warm up the metric", "model": "m"})
		code, metrics := get(t, s.URL+"/metrics")
		line := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series[1]) + `\{[^}]*route="warm"[^}]*\} `)
		if code != http.StatusOK || !line.MatchString(metrics) {
			t.Errorf("GET /metrics (%d) has no %s{route=\"warm\"} series for the adapter", code, series[1])
		}
		// The adapter's name must not be one /metrics serves: Prometheus queries and
		// dashboards would then mix two meanings under one name.
		if own := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(rule.Name.As) + `[{ ]`); own.MatchString(metrics) {
			t.Errorf("the adapter exposes %s, a name /metrics also serves:\n%s", rule.Name.As, own.FindString(metrics))
		}
	})
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

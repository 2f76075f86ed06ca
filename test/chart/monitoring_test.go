package chart

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// monitoringKinds are the kinds only monitoring.enabled renders.
var monitoringKinds = []string{"ServiceMonitor", "PrometheusRule"}

func TestMonitoringOffByDefault(t *testing.T) {
	for _, o := range parseObjects(t, mustTemplate(t)) {
		if slices.Contains(monitoringKinds, o.GetKind()) || strings.HasSuffix(o.GetName(), "-metrics-reader") || strings.HasSuffix(o.GetName(), "-dashboard") {
			t.Errorf("%s %s rendered with the default values; monitoring is off by default", o.GetKind(), o.GetName())
		}
	}
}

// Every component gets a ServiceMonitor that scrapes HTTPS with Prometheus's token, selecting
// a metrics Service that points at the component's metrics port.
func TestServiceMonitorPerComponent(t *testing.T) {
	objs := parseObjects(t, mustTemplate(t, "-f", filepath.Join("testdata", "monitoring.values.yaml")))
	services := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == "Service" {
			services[o.GetName()] = o
		}
	}
	var components []string
	for _, o := range objs {
		if o.GetKind() != "ServiceMonitor" {
			continue
		}
		component := o.GetLabels()["app.kubernetes.io/component"]
		components = append(components, component)
		if o.GetLabels()["release"] != "kube-prometheus-stack" {
			t.Errorf("ServiceMonitor %s lacks monitoring.serviceMonitor.labels: %v", o.GetName(), o.GetLabels())
		}
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints, want 1", o.GetName(), len(eps))
		}
		ep := eps[0].(map[string]any)
		if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || ep["port"] != "metrics" {
			t.Errorf("ServiceMonitor %s endpoint %v: want https, port metrics and Prometheus's token", o.GetName(), ep)
		}
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
		var matched []string
		for name, svc := range services {
			labels := svc.GetLabels()
			all := true
			for k, v := range sel {
				all = all && labels[k] == v
			}
			if all {
				matched = append(matched, name)
			}
		}
		if len(matched) != 1 || !strings.HasSuffix(matched[0], "-metrics") {
			t.Errorf("ServiceMonitor %s selects Services %v, want its one metrics Service", o.GetName(), matched)
		}
	}
	slices.Sort(components)
	if want := []string{"agent", "controller", "scheduler", "webhook"}; !slices.Equal(components, want) {
		t.Errorf("ServiceMonitors for %v, want %v", components, want)
	}

	var reader, binding bool
	for _, o := range objs {
		switch {
		case o.GetKind() == "ClusterRole" && strings.HasSuffix(o.GetName(), "-metrics-reader"):
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			reader = len(rules) == 1 && strings.Contains(toYAML(t, rules), "/metrics")
		case o.GetKind() == "ClusterRoleBinding" && strings.HasSuffix(o.GetName(), "-metrics-reader"):
			binding = strings.Contains(toYAML(t, o.Object["subjects"]), "kube-prometheus-stack-prometheus")
		case o.GetKind() == "ConfigMap" && strings.HasSuffix(o.GetName(), "-dashboard"):
			if o.GetNamespace() != "monitoring" || o.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap in %q with labels %v, want namespace monitoring and grafana_dashboard=1", o.GetNamespace(), o.GetLabels())
			}
		}
	}
	if !reader || !binding {
		t.Errorf("metrics-reader ClusterRole (GET /metrics) rendered: %v; bound to Prometheus's ServiceAccount: %v", reader, binding)
	}
}

// toolBinary is _output/bin/<name>, which make tools builds; missing, the test fails under make
// test-chart and is skipped otherwise (as for helm).
func toolBinary(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(repoRoot(t), "_output", "bin", name)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv(requireHelmEnv) == "1" {
			t.Fatalf("%s not found at %s: run \"make tools\"", name, path)
		}
		t.Skipf("%s not found at %s (run \"make tools\", or make test-chart)", name, path)
	}
	return path
}

// renderedRules writes the rendered PrometheusRule's spec (a Prometheus rule file) to a file.
func renderedRules(t *testing.T) string {
	t.Helper()
	for _, o := range parseObjects(t, mustTemplate(t, "-f", filepath.Join("testdata", "monitoring.values.yaml"))) {
		if o.GetKind() != "PrometheusRule" {
			continue
		}
		data, err := yaml.Marshal(o.Object["spec"])
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Fatal("no PrometheusRule rendered with monitoring.enabled")
	return ""
}

func runTool(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// The rendered alerts pass promtool check rules (YAML, PromQL, templates, duplicate names)
// and carry the alerts docs/metrics.md promises.
func TestPrometheusRulePassesPromtool(t *testing.T) {
	rules := renderedRules(t)
	if out, err := runTool(t, toolBinary(t, "promtool"), "check", "rules", rules); err != nil {
		data, _ := os.ReadFile(rules)
		t.Fatalf("promtool check rules: %v\n%s\nrules:\n%s", err, out, data)
	}
	data, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
		}
	}
	for _, want := range []string{"GpuSchedulerGPUUnhealthy", "GpuSchedulerClaimsPendingTooLong", "GpuSchedulerStaleLeases",
		"GpuSchedulerComponentDown", "GpuSchedulerWebhookErrors", "GpuSchedulerSchedulingErrors"} {
		if alerts[want] == "" {
			t.Errorf("alert %s missing from the PrometheusRule", want)
		}
	}
	// monitoring.values.yaml sets pendingMinutes: 30.
	if e := alerts["GpuSchedulerClaimsPendingTooLong"]; !strings.Contains(e, "> 1800") || !strings.Contains(e, `namespace="`+releaseNamespace+`"`) {
		t.Errorf("GpuSchedulerClaimsPendingTooLong: %s; want the threshold 1800 s and the release namespace", e)
	}
	// A broken rule fails the check: the check can fail.
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: rate(up[5m]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runTool(t, toolBinary(t, "promtool"), "check", "rules", broken); err == nil {
		t.Errorf("promtool check rules passed a broken expression:\n%s", out)
	}
}

// The dashboard is valid JSON, every panel's query parses as PromQL, and it reads only the
// project's metrics and the two it borrows (up, controller-runtime's reconcile counter); the
// integration test checks each one against a scrape of the running components.
func TestDashboardParses(t *testing.T) {
	path := filepath.Join(chartDir(t), "files", "monitoring", "dashboard.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string           `json:"uid"`
		Title  string           `json:"title"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("%s: uid %q, title %q, %d panels", path, dash.UID, dash.Title, len(dash.Panels))
	}
	out, err := runTool(t, toolBinary(t, "promql-metrics"), path)
	if err != nil {
		t.Fatalf("promql-metrics %s: %v\n%s", path, err, out)
	}
	names := strings.Fields(out)
	if len(names) < 10 {
		t.Errorf("the dashboard reads only %v", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "gpu_scheduler_") && n != "up" && n != "controller_runtime_reconcile_total" {
			t.Errorf("the dashboard reads %s, which is not one of the project's metrics", n)
		}
	}
}

//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// metricsPool is the one node this test's agent fleet simulates; the other tests' nodes are
// played by the tests themselves, so the fleet is kept off them with a node selector.
const metricsPool = "metrics"

// TestMetricsScrape runs the four production components beside the package's control plane
// and scrapes each /metrics as Prometheus would: with a ServiceAccount token bound to the
// chart's metrics-reader role. An anonymous scrape is refused (401; 403 from kube-scheduler,
// which names the caller system:anonymous first) and a token without the role gets 403.
// Every metric the chart's PrometheusRule and Grafana dashboard read must be in the scrapes.
func TestMetricsScrape(t *testing.T) {
	ctx := t.Context()
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	used := chartMetrics(t, root)

	// The agent fleet on a one-node pool of its own, with faults that make Xid and ECC series.
	pool := cluster.NodePool{Name: metricsPool, Count: 1, GPUsPerNode: 8, Topology: "dgx-a100"}
	node := cluster.NodeName(metricsPool, 0)
	if err := env.c.CreateNodePool(ctx, pool); err != nil {
		t.Fatal(err)
	}
	agent, err := launch.StartAgentFleet(ctx, env.c, launch.AgentFleetOptions{Name: "gpu-agent-metrics", NodeSelector: cluster.LabelPool + "=" + metricsPool})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Kill()
		bg := context.Background()
		_ = env.kube.CoreV1().Nodes().Delete(bg, node, metav1.DeleteOptions{})
		if err := env.gpu.GpuV1().GpuNodeStatuses().Delete(bg, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting GpuNodeStatus %s: %v", node, err)
		}
	})
	ctl, err := launch.StartController(ctx, env.c, launch.ControllerOptions{Name: "gpu-controller-metrics"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Kill() })
	// Not registered with the apiserver: the other tests' pods never reach it.
	wh, err := launch.StartWebhook(ctx, env.c, launch.WebhookOptions{Name: "gpu-webhook-metrics", NoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wh.Kill() })

	eventually(t, time.Minute, "the agent's GpuNodeStatus of "+node, func() (bool, string) {
		gns, err := env.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(gns.Status.Devices) == 8, fmt.Sprintf("%d devices", len(gns.Status.Devices))
	})
	for gpu, fault := range map[int]string{3: "xid79", 5: "dbe"} {
		injectFault(t, agent, node, gpu, fault)
	}

	endpoints := map[string]string{
		"scheduler":  fmt.Sprintf("https://127.0.0.1:%d/metrics", env.schedA.Port),
		"controller": fmt.Sprintf("https://127.0.0.1:%d/metrics", ctl.MetricsPort),
		"webhook":    wh.URL + "/metrics",
		"agent":      fmt.Sprintf("https://127.0.0.1:%d/metrics", agent.MetricsPort),
	}
	const ns = "metrics-it"
	reader, err := launch.MetricsReaderToken(ctx, env.kube, ns, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	// A valid token without the right to GET /metrics.
	if _, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bystander"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	bystander, err := launch.ServiceAccountToken(ctx, env.kube, ns, "bystander")
	if err != nil {
		t.Fatal(err)
	}

	for _, component := range []string{"scheduler", "controller", "webhook", "agent"} {
		u := endpoints[component]
		// kube-scheduler authenticates a request without a token as system:anonymous and then
		// refuses it (403); the filter of the others refuses it unauthenticated (401).
		want := http.StatusUnauthorized
		if component == "scheduler" {
			want = http.StatusForbidden
		}
		if code, body, err := launch.Scrape(ctx, u, ""); err != nil || code != want || strings.Contains(string(body), "gpu_scheduler_") {
			t.Errorf("%s: anonymous GET %s: %d %v, want %d and no metrics\n%.300s", component, u, code, err, want, body)
		}
		if code, body, err := launch.Scrape(ctx, u, bystander); err != nil || code != http.StatusForbidden {
			t.Errorf("%s: GET %s with a token that may not read /metrics: %d %v, want 403\n%.300s", component, u, code, err, body)
		}
	}

	// Every used metric in the union of the four scrapes; some appear only after the agent
	// has seen the faults and the scheduler its nodes, hence the wait.
	var seen map[string]bool
	eventually(t, 2*time.Minute, "every metric of the alerts and the dashboard scraped", func() (bool, string) {
		seen = map[string]bool{"up": true} // Prometheus's own, one per target
		for component, u := range endpoints {
			code, body, err := launch.Scrape(ctx, u, reader)
			if err != nil || code != http.StatusOK {
				return false, fmt.Sprintf("%s: GET %s: %d %v %.300s", component, u, code, err, body)
			}
			for name := range metricNames(string(body)) {
				seen[name] = true
			}
		}
		var missing []string
		for _, n := range used {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, fmt.Sprintf("not in any scrape: %v", missing)
	})
	for _, want := range []string{"gpu_scheduler_agent_gpu_health", "gpu_scheduler_placements_total", "gpu_scheduler_webhook_admissions_total", "gpu_scheduler_workload_retries_total"} {
		if !slices.Contains(used, want) {
			t.Errorf("the chart's rules and dashboard do not read %s; the check above proves less than it should (used: %v)", want, used)
		}
	}
}

// chartMetrics renders the chart with monitoring on and lists, with Prometheus's own parsers
// (promql-metrics from make tools), the metrics its PrometheusRule and dashboard read.
func chartMetrics(t *testing.T, root string) []string {
	t.Helper()
	bin := filepath.Join(root, "_output", "bin")
	out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "helm"), "template", "gpu-scheduler", filepath.Join(root, "charts", "gpu-scheduler"),
		"--namespace", leaseNamespace, "--set", "monitoring.enabled=true").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var rules []byte
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var obj struct {
			Kind string `json:"kind"`
			Spec any    `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("rendered chart: %v", err)
		}
		if obj.Kind == "PrometheusRule" {
			if rules, err = yaml.Marshal(obj.Spec); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rules == nil {
		t.Fatal("no PrometheusRule rendered with monitoring.enabled=true")
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	dashboard := filepath.Join(root, "charts", "gpu-scheduler", "files", "monitoring", "dashboard.json")
	names, err := exec.CommandContext(t.Context(), filepath.Join(bin, "promql-metrics"), rulesFile, dashboard).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("promql-metrics (make tools builds it): %v\n%s", err, stderr)
	}
	return strings.Fields(string(names))
}

// metricNames are the sample names of a Prometheus text exposition (histograms as their
// _bucket, _sum and _count series).
func metricNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// injectFault asks the agent fleet to make a mock GPU fail, and waits until the agent reports
// the GPU Unhealthy.
func injectFault(t *testing.T, agent *launch.AgentFleet, node string, gpu int, fault string) {
	t.Helper()
	form := url.Values{"node": {node}, "gpu": {strconv.Itoa(gpu)}, "fault": {fault}}
	resp, err := http.PostForm(fmt.Sprintf("http://127.0.0.1:%d/fault", agent.HTTPPort), form)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("injecting %s into %s GPU %d: HTTP %d", fault, node, gpu, resp.StatusCode)
	}
	eventually(t, time.Minute, fmt.Sprintf("%s GPU %d Unhealthy after %s", node, gpu, fault), func() (bool, string) {
		gns, err := env.gpu.GpuV1().GpuNodeStatuses().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range gns.Status.Devices {
			if int(d.ID) == gpu {
				return d.Health == apiv1.Unhealthy, string(d.Health)
			}
		}
		return false, "no such device"
	})
}

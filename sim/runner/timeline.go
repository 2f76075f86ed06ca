package runner

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// writeTimeline writes one line per pod of the run to path: its name and, as wall-clock Unix
// seconds (to line up with the components' logs), when it was first seen, first seen
// unschedulable and seen bound; then its node and when it was seen finished or deleted; then,
// for gpu-scheduler, when PreBind began making its GPU leases, when the last was seen and when
// its claim was seen taken; last, the moment its scheduler's Scheduled event stamped (both
// schedulers); "-" where that never happened. It is what tells where a pod's time went between the controller
// that made it and its binding, and with the node and end which GPUs were free meanwhile
// (the replay of sim/metrics frees a pod's GPUs at that end).
func (r *recorder) writeTimeline(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.pods))
	for n := range r.pods {
		names = append(names, n)
	}
	sort.Strings(names)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the pod timeline: %w", err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "pod\tseen\tunschedulable\tbound\tnode\tended\tprebind\tleased\tclaimed\tscheduled")
	stamp := func(d time.Duration, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.3f", float64(r.start.Add(d).UnixNano())/1e9)
	}
	for _, n := range names {
		p := r.pods[n]
		name := p.podName
		if name == "" {
			name = n
		}
		node := p.node
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, stamp(p.seen, p.seenOK), stamp(p.unschedAt, p.unschedOK), stamp(p.bound, p.boundOK), node, stamp(p.ended, p.endedOK),
			stamp(p.preBind, p.preBindOK), stamp(p.leased, p.leasedOK), stamp(p.claimed, p.claimedOK), stamp(p.scheduled, p.scheduledOK))
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the pod timeline: %w", err)
	}
	return f.Close()
}

// schedulerMetricPrefixes are the series of the scheduler's /metrics kept after a run: how pods
// moved through the scheduling queue and how many attempts they took.
var schedulerMetricPrefixes = []string{
	"scheduler_queue_incoming_pods_total",
	"scheduler_schedule_attempts_total",
	"scheduler_pod_scheduling_attempts",
	"scheduler_unschedulable_pods",
	"scheduler_plugin_execution_duration_seconds_count",
	// Where a scheduled pod's latency went (metrics.Stages).
	"scheduler_pod_scheduling_sli_duration_seconds",
	"scheduler_scheduling_algorithm_duration_seconds",
	"scheduler_framework_extension_point_duration_seconds",
	// How long the scheduler's informer handlers took per event kind (a slow handler delays
	// every later event of its informer, new pods included).
	"scheduler_event_handling_duration_seconds",
	// gpu-scheduler's GPU lease creates within PreBind.
	"gpu_scheduler_lease_acquire_duration_seconds",
	// The API clients' rate-limiter waits and request latencies, by verb.
	"rest_client_rate_limiter_duration_seconds",
	"rest_client_request_duration_seconds",
}

// saveSchedulerMetrics reads the scheduler's /metrics at url with auth's credentials (the
// cluster admin's; the scheduler's serving certificate is self-signed, so it is not checked)
// and writes the series of schedulerMetricPrefixes to path. It returns the whole page.
func saveSchedulerMetrics(ctx context.Context, auth *rest.Config, url, path string) ([]byte, error) {
	cfg := rest.CopyConfig(auth)
	cfg.TLSClientConfig.Insecure = true
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, ""
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client credentials for the scheduler's metrics: %w", err)
	}
	if tc == nil {
		tc = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback, self-signed
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the scheduler's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the scheduler's metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the scheduler's metrics: %s: %.200s", resp.Status, body)
	}
	var out strings.Builder
	for line := range strings.SplitSeq(string(body), "\n") {
		for _, p := range schedulerMetricPrefixes {
			if strings.HasPrefix(line, p) {
				out.WriteString(line + "\n")
				break
			}
		}
	}
	return body, os.WriteFile(path, []byte(out.String()), 0o644)
}

package metrics

import (
	"strings"
	"testing"
	"time"
)

// Two pages of one API server, at a workload's start and end: the workload's share is their
// difference.
const apiBefore = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="0.005"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="0.01"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="+Inf"} 10
apiserver_request_duration_seconds_sum{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1"} 0.02
apiserver_request_duration_seconds_count{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1"} 10
`

const apiAfter = `# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="0.005"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="0.01"} 110
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1",le="+Inf"} 110
apiserver_request_duration_seconds_sum{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1"} 0.82
apiserver_request_duration_seconds_count{component="apiserver",group="",resource="pods",subresource="binding",verb="POST",version="v1"} 110
apiserver_request_duration_seconds_bucket{component="apiserver",group="coordination.k8s.io",resource="leases",subresource="",verb="POST",version="v1",le="0.005"} 50
apiserver_request_duration_seconds_bucket{component="apiserver",group="coordination.k8s.io",resource="leases",subresource="",verb="POST",version="v1",le="0.01"} 50
apiserver_request_duration_seconds_bucket{component="apiserver",group="coordination.k8s.io",resource="leases",subresource="",verb="POST",version="v1",le="+Inf"} 50
apiserver_request_duration_seconds_sum{component="apiserver",group="coordination.k8s.io",resource="leases",subresource="",verb="POST",version="v1"} 0.1
apiserver_request_duration_seconds_count{component="apiserver",group="coordination.k8s.io",resource="leases",subresource="",verb="POST",version="v1"} 50
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="",verb="WATCH",version="v1",le="0.005"} 0
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="",verb="WATCH",version="v1",le="0.01"} 0
apiserver_request_duration_seconds_bucket{component="apiserver",group="",resource="pods",subresource="",verb="WATCH",version="v1",le="+Inf"} 3
apiserver_request_duration_seconds_sum{component="apiserver",group="",resource="pods",subresource="",verb="WATCH",version="v1"} 1800
apiserver_request_duration_seconds_count{component="apiserver",group="",resource="pods",subresource="",verb="WATCH",version="v1"} 3
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="false",type="admit",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="false",type="admit",le="0.025"} 40
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="false",type="admit",le="+Inf"} 40
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.gpu.scheduling",operation="CREATE",rejected="false",type="admit"} 0.4
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.gpu.scheduling",operation="CREATE",rejected="false",type="admit"} 40
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="true",type="admit",le="0.005"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="true",type="admit",le="0.025"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu.scheduling",operation="CREATE",rejected="true",type="admit",le="+Inf"} 10
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.gpu.scheduling",operation="CREATE",rejected="true",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.gpu.scheduling",operation="CREATE",rejected="true",type="admit"} 10
# TYPE apiserver_admission_controller_admission_duration_seconds histogram
apiserver_admission_controller_admission_duration_seconds_bucket{name="ResourceQuota",operation="CREATE",rejected="false",type="validate",le="0.005"} 0
apiserver_admission_controller_admission_duration_seconds_bucket{name="ResourceQuota",operation="CREATE",rejected="false",type="validate",le="0.025"} 0
apiserver_admission_controller_admission_duration_seconds_bucket{name="ResourceQuota",operation="CREATE",rejected="false",type="validate",le="0.1"} 20
apiserver_admission_controller_admission_duration_seconds_bucket{name="ResourceQuota",operation="CREATE",rejected="false",type="validate",le="+Inf"} 20
apiserver_admission_controller_admission_duration_seconds_sum{name="ResourceQuota",operation="CREATE",rejected="false",type="validate"} 1
apiserver_admission_controller_admission_duration_seconds_count{name="ResourceQuota",operation="CREATE",rejected="false",type="validate"} 20
`

func TestAPIServerFigures(t *testing.T) {
	before, err := ParseHistograms(strings.NewReader(apiBefore), APIServerFamilies...)
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseHistograms(strings.NewReader(apiAfter), APIServerFamilies...)
	if err != nil {
		t.Fatal(err)
	}
	got := APIServerFigures(after.Sub(before))
	if got == nil {
		t.Fatal("no figures")
	}
	// The workload's 100 Bindings, all in the (5 ms, 10 ms] bucket, 0.8 s in all: not the
	// 10 made before it.
	b := got.Requests["POST pods/binding"]
	if b == nil || b.Count != 100 || b.Mean != 8*time.Millisecond || b.P50 != 7500*time.Microsecond {
		t.Errorf("POST pods/binding = %+v, want 100 requests, mean 8ms, p50 7.5ms", b)
	}
	// A series only the second page has counts whole.
	if l := got.Requests["POST leases.coordination.k8s.io"]; l == nil || l.Count != 50 || l.Mean != 2*time.Millisecond {
		t.Errorf("POST leases = %+v, want 50 requests, mean 2ms", l)
	}
	// A watch's duration is its life, not a request's latency.
	if w, ok := got.Requests["WATCH pods"]; ok {
		t.Errorf("WATCH counted as a request: %+v", w)
	}
	if len(got.Requests) != 2 {
		t.Errorf("requests %v, want the binding and the lease creates", got.Requests)
	}
	// The webhook's calls merge over their rejected label: 50 calls, 0.42 s.
	wh := got.Webhooks["pods.gpu.scheduling CREATE (admit)"]
	if wh == nil || wh.Count != 50 || wh.Mean != 8400*time.Microsecond {
		t.Errorf("webhook = %+v, want 50 calls, mean 8.4ms (webhooks %v)", wh, got.Webhooks)
	}
	// A built-in admission plugin's wait: the quota's queue of a namespace's creates.
	if q := got.Admission["ResourceQuota CREATE (validate)"]; q == nil || q.Count != 20 || q.Mean != 50*time.Millisecond {
		t.Errorf("ResourceQuota = %+v, want 20 calls, mean 50ms (admission %v)", q, got.Admission)
	}
}

// A page the API server did not write is an error, not empty figures.
func TestParseHistogramsMalformed(t *testing.T) {
	if _, err := ParseHistograms(strings.NewReader("apiserver_request_duration_seconds_count{verb=\"POST\" 1\n"), APIServerFamilies...); err == nil {
		t.Error("want an error for a malformed page")
	}
}

// Nothing counted over the workload gives no figures rather than empty tables.
func TestAPIServerFiguresEmpty(t *testing.T) {
	page, err := ParseHistograms(strings.NewReader(apiBefore), APIServerFamilies...)
	if err != nil {
		t.Fatal(err)
	}
	if got := APIServerFigures(page.Sub(page)); got != nil {
		t.Errorf("figures from no requests: %+v", got)
	}
}

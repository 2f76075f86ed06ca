package metrics

import (
	"strings"
	"testing"
	"time"
)

// A scheduler's page with two profiles for the extension points: PreBind of the default
// profile took 1 ms for 90 pods and 3 ms for 10; the gpu profile's PreBind and a failed Bind
// must not count towards Bind.
const stagesPage = `# HELP scheduler_framework_extension_point_duration_seconds Latency for running all plugins of a specific extension point.
# TYPE scheduler_framework_extension_point_duration_seconds histogram
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="default-scheduler",status="Success",le="0.0008"} 0
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="default-scheduler",status="Success",le="0.0016"} 90
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="default-scheduler",status="Success",le="0.0032"} 100
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="default-scheduler",status="Success",le="+Inf"} 100
scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreBind",profile="default-scheduler",status="Success"} 0.12
scheduler_framework_extension_point_duration_seconds_count{extension_point="PreBind",profile="default-scheduler",status="Success"} 100
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="gpu-scheduler",status="Success",le="0.0008"} 0
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="gpu-scheduler",status="Success",le="0.0016"} 0
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="gpu-scheduler",status="Success",le="0.0032"} 0
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="PreBind",profile="gpu-scheduler",status="Success",le="+Inf"} 100
scheduler_framework_extension_point_duration_seconds_sum{extension_point="PreBind",profile="gpu-scheduler",status="Success"} 1.0
scheduler_framework_extension_point_duration_seconds_count{extension_point="PreBind",profile="gpu-scheduler",status="Success"} 100
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Bind",profile="default-scheduler",status="Error",le="0.0008"} 5
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Bind",profile="default-scheduler",status="Error",le="0.0016"} 5
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Bind",profile="default-scheduler",status="Error",le="0.0032"} 5
scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Bind",profile="default-scheduler",status="Error",le="+Inf"} 5
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Bind",profile="default-scheduler",status="Error"} 0.002
scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",profile="default-scheduler",status="Error"} 5
# HELP scheduler_scheduling_algorithm_duration_seconds Scheduling algorithm latency in seconds
# TYPE scheduler_scheduling_algorithm_duration_seconds histogram
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 50
scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.002"} 100
scheduler_scheduling_algorithm_duration_seconds_bucket{le="+Inf"} 100
scheduler_scheduling_algorithm_duration_seconds_sum 0.1
scheduler_scheduling_algorithm_duration_seconds_count 100
# HELP rest_client_request_duration_seconds Request latency in seconds. Broken down by verb, and host.
# TYPE rest_client_request_duration_seconds histogram
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="POST",le="0.005"} 40
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="POST",le="0.01"} 100
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="POST",le="+Inf"} 100
rest_client_request_duration_seconds_sum{host="127.0.0.1:6443",verb="POST"} 0.6
rest_client_request_duration_seconds_count{host="127.0.0.1:6443",verb="POST"} 100
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="GET",le="0.005"} 10
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="GET",le="0.01"} 10
rest_client_request_duration_seconds_bucket{host="127.0.0.1:6443",verb="GET",le="+Inf"} 10
rest_client_request_duration_seconds_sum{host="127.0.0.1:6443",verb="GET"} 0.01
rest_client_request_duration_seconds_count{host="127.0.0.1:6443",verb="GET"} 10
`

func TestParseStages(t *testing.T) {
	got, err := ParseStages(strings.NewReader(stagesPage))
	if err != nil {
		t.Fatal(err)
	}
	// PreBind over both profiles: 200 pods, sum 1.12 s; rank 198 lies in the +Inf bucket of
	// the gpu profile, so p99 reads as the highest finite bound.
	if p := got.PreBind; p == nil || p.Count != 200 || p.Mean != 5600*time.Microsecond || p.P99 != 3200*time.Microsecond || !p.P99Above {
		t.Errorf("PreBind %+v, want 200 observations, mean 5.6ms, p99 above the last bucket, 3.2ms", p)
	}
	if got.Bind != nil {
		t.Errorf("Bind %+v from failed binds only, want none", got.Bind)
	}
	// Algorithm: rank 99 of 100 lies in (1ms, 2ms] holding 50: 1ms + 1ms*49/50.
	if a := got.Algorithm; a == nil || a.Count != 100 || a.Mean != time.Millisecond || a.P99 != 1980*time.Microsecond || a.P99Above {
		t.Errorf("Algorithm %+v, want 100 observations, mean 1ms, p99 1.98ms", a)
	}
	if got.Queued != nil {
		t.Errorf("Queued %+v from a page without the series", got.Queued)
	}
	// Algorithm's p50: rank 50 is the whole first bucket, (0, 1ms].
	if a := got.Algorithm; a == nil || a.P50 != time.Millisecond {
		t.Errorf("Algorithm %+v, want p50 1ms", a)
	}
	// POST: rank 50 of 100 lies in (5ms, 10ms] holding 60: 5ms + 5ms*10/60.
	if post := got.Requests["POST"]; post == nil || post.Count != 100 || post.Mean != 6*time.Millisecond || post.P50.Round(time.Microsecond) != 5833*time.Microsecond {
		t.Errorf("Requests[POST] %+v, want 100 observations, mean 6ms, p50 5.833ms", post)
	}
	if get := got.Requests["GET"]; get == nil || get.Count != 10 || len(got.Requests) != 2 {
		t.Errorf("Requests %v, want POST and GET, GET with 10 observations", got.Requests)
	}
	if _, err := ParseStages(strings.NewReader("scheduler_x{ 1\n")); err == nil {
		t.Error("a page that does not parse gave no error")
	}
}

func TestQuantileWithinOneBucket(t *testing.T) {
	// 100 observations all in (0.0016, 0.0032]: p99 is 99% of the way through that bucket.
	b := map[float64]uint64{0.0016: 0, 0.0032: 100}
	if q, above := quantile(0.99, b, 100); q < 0.003183 || q > 0.003185 || above {
		t.Errorf("p99 %.6f (above the buckets: %v), want 0.003184", q, above)
	}
}

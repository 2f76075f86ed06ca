package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Stage is one step of a pod's way through kube-scheduler, read from the scheduler's own
// histograms at the end of a run: how many observations, their mean, and the 99th percentile
// interpolated within the histogram's buckets as Prometheus's histogram_quantile does (the
// buckets double in width, so P99 is an estimate within a factor of two of its bucket).
type Stage struct {
	Count int64         `json:"count"`
	Mean  time.Duration `json:"mean"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	// P99Above is set when the 99th percentile lies beyond the highest finite bucket: P99 is
	// then that bucket's bound, and the true value larger (PreBind's buckets end at 204.8 ms).
	P99Above bool `json:"p99Above,omitempty"`
}

// Stages is where a scheduled pod's latency went inside the scheduler, from the series every
// kube-scheduler build exports (stock, DRA and gpu-scheduler alike), so the runs compare on
// the same yardstick. The created -> bound latency of the report adds the time before the
// scheduler's informer hands the pod to its queue.
type Stages struct {
	// Queued is from first entering the active queue (past PreEnqueue) to bound, over all attempts
	// (scheduler_pod_scheduling_sli_duration_seconds; its first bucket is 10 ms).
	Queued *Stage `json:"queued,omitempty"`
	// Algorithm is the scheduling cycle's Filter and Score
	// (scheduler_scheduling_algorithm_duration_seconds).
	Algorithm *Stage `json:"algorithm,omitempty"`
	// PreBind and Bind are the binding cycle's two API steps, successful runs only
	// (scheduler_framework_extension_point_duration_seconds): gpu-scheduler creates the GPU
	// leases in PreBind, DRA writes the ResourceClaim's allocation there, and all bind in Bind.
	PreBind *Stage `json:"preBind,omitempty"`
	Bind    *Stage `json:"bind,omitempty"`
	// Reserve and Permit are the scheduling cycle's last steps (successful runs); gpu-scheduler
	// holds a gang's pods in Permit.
	Reserve *Stage `json:"reserve,omitempty"`
	Permit  *Stage `json:"permit,omitempty"`
	// LeaseAcquire is gpu-scheduler's own histogram of its GPU lease creates within PreBind
	// (gpu_scheduler_lease_acquire_duration_seconds); nil for the stock scheduler.
	LeaseAcquire *Stage `json:"leaseAcquire,omitempty"`
	// RateLimiter is the wait of the scheduler's API requests for its clients' rate limiters
	// (rest_client_rate_limiter_duration_seconds, every client of the process).
	RateLimiter *Stage `json:"rateLimiter,omitempty"`
	// Requests are the scheduler's API requests as it timed them, by verb
	// (rest_client_request_duration_seconds): the API server's latency and the way there.
	Requests map[string]*Stage `json:"requests,omitempty"`
}

// ParseStages reads Stages from a kube-scheduler /metrics page in the Prometheus text format.
// A series the page lacks leaves its stage nil; a page that does not parse is an error.
func ParseStages(in io.Reader) (Stages, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(in)
	if err != nil {
		return Stages{}, fmt.Errorf("parsing the scheduler's metrics: %w", err)
	}
	return Stages{
		Queued:       stageOf(fams["scheduler_pod_scheduling_sli_duration_seconds"], nil),
		Algorithm:    stageOf(fams["scheduler_scheduling_algorithm_duration_seconds"], nil),
		PreBind:      stageOf(fams["scheduler_framework_extension_point_duration_seconds"], map[string]string{"extension_point": "PreBind", "status": "Success"}),
		Bind:         stageOf(fams["scheduler_framework_extension_point_duration_seconds"], map[string]string{"extension_point": "Bind", "status": "Success"}),
		Reserve:      stageOf(fams["scheduler_framework_extension_point_duration_seconds"], map[string]string{"extension_point": "Reserve", "status": "Success"}),
		Permit:       stageOf(fams["scheduler_framework_extension_point_duration_seconds"], map[string]string{"extension_point": "Permit", "status": "Success"}),
		LeaseAcquire: stageOf(fams["gpu_scheduler_lease_acquire_duration_seconds"], nil),
		RateLimiter:  stageOf(fams["rest_client_rate_limiter_duration_seconds"], nil),
		Requests:     stagesBy(fams["rest_client_request_duration_seconds"], "verb"),
	}, nil
}

// stagesBy is stageOf for each value of label in fam; nil when fam has no observation.
func stagesBy(fam *dto.MetricFamily, label string) map[string]*Stage {
	if fam == nil {
		return nil
	}
	var out map[string]*Stage
	seen := map[string]bool{}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() != label || seen[l.GetValue()] {
				continue
			}
			seen[l.GetValue()] = true
			if st := stageOf(fam, map[string]string{label: l.GetValue()}); st != nil {
				if out == nil {
					out = map[string]*Stage{}
				}
				out[l.GetValue()] = st
			}
		}
	}
	return out
}

// stageOf merges the histograms of fam whose labels include match (every profile, every
// attempts count) into one Stage; nil when none has an observation.
func stageOf(fam *dto.MetricFamily, match map[string]string) *Stage {
	if fam == nil || fam.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	var count uint64
	var sum float64
	buckets := map[float64]uint64{} // upper bound -> cumulative count
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, match) {
			continue
		}
		h := m.GetHistogram()
		count += h.GetSampleCount()
		sum += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	if count == 0 {
		return nil
	}
	return stageFrom(count, sum, buckets)
}

// stageFrom is the Stage of a histogram of count observations summing to sum, with
// cumulative buckets by upper bound.
func stageFrom(count uint64, sum float64, buckets map[float64]uint64) *Stage {
	q, above := quantile(0.99, buckets, count)
	q50, _ := quantile(0.5, buckets, count)
	return &Stage{
		Count:    int64(count),
		Mean:     seconds(sum / float64(count)),
		P50:      seconds(q50),
		P99:      seconds(q),
		P99Above: above,
	}
}

func hasLabels(m *dto.Metric, match map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := match[l.GetName()]; ok {
			if l.GetValue() != v {
				return false
			}
			found++
		}
	}
	return found == len(match)
}

// quantile interpolates linearly within the bucket that holds rank q·count, taking the lower
// bound of the first bucket as 0; a rank in the +Inf bucket reads as the highest finite bound,
// and above reports it.
func quantile(q float64, buckets map[float64]uint64, count uint64) (v float64, above bool) {
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		c := buckets[b]
		if float64(c) >= rank {
			if math.IsInf(b, 1) {
				return lower, true
			}
			if c == below {
				return b, false
			}
			return lower + (b-lower)*(rank-float64(below))/float64(c-below), false
		}
		lower, below = b, c
	}
	return lower, true
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

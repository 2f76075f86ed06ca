package metrics_test

import (
	"testing"

	"k8s.io/component-base/metrics/testutil"

	"github.com/gpu-scheduler/gpu-scheduler/agent/metrics"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestHealthGauge(t *testing.T) {
	metrics.ForgetNode("n") // before Register: a no-op, not a panic
	metrics.Register()
	metrics.SetHealth("n", 3, apiv1.Unknown)
	if v, err := testutil.GetGaugeMetricValue(metrics.GPUHealth.WithLabelValues("n", "3")); err != nil || v != -1 {
		t.Errorf("gauge %v, %v; want -1", v, err)
	}
	metrics.SetHealth("n", 3, apiv1.Healthy)
	if v, _ := testutil.GetGaugeMetricValue(metrics.GPUHealth.WithLabelValues("n", "3")); v != 1 {
		t.Errorf("gauge %v, want 1", v)
	}
	metrics.ForgetNode("n")
}

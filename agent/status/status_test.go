package status_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB": "NVIDIA-A100-SXM4-80GB",
		" (weird) ":             "weird",
		"":                      "",
	} {
		if got := status.LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzLabelValue(f *testing.F) {
	f.Add("NVIDIA H100 80GB HBM3")
	f.Add("ü/ß-.-_")
	f.Fuzz(func(t *testing.T, s string) {
		if v := status.LabelValue(s); len(validation.IsValidLabelValue(v)) > 0 {
			t.Fatalf("LabelValue(%q) = %q is not a valid label value", s, v)
		}
	})
}

func TestSummarize(t *testing.T) {
	st := status.Summarize([]apiv1.Device{
		{ID: 0, Health: apiv1.Healthy},
		{ID: 1, Health: apiv1.Healthy, InUseBy: []string{"p"}},
		{ID: 2, Health: apiv1.Unhealthy},
		{ID: 3, Health: apiv1.Unknown},
	}, "")
	if st.Total != 4 || st.Healthy != 2 || st.Free != 1 {
		t.Errorf("Summarize: total %d healthy %d free %d, want 4 2 1", st.Total, st.Healthy, st.Free)
	}
}

func TestLabels(t *testing.T) {
	l := status.Labels([]apiv1.Device{{Product: "NVIDIA L40S"}, {Product: "NVIDIA L40S"}}, false)
	if l[apiv1.LabelGPUProduct] != "NVIDIA-L40S" || l[apiv1.LabelGPUCount] != "2" || l[apiv1.LabelNVLink] != "false" {
		t.Errorf("Labels: %v", l)
	}
}

package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/sim/metrics"
	"github.com/gpu-scheduler/gpu-scheduler/sim/profile"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
)

// TestCauseTable: a profiled run lists each profiled process's CPU per pod and its causes
// (shares under 1 % left out), then the processes that were only measured; an unprofiled run
// prints nothing.
func TestCauseTable(t *testing.T) {
	ours := &runner.RunResult{Mode: runner.ModeGPU, Metrics: metrics.Result{Bound: 1000},
		WorkloadCPUSeconds: map[string]float64{"kube-apiserver": 40, "etcd": 5},
		CPUCauses: []profile.Breakdown{{Process: "kube-apiserver", Seconds: 40, ProfiledSeconds: 30, MsPerPod: 40, Shares: []profile.Share{
			{Cause: "creates (Leases, Events, Pods)", Fraction: 0.6, Seconds: 24, MsPerPod: 24},
			{Cause: "watches (fan-out to watchers)", Fraction: 0.395, Seconds: 15.8, MsPerPod: 15.8},
			{Cause: "metrics scrapes", Fraction: 0.005, Seconds: 0.2, MsPerPod: 0.2},
		}}}}
	stock := &runner.RunResult{Mode: runner.ModeStock, Metrics: metrics.Result{Bound: 1000}}
	var b bytes.Buffer
	(&Report{Runs: []*runner.RunResult{ours, stock}}).CauseTable(&b)
	out := b.String()
	for _, want := range []string{
		"CPU per bound pod by cause (gpu-scheduler;",
		"kube-apiserver  40.0 ms",
		"creates (Leases, Events, Pods)  24.0 ms",
		"watches (fan-out to watchers)  15.8 ms",
		"not profiled: etcd 5.0 ms",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the cause table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "metrics scrapes") || strings.Contains(out, runner.ModeStock) {
		t.Errorf("the cause table shows a share under 1 %% or the unprofiled run:\n%s", out)
	}
}

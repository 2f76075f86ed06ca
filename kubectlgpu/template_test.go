package kubectlgpu

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func generate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &bytes.Buffer{}})
	cmd.SetArgs(append([]string{"generate-template", "-n", "ml"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestGenerateTemplateRoundTrips(t *testing.T) {
	out, err := generate(t, "workload", "train", "--gpus", "8", "--replicas", "4", "--gang", "--topology", "Required",
		"--min-bandwidth", "600", "--selector", "gpu-type=h100", "--image", "my/trainer:1", "--command", "torchrun,train.py")
	if err != nil {
		t.Fatal(err)
	}
	var w apiv1.GpuWorkload
	if err := yaml.UnmarshalStrict([]byte(out), &w); err != nil {
		t.Fatalf("the skeleton does not decode strictly as a GpuWorkload: %v\n%s", err, out)
	}
	c := w.Spec.Claim.Spec
	if w.Kind != "GpuWorkload" || w.Namespace != "ml" || *w.Spec.Replicas != 4 || !w.Spec.Gang || c == nil ||
		c.Devices.Count != 8 || c.Topology.Mode != apiv1.TopologyRequired || c.Topology.MinBandwidthGBps != 600 ||
		c.Selector.MatchLabels["gpu-type"] != "h100" || w.Spec.Template.Spec.Containers[0].Image != "my/trainer:1" ||
		strings.Join(w.Spec.Template.Spec.Containers[0].Command, " ") != "torchrun train.py" {
		t.Errorf("workload skeleton %+v", w)
	}
	out, err = generate(t, "gct", "a100x2", "--gpus", "2", "--exclusivity", "Shared")
	if err != nil {
		t.Fatal(err)
	}
	var gct apiv1.GpuClaimTemplate
	if err := yaml.UnmarshalStrict([]byte(out), &gct); err != nil {
		t.Fatalf("the skeleton does not decode strictly as a GpuClaimTemplate: %v\n%s", err, out)
	}
	if gct.Kind != "GpuClaimTemplate" || gct.Spec.Spec.Devices.Count != 2 || gct.Spec.Spec.Devices.Exclusivity != apiv1.Shared {
		t.Errorf("template skeleton %+v", gct)
	}
}

func TestGenerateTemplateRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pod", "x"}, `unknown kind "pod"`},
		{[]string{"gct", "Bad_Name"}, `name "Bad_Name"`},
		{[]string{"gct", "x", "--gpus", "0"}, "--gpus must be between 1"},
		{[]string{"gct", "x", "--topology", "strict"}, `--topology "strict"`},
		{[]string{"gct", "x", "--exclusivity", "MIG"}, `--exclusivity "MIG"`},
		{[]string{"gct", "x", "--selector", "novalue"}, `--selector "novalue"`},
		{[]string{"workload", "x"}, "needs --image"},
		{[]string{"workload", "x", "--image", "i", "--gang", "--claim-template", "t"}, "--gang needs an inline claim spec"},
	} {
		if _, err := generate(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("generate-template %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestTopRowsSayNAWhereTheAgentIsSilent(t *testing.T) {
	util := int32(37)
	st := []apiv1.GpuNodeStatus{{Spec: apiv1.GpuNodeStatusSpec{NodeName: "n1"}, Status: apiv1.GpuNodeStatusStatus{Devices: []apiv1.Device{
		{ID: 1, Health: apiv1.Healthy, UtilizationPercent: &util, MemoryMiB: 81559, MemoryUsedMiB: ptr.To[int64](20480), TemperatureCelsius: ptr.To[int32](61)},
		{ID: 0},
	}}}}
	nodes := []NodeView{{Name: "n1", GPUs: []GPUView{{ID: 1, Holders: []string{"ml/train"}}}}}
	rows := TopRows(st, nodes)
	if len(rows) != 2 || rows[0].ID != 0 || rows[0].Health != "Unknown" || rows[1].Holder != "ml/train" {
		t.Fatalf("rows %+v", rows)
	}
	if got := orNA(rows[1].UtilizationPercent, "%") + " " + memory(rows[1]) + " " + orNA(rows[1].TemperatureCelsius, "C") + " " + orNA(rows[1].PowerWatts, "W"); got != "37% 20480/81559 MiB 61C n/a" {
		t.Errorf("GPU 1 reads %q", got)
	}
	if got := orNA(rows[0].UtilizationPercent, "%") + " " + memory(rows[0]); got != "n/a n/a" {
		t.Errorf("GPU 0 reads %q", got)
	}
}

func TestCompletionIsOffered(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &bytes.Buffer{}})
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"completion", "bash"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "__start_kubectl-gpu") {
		t.Errorf("completion bash wrote no bash completion for kubectl-gpu:\n%.300s", out.String())
	}
}

package kubectlgpu

import (
	"reflect"
	"testing"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim"
)

func TestSummaryLines(t *testing.T) {
	r := gpuclaim.DryRunResult{Nodes: []gpuclaim.NodeVerdict{
		{Node: "a", Reason: "not enough healthy free GPUs for the GpuClaim", Detail: "needs 4 healthy free GPUs in one island; best island has 2 free"},
		{Node: "b", Reason: "not enough healthy free GPUs for the GpuClaim", Detail: "needs 4 healthy free GPUs in one island; best island has 2 free"},
		{Node: "c", Reason: "node does not match the GpuClaim's selector"},
		{Node: "d", GPUs: []int{4, 5, 6, 7}},
	}}
	want := []string{
		"2 nodes: needs 4 healthy free GPUs in one island; best island has 2 free",
		"1 node: fit (e.g. d, GPUs 4,5,6,7)",
		"1 node: node does not match the GpuClaim's selector",
	}
	if got := SummaryLines(r); !reflect.DeepEqual(got, want) {
		t.Errorf("SummaryLines =\n%q\nwant\n%q", got, want)
	}
	blocked := gpuclaim.DryRunResult{Blocked: "GpuClaim ns/c is being deleted"}
	if got := SummaryLines(blocked); !reflect.DeepEqual(got, []string{"no node is looked at: GpuClaim ns/c is being deleted"}) {
		t.Errorf("blocked: %q", got)
	}
}

package runner

import (
	"testing"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// TestGangAffinity: in the stock run with gang pod affinity a gang member with gangTopology
// carries its gang's label and a required podAffinity to it on the level; the plain stock run
// and single pods carry none; gpu-scheduler's claim states the gangTopology.
func TestGangAffinity(t *testing.T) {
	p := scenario.PodPlan{Name: "g-0", Kind: "gang", Gang: "g", GangSize: 2,
		Claim: scenario.ClaimSpec{Count: 4, GangTopology: &scenario.GangTopologySpec{Level: "nvidia.com/gpu.clique", Mode: "Required"}}}
	pod := buildPod(p, "sim", "run", ModeStockAffinity)
	if pod.Labels[LabelGang] != "g" {
		t.Errorf("label %s = %q, want g", LabelGang, pod.Labels[LabelGang])
	}
	if pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAffinity == nil || len(pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("affinity = %+v, want one required podAffinity term", pod.Spec.Affinity)
	}
	term := pod.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "nvidia.com/gpu.clique" || term.LabelSelector == nil || term.LabelSelector.MatchLabels[LabelGang] != "g" {
		t.Errorf("term = %+v, want topologyKey nvidia.com/gpu.clique and the gang's label", term)
	}
	if pod.Spec.SchedulerName == gpuv1.SchedulerName {
		t.Errorf("schedulerName = %s, want the stock scheduler", pod.Spec.SchedulerName)
	}
	if plain := buildPod(p, "sim", "run", ModeStock); plain.Spec.Affinity != nil || plain.Labels[LabelGang] != "" {
		t.Errorf("plain stock pod has affinity %+v and gang label %q, want none", plain.Spec.Affinity, plain.Labels[LabelGang])
	}
	single := p
	single.Gang, single.GangSize = "", 0
	if s := buildPod(single, "sim", "run", ModeStockAffinity); s.Spec.Affinity != nil {
		t.Errorf("single pod has affinity %+v, want none", s.Spec.Affinity)
	}
	c := buildClaim(p, "sim", "run")
	if gt := c.Spec.GangTopology; gt == nil || gt.Level != "nvidia.com/gpu.clique" || gt.Mode != gpuv1.TopologyRequired {
		t.Errorf("claim gangTopology = %+v, want level nvidia.com/gpu.clique, Required", gt)
	}
}

// TestGangAffinityTarget: the run with gang pod affinity comes with the stock baseline when the
// scenario asks for it, on the stock run's cluster.
func TestGangAffinityTarget(t *testing.T) {
	s := &scenario.Scenario{Spec: scenario.Spec{Baseline: scenario.Baseline{GangPodAffinity: true}}}
	tg, err := Options{Scenario: s, Baseline: true}.Targets()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tg[ModeStockAffinity]; !ok {
		t.Errorf("targets %v lack %s", tg, ModeStockAffinity)
	}
	tg, _ = Options{Scenario: s, Baseline: false}.Targets()
	if _, ok := tg[ModeStockAffinity]; ok {
		t.Errorf("targets %v have %s without the baseline", tg, ModeStockAffinity)
	}
}

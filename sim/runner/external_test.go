package runner

import (
	"context"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	metadatafake "k8s.io/client-go/metadata/fake"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func testScenario(disabled bool) *scenario.Scenario {
	s := &scenario.Scenario{}
	s.Spec.Workload.Namespace = "sim"
	s.Spec.NodePools = []scenario.NodePool{{Name: "a100", Count: 2}, {Name: "pairs", Count: 1}}
	s.Spec.Baseline.Disabled = disabled
	return s
}

func withPremade(s *scenario.Scenario) *scenario.Scenario {
	s.Spec.Baseline.PremadeClaims = true
	return s
}

func withDRA(s *scenario.Scenario) *scenario.Scenario {
	s.Spec.Baseline.DRA = true
	return s
}

func boolPtr(v bool) *bool { return &v }

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Options
		want     map[string]string
		errWants string
	}{
		{name: "harness clusters", o: Options{Scenario: testScenario(false), Baseline: true},
			want: map[string]string{ModeGPU: "", ModeStock: ""}},
		{name: "no baseline", o: Options{Scenario: testScenario(false)},
			want: map[string]string{ModeGPU: ""}},
		{name: "baseline disabled by the scenario", o: Options{Scenario: testScenario(true), Baseline: true, Kubeconfig: "k"},
			want: map[string]string{ModeGPU: "k"}},
		{name: "existing cluster, baseline after cleanup on the same one", o: Options{Scenario: testScenario(false), Baseline: true, Kubeconfig: "k"},
			want: map[string]string{ModeGPU: "k", ModeStock: "k"}},
		{name: "two existing clusters", o: Options{Scenario: testScenario(false), Baseline: true, Kubeconfig: "k", BaselineKubeconfig: "b"},
			want: map[string]string{ModeGPU: "k", ModeStock: "b"}},
		{name: "DRA asked by the scenario", o: Options{Scenario: withDRA(testScenario(false)), Baseline: true},
			want: map[string]string{ModeGPU: "", ModeStock: "", ModeDRA: ""}},
		{name: "DRA asked by the scenario, turned off by the flag", o: Options{Scenario: withDRA(testScenario(false)), Baseline: true, DRA: boolPtr(false)},
			want: map[string]string{ModeGPU: "", ModeStock: ""}},
		{name: "DRA by the flag", o: Options{Scenario: testScenario(false), Baseline: true, DRA: boolPtr(true)},
			want: map[string]string{ModeGPU: "", ModeStock: "", ModeDRA: ""}},
		{name: "DRA without baselines", o: Options{Scenario: withDRA(testScenario(false))},
			want: map[string]string{ModeGPU: ""}},
		{name: "DRA from the scenario on an existing cluster: skipped", o: Options{Scenario: withDRA(testScenario(false)), Baseline: true, Kubeconfig: "k"},
			want: map[string]string{ModeGPU: "k", ModeStock: "k"}},
		{name: "pre-made claims: the pre-made and templated bare pods runs, both", o: Options{Scenario: withPremade(testScenario(false)), Baseline: true},
			want: map[string]string{ModeGPU: "", ModePremade: "", ModeTemplatedBare: "", ModeStock: ""}},
		{name: "pre-made claims on an existing cluster, without the stock baseline", o: Options{Scenario: withPremade(testScenario(true)), Baseline: true, Kubeconfig: "k"},
			want: map[string]string{ModeGPU: "k", ModePremade: "k", ModeTemplatedBare: "k"}},
		{name: "DRA by the flag on an existing cluster", o: Options{Scenario: testScenario(false), Baseline: true, Kubeconfig: "k", DRA: boolPtr(true)},
			errWants: "only on the simulator's own clusters"},
		{name: "baseline kubeconfig alone", o: Options{Scenario: testScenario(false), Baseline: true, BaselineKubeconfig: "b"},
			errWants: "--baseline-kubeconfig needs --kubeconfig"},
		{name: "baseline kubeconfig without a baseline", o: Options{Scenario: testScenario(false), Kubeconfig: "k", BaselineKubeconfig: "b"},
			errWants: "the baseline is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.o.Targets()
			if tc.errWants != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWants) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errWants)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("targets = %v, want %v", got, tc.want)
			}
		})
	}
}

func emptyCluster() existing {
	return existing{
		namespaces: sets.New("default", "kube-system", "kube-node-lease", "kube-public"),
		nodes:      sets.New[string](),
		crds:       sets.New[string](),
		webhooks:   sets.New[string](),
	}
}

func TestPlanOwned(t *testing.T) {
	s := testScenario(false)
	t.Run("fresh cluster: the run owns everything it creates", func(t *testing.T) {
		got, err := planOwned(s, "ours-1", emptyCluster(), ourCRDs, webhookNames())
		if err != nil {
			t.Fatal(err)
		}
		want := owned{run: "ours-1", podNS: "sim",
			nodes:      []string{"a100-00000", "a100-00001", "pairs-00000"},
			namespaces: []string{LeaseNamespace, "sim"},
			crds:       ourCRDs, webhooks: webhookNames()}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("owned = %+v\nwant %+v", got, want)
		}
	})
	t.Run("what existed before stays", func(t *testing.T) {
		before := emptyCluster()
		before.namespaces.Insert("sim")
		before.nodes.Insert("kind-control-plane", "other-00000")
		before.crds.Insert(ourCRDs[0])
		before.webhooks.Insert(webhookNames()...)
		got, err := planOwned(s, "ours-1", before, ourCRDs, webhookNames())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.namespaces, []string{LeaseNamespace}) {
			t.Errorf("namespaces = %v, want only %s", got.namespaces, LeaseNamespace)
		}
		if !reflect.DeepEqual(got.crds, ourCRDs[1:]) {
			t.Errorf("crds = %v, want %v", got.crds, ourCRDs[1:])
		}
		if len(got.webhooks) != 0 {
			t.Errorf("webhooks = %v, want none (they existed)", got.webhooks)
		}
		if len(got.nodes) != 3 {
			t.Errorf("nodes = %v, want the 3 of the pools", got.nodes)
		}
	})
	t.Run("a node named like a pool's refuses the cluster", func(t *testing.T) {
		before := emptyCluster()
		before.nodes.Insert("a100-00001")
		_, err := planOwned(s, "ours-1", before, ourCRDs, webhookNames())
		if err == nil || !strings.Contains(err.Error(), "a100-00001") {
			t.Fatalf("err = %v, want one naming a100-00001", err)
		}
	})
	t.Run("foreign GPU nodes refuse the cluster", func(t *testing.T) {
		before := emptyCluster()
		before.gpuNodes = []string{"gpu-00000"}
		_, err := planOwned(s, "ours-1", before, ourCRDs, webhookNames())
		if err == nil || !strings.Contains(err.Error(), "gpu-00000") {
			t.Fatalf("err = %v, want one naming gpu-00000", err)
		}
	})
}

func TestOwnedLeases(t *testing.T) {
	lease := func(name, node string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: name, Labels: map[string]string{}}
		if node != "" {
			m.Labels[gpuv1.LabelLeaseNode] = node
		}
		return m
	}
	got := ownedLeases([]metav1.ObjectMeta{
		lease("gpu-a100-00001-3", "a100-00001"),
		lease("gpu-other-00000-0", "other-00000"), // someone else's node
		lease("gpu-a100-00000-0", "a100-00000"),
		lease("leader", ""), // not a GPU lease
	}, []string{"a100-00000", "a100-00001", "pairs-00000"})
	want := []string{"gpu-a100-00000-0", "gpu-a100-00001-3"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ownedLeases = %v, want %v", got, want)
	}
}

func TestPoolNodesAndMissingNodes(t *testing.T) {
	s := testScenario(false) // pools a100 (2 nodes) and pairs (1)
	node := func(name, pool string) runtime.Object {
		return &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cluster.LabelPool: pool}},
		}
	}
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// An earlier run made the pools' nodes; a NodeRemoved fault deleted a100-00001. Another
	// pool's node is not the scenario's.
	mc := metadatafake.NewSimpleMetadataClient(scheme, node("a100-00000", "a100"), node("pairs-00000", "pairs"), node("other-00000", "other"))
	have, err := poolNodes(context.Background(), mc, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := sets.New("a100-00000", "pairs-00000"); !have.Equal(want) {
		t.Errorf("poolNodes = %v, want %v", sets.List(have), sets.List(want))
	}
	if got := missingNodes(s.Spec.NodePools[0], have); !reflect.DeepEqual(got, []int{1}) {
		t.Errorf("missing in a100 = %v, want [1]", got)
	}
	if got := missingNodes(s.Spec.NodePools[1], have); len(got) != 0 {
		t.Errorf("missing in pairs = %v, want none", got)
	}
	if got := missingNodes(s.Spec.NodePools[0], sets.New[string]()); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("missing on a fresh cluster = %v, want [0 1]", got)
	}
}

package kubectlgpu

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/claims"
	"github.com/gpu-scheduler/gpu-scheduler/claims/ledger"
)

func TestSummaryLines(t *testing.T) {
	r := ledger.DryRunResult{Nodes: []ledger.NodeVerdict{
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
	mig := ledger.DryRunResult{Nodes: []ledger.NodeVerdict{{Node: "m", GPUs: []int{2}, MIGDevices: []string{"2:4"}}}}
	if got := SummaryLines(mig); !reflect.DeepEqual(got, []string{"1 node: fit (e.g. m, MIG devices 2:4)"}) {
		t.Errorf("MIG: %q", got)
	}
	blocked := ledger.DryRunResult{Blocked: "GpuClaim ns/c is being deleted"}
	if got := SummaryLines(blocked); !reflect.DeepEqual(got, []string{"no node is looked at: GpuClaim ns/c is being deleted"}) {
		t.Errorf("blocked: %q", got)
	}
}

// A templated pod that is not bound has no claim yet (the scheduler makes it at binding):
// explain dry-runs the claim its template describes and says so; with no template the claim
// is reported missing.
func TestExplainTemplatedPodWithoutClaim(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := apiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	templated := func(name, template string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{apiv1.AnnotationClaimTemplate: template}}}
	}
	grouped := templated("grp-0", "x2")
	grouped.Labels = map[string]string{claims.LabelPodGroup: "train"}
	kc := kubefake.NewClientset(templated("web-0", "x2"), templated("lone-0", "nope"), grouped)
	tmpl := &apiv1.GpuClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x2"},
		Spec: apiv1.GpuClaimTemplateSpec{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}}}
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		apiv1.SchemeGroupVersion.WithResource("gpunodestatuses"):   "GpuNodeStatusList",
		apiv1.SchemeGroupVersion.WithResource("gpuclaims"):         "GpuClaimList",
		apiv1.SchemeGroupVersion.WithResource("gpuclaimtemplates"): "GpuClaimTemplateList",
	}, tmpl)

	ex, err := Explain(t.Context(), kc, dc, "ns", "web-0", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ex.ClaimMissing || ex.FromTemplate != "x2" || !strings.HasPrefix(ex.Request, "2 GPUs") {
		t.Fatalf("explanation %+v, want the claim of template x2 dry-run", ex)
	}
	var out strings.Builder
	if err := printExplanation(&out, ex, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ns/web-0-x2") || !strings.Contains(out.String(), "not made yet (from GpuClaimTemplate x2 when the pod is bound)") {
		t.Fatalf("output:\n%s\nwant the claim named as not made yet", out.String())
	}

	ex, err = Explain(t.Context(), kc, dc, "ns", "lone-0", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.ClaimMissing || ex.FromTemplate != "" {
		t.Fatalf("explanation %+v, want the claim missing (no template)", ex)
	}

	// A pod of a PodGroup: its claim, in the group's gang, is gpu-controller's to make; no dry
	// run of a claim of no gang.
	ex, err = Explain(t.Context(), kc, dc, "ns", "grp-0", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.ClaimMissing || ex.FromTemplate != "" {
		t.Fatalf("explanation %+v, want the claim missing (made by gpu-controller with the group's gang)", ex)
	}
}

// A MIG claim is described by its devices, and a dry run that found no node says what the
// nodes have free, as the scheduler's Pending reason does.
func TestExplainMIG(t *testing.T) {
	c := &apiv1.GpuClaim{Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2, Exclusivity: apiv1.MIG, MigProfile: "3g.40gb"}}}
	if got := describeRequest(c); got != "2 MIG devices of profile 3g.40gb" {
		t.Errorf("describeRequest = %q", got)
	}
	ex := &Explanation{Claim: "ns/c", DryRun: ledger.DryRunResult{
		Nodes: []ledger.NodeVerdict{{Node: "a", Reason: ledger.ReasonNoFit, Detail: "needs 2 free MIG devices of profile 3g.40gb; node has 1"}},
		NoMIG: "no node has 2 free MIG devices of profile 3g.40gb; 1 node has 3g.40gb free (fewer than 2) (the MIG layout is set by the operator: docs/sharing.md)"}}
	var out strings.Builder
	if err := printExplanation(&out, ex, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  "+ex.DryRun.NoMIG+"\n") {
		t.Fatalf("output:\n%s\nwant the NoMIG line", out.String())
	}
}

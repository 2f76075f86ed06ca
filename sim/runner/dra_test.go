package runner

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	resourceinternal "k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/dra"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// validTemplate checks a template the way the apiserver does.
func validTemplate(t *testing.T, tmpl *resourceapi.ResourceClaimTemplate) {
	t.Helper()
	var internal resourceinternal.ResourceClaimTemplate
	if err := legacyscheme.Scheme.Convert(tmpl, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateResourceClaimTemplate(&internal); len(errs) > 0 {
		t.Fatalf("the apiserver would refuse template %s: %v", tmpl.Name, errs.ToAggregate())
	}
}

func TestDRATemplates(t *testing.T) {
	for _, tc := range []struct {
		claim scenario.ClaimSpec
		name  string
		check func(t *testing.T, d resourceapi.DeviceClaim)
	}{
		{claim: scenario.ClaimSpec{Count: 1}, name: "gpus-1", check: func(t *testing.T, d resourceapi.DeviceClaim) {
			if len(d.Constraints) != 0 || d.Requests[0].Exactly == nil || d.Requests[0].Exactly.Count != 1 {
				t.Errorf("one GPU needs no island constraint: %+v", d)
			}
		}},
		{claim: scenario.ClaimSpec{Count: 4, Topology: &scenario.TopologySpec{Mode: "Required"}}, name: "gpus-4-required", check: func(t *testing.T, d resourceapi.DeviceClaim) {
			e := d.Requests[0].Exactly
			if e == nil || e.Count != 4 || e.DeviceClassName != dra.DeviceClassName || len(e.Selectors) != 0 {
				t.Fatalf("request %+v, want exactly 4 of class %s", d.Requests[0], dra.DeviceClassName)
			}
			if len(d.Constraints) != 1 || *d.Constraints[0].MatchAttribute != dra.IslandAttribute || d.Constraints[0].Requests[0] != draRequest {
				t.Errorf("constraints %+v, want matchAttribute %s on %s", d.Constraints, dra.IslandAttribute, draRequest)
			}
		}},
		{claim: scenario.ClaimSpec{Count: 2, Topology: &scenario.TopologySpec{Mode: "Preferred", MinBandwidthGBps: 300}}, name: "gpus-2-preferred-bw300", check: func(t *testing.T, d resourceapi.DeviceClaim) {
			fa := d.Requests[0].FirstAvailable
			if d.Requests[0].Exactly != nil || len(fa) != 2 || fa[0].Count != 2 || fa[1].Count != 2 {
				t.Fatalf("request %+v, want a prioritized list of two subrequests of 2 GPUs", d.Requests[0])
			}
			if len(fa[0].Selectors) != 1 || !strings.Contains(fa[0].Selectors[0].CEL.Expression, dra.AttrBandwidth+" >= 300") || len(fa[1].Selectors) != 0 {
				t.Errorf("the bandwidth floor belongs to the island subrequest only: %+v / %+v", fa[0].Selectors, fa[1].Selectors)
			}
			if len(d.Constraints) != 1 || d.Constraints[0].Requests[0] != draRequest+"/island" {
				t.Errorf("constraints %+v, want the island constraint on the first subrequest only", d.Constraints)
			}
		}},
		{claim: scenario.ClaimSpec{Count: 8}, name: "gpus-8-preferred", check: func(t *testing.T, d resourceapi.DeviceClaim) {
			if len(d.Requests[0].FirstAvailable) != 2 {
				t.Errorf("no topology means Preferred (the API's default): %+v", d.Requests[0])
			}
		}},
		{claim: scenario.ClaimSpec{Count: 8, Topology: &scenario.TopologySpec{Mode: "Ignore", MinBandwidthGBps: 100}}, name: "gpus-8", check: func(t *testing.T, d resourceapi.DeviceClaim) {
			if len(d.Constraints) != 0 || d.Requests[0].Exactly == nil || len(d.Requests[0].Exactly.Selectors) != 0 {
				t.Errorf("Ignore considers no topology: %+v", d)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := shapeOf(tc.claim)
			if s.name() != tc.name {
				t.Fatalf("template name %q, want %q", s.name(), tc.name)
			}
			tmpl := draTemplate(s, "sim")
			validTemplate(t, tmpl)
			tc.check(t, tmpl.Spec.Spec.Devices)
		})
	}
}

// The DRA pod asks for no nvidia.com/gpu, names its shape's template and keeps the selector.
func TestDRAPod(t *testing.T) {
	p := scenario.PodPlan{Name: "p-1", Kind: "quad", Claim: scenario.ClaimSpec{Count: 4, Selector: map[string]string{"gpu-type": "h100"}}}
	pod := buildPod(p, "sim", "dra-1", ModeDRA)
	c := pod.Spec.Containers[0]
	if _, ok := c.Resources.Requests[cluster.ResourceGPU]; ok || len(c.Resources.Limits) != 0 {
		t.Errorf("the DRA pod still asks for %s: %+v", cluster.ResourceGPU, c.Resources)
	}
	if len(pod.Spec.ResourceClaims) != 1 || *pod.Spec.ResourceClaims[0].ResourceClaimTemplateName != "gpus-4-preferred" ||
		len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
		t.Errorf("pod claims %+v, container claims %+v; want one claim from template gpus-4-preferred used by the container", pod.Spec.ResourceClaims, c.Resources.Claims)
	}
	if pod.Spec.NodeSelector["gpu-type"] != "h100" || pod.Spec.SchedulerName != "" {
		t.Errorf("node selector %v, scheduler %q; want the claim's selector and the default scheduler", pod.Spec.NodeSelector, pod.Spec.SchedulerName)
	}
	if stock := buildPod(p, "sim", "stock-1", ModeStock); stock.Spec.Containers[0].Resources.Limits.Name(cluster.ResourceGPU, resource.DecimalSI).Value() != 4 {
		t.Errorf("the nvidia.com/gpu baseline changed: %+v", stock.Spec.Containers[0].Resources)
	}
}

// One template per shape, and the report names what DRA was not asked for.
func TestDRAPlanTemplatesAndGaps(t *testing.T) {
	plan := []scenario.PodPlan{
		{Name: "a", Claim: scenario.ClaimSpec{Count: 1}},
		{Name: "b", Claim: scenario.ClaimSpec{Count: 1, Exclusivity: "Shared"}},
		{Name: "c", Claim: scenario.ClaimSpec{Count: 2, Policy: "contiguous"}},
		{Name: "d", Claim: scenario.ClaimSpec{Count: 2, Policy: "spread", Topology: &scenario.TopologySpec{Mode: "Ignore"}}},
		{Name: "e", Gang: "g", GangSize: 2, Claim: scenario.ClaimSpec{Count: 4, Topology: &scenario.TopologySpec{Mode: "Required"}}},
		{Name: "f", Gang: "g", GangSize: 2, Claim: scenario.ClaimSpec{Count: 4, Topology: &scenario.TopologySpec{Mode: "Required"}}},
	}
	var names []string
	for _, tmpl := range draTemplates(plan, "sim") {
		names = append(names, tmpl.Name)
	}
	if got, want := strings.Join(names, " "), "gpus-1 gpus-2 gpus-2-preferred gpus-4-required"; got != want {
		t.Errorf("templates %q, want %q", got, want)
	}
	gaps := strings.Join(draGaps(plan), "\n")
	for _, want := range []string{
		"2 pods with topology Required",
		"1 multi-GPU pods with topology Preferred",
		"policy contiguous (3 multi-GPU pods)", // c, e, f: contiguous is the default policy
		"policy spread (1 pods)",
		"Shared exclusivity (1 pods)",
		"gangs (2 pods in 1 gangs)",
	} {
		if !strings.Contains(gaps, want) {
			t.Errorf("the DRA notes lack %q:\n%s", want, gaps)
		}
	}
	if strings.Contains(gaps, "bandwidth") || strings.Contains(gaps, "preferIds") {
		t.Errorf("notes about features no pod used:\n%s", gaps)
	}
}

// The recorder reads a DRA pod's GPU IDs from its claim's allocation result and counts the
// claims made for pods that had already finished.
func TestRecorderClaims(t *testing.T) {
	rec := newRecorder(time.Now())
	claim := func(uid, pod string, devices ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: pod + "-gpus-x", UID: types.UID(uid),
			OwnerReferences: []metav1.OwnerReference{{Kind: "Pod", Name: pod, Controller: ptr.To(true)}}}}
		if len(devices) > 0 {
			c.Status.Allocation = &resourceapi.AllocationResult{}
			for _, d := range devices {
				c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
					resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: dra.DriverName, Pool: "n", Device: d})
			}
		}
		return c
	}
	rec.onClaim(claim("1", "p", "gpu-5", "gpu-4"))
	rec.onClaim(claim("1", "p", "gpu-5", "gpu-4")) // an update: the same claim
	if rec.pods["p"].draFallback {
		t.Errorf("request %q is not the fallback", "gpus")
	}
	fb := claim("9", "f", "gpu-1", "gpu-2")
	fb.Status.Allocation.Devices.Results[0].Request = draRequest + "/" + draFallback
	rec.onClaim(fb)
	if !rec.pods["f"].draFallback {
		t.Errorf("a claim allocated by subrequest %s/%s was not seen as the fallback", draRequest, draFallback)
	}
	if got := rec.pods["p"].ids; len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("pod p's GPU IDs %v, want [4 5] from its claim", got)
	}
	rec.observePod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false)
	rec.onClaim(claim("2", "p")) // made anew after the pod finished, never allocated
	rec.onClaim(claim("3", "q", "gpu-0"))
	if rec.claimsSeen.Len() != 4 || rec.claimsAfterEnd != 1 {
		t.Errorf("%d claims seen, %d after their pod ended; want 4 and 1", rec.claimsSeen.Len(), rec.claimsAfterEnd)
	}
	if got := rec.pods["p"].ids; len(got) != 2 {
		t.Errorf("a claim made after the pod ended changed its GPU IDs to %v", got)
	}
}

package kubectlgpu

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// namespaceUser returns fake clients that answer as the API server answers a user bound to edit
// in namespace ns: Forbidden for every list at cluster scope or in another namespace.
func namespaceUser(t *testing.T, ns string, objs ...runtime.Object) (*kubefake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := apiv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var kubeObjs, gpuObjs []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*apiv1.GpuClaim); ok {
			gpuObjs = append(gpuObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	kc := kubefake.NewClientset(kubeObjs...)
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		apiv1.SchemeGroupVersion.WithResource("gpunodestatuses"):   "GpuNodeStatusList",
		apiv1.SchemeGroupVersion.WithResource("gpuclaims"):         "GpuClaimList",
		apiv1.SchemeGroupVersion.WithResource("gpuclaimtemplates"): "GpuClaimTemplateList",
	}, gpuObjs...)
	deny := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == ns {
			return false, nil, nil
		}
		gr := a.GetResource().GroupResource()
		return true, nil, apierrors.NewForbidden(gr, "", nil)
	}
	kc.PrependReactor("list", "*", deny)
	dc.PrependReactor("list", "*", deny)
	return kc, dc
}

// A namespace user's fleet: the claims of their namespace, no GPU node, and a note naming the
// permission that would show the nodes, instead of the API server's Forbidden.
func TestLoadForANamespaceUser(t *testing.T) {
	claim := &apiv1.GpuClaim{TypeMeta: metav1.TypeMeta{APIVersion: "gpu.scheduling/v1", Kind: "GpuClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mine"}, Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}}
	kc, dc := namespaceUser(t, "team-a", claim)
	f, err := Load(t.Context(), kc, dc, "team-a")
	if err != nil {
		t.Fatalf("Load as a namespace user: %v, want the namespace's part of the fleet", err)
	}
	if len(f.Claims) != 1 || f.Claims[0].Name != "mine" || !f.NodesHidden || len(f.Nodes) != 0 {
		t.Errorf("fleet %+v, want the claim mine and the nodes hidden", f)
	}
	if len(f.Notes) != 1 || !strings.Contains(f.Notes[0], "GPU nodes are not shown: you may not list gpunodestatuses.gpu.scheduling (cluster scope)") {
		t.Errorf("notes %q, want one naming the GpuNodeStatus permission", f.Notes)
	}
	// Claims of every namespace are the user's to ask for, and refused with the reason.
	if _, err := Load(t.Context(), kc, dc, ""); !apierrors.IsForbidden(err) {
		t.Errorf("Load of all namespaces: %v, want Forbidden", err)
	}

	// explain: the pod, the claim and events, and a note instead of the dry run.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p", Annotations: map[string]string{apiv1.AnnotationClaim: "mine"}}}
	if err := kc.Tracker().Add(pod); err != nil {
		t.Fatal(err)
	}
	ex, err := Explain(t.Context(), kc, dc, "team-a", "p", 10*time.Minute)
	if err != nil {
		t.Fatalf("explain as a namespace user: %v", err)
	}
	var out strings.Builder
	if err := printExplanation(&out, ex, time.Now()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "team-a/mine") || !strings.Contains(out.String(), "Note: the dry run of the scheduler's GPU filter is left out: you may not list nodes") {
		t.Errorf("explain output:\n%s\nwant the claim and a note on the dry run", out.String())
	}
}

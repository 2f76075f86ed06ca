package claims

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func podWith(name string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "uid-" + types.UID(name), Annotations: ann}}
}

func TestName(t *testing.T) {
	fromTemplate, err := apiv1.ClaimNameForPod("p", "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc     string
		ann      map[string]string
		want     string
		wantOK   bool
		template string
		tmplOK   bool
	}{
		{desc: "no annotation", ann: nil},
		{desc: "claim", ann: map[string]string{apiv1.AnnotationClaim: "c"}, want: "c", wantOK: true},
		{desc: "template", ann: map[string]string{apiv1.AnnotationClaimTemplate: "t"}, want: fromTemplate, wantOK: true, template: "t", tmplOK: true},
		{desc: "claim wins over template", ann: map[string]string{apiv1.AnnotationClaim: "c", apiv1.AnnotationClaimTemplate: "t"}, want: "c", wantOK: true},
		{desc: "empty template names an empty claim", ann: map[string]string{apiv1.AnnotationClaimTemplate: ""}, want: "", wantOK: true, template: "", tmplOK: true},
		{desc: "empty claim", ann: map[string]string{apiv1.AnnotationClaim: ""}, want: "", wantOK: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			pod := podWith("p", tc.ann)
			got, ok := Name(pod)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Name = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
			tmpl, ok := Template(pod)
			if tmpl != tc.template || ok != tc.tmplOK {
				t.Errorf("Template = %q, %v; want %q, %v", tmpl, ok, tc.template, tc.tmplOK)
			}
		})
	}
}

func TestOwnership(t *testing.T) {
	pod := podWith("p", nil)
	earlier := podWith("p", nil)
	earlier.UID = "earlier"
	other := podWith("q", nil)
	ref := func(kind string, p *corev1.Pod, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: kind, Name: p.Name, UID: p.UID, Controller: ptr.To(controller)}
	}
	claim := func(refs ...metav1.OwnerReference) *apiv1.GpuClaim {
		return &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", OwnerReferences: refs}}
	}
	for _, tc := range []struct {
		desc           string
		claim          *apiv1.GpuClaim
		owned, earlier bool
	}{
		{desc: "no owner", claim: claim()},
		{desc: "controlled by the pod", claim: claim(ref("Pod", pod, true)), owned: true},
		{desc: "owned, not controlled", claim: claim(ref("Pod", pod, false))},
		{desc: "controlled by another kind with the pod's UID", claim: claim(ref("GpuWorkload", pod, true))},
		{desc: "controlled by an earlier pod of the name", claim: claim(ref("Pod", earlier, true)), earlier: true},
		{desc: "controlled by another pod", claim: claim(ref("Pod", other, true))},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			if got := IsOwnedBy(tc.claim, pod); got != tc.owned {
				t.Errorf("IsOwnedBy = %v, want %v", got, tc.owned)
			}
			if got := IsOfEarlierPod(tc.claim, pod); got != tc.earlier {
				t.Errorf("IsOfEarlierPod = %v, want %v", got, tc.earlier)
			}
		})
	}
}

func TestScheduledBy(t *testing.T) {
	for _, tc := range []struct {
		pod, release string
		want         bool
	}{
		{pod: apiv1.SchedulerName, release: "", want: true},
		{pod: apiv1.SchedulerName, release: apiv1.SchedulerName, want: true},
		{pod: "gpu-b", release: "gpu-b", want: true},
		{pod: apiv1.SchedulerName, release: "gpu-b"},
		{pod: "gpu-b", release: ""},
		// The apiserver stores a pod that names no scheduler with default-scheduler: neither
		// is a gpu-scheduler release's pod, not even the default release's.
		{pod: "", release: ""},
		{pod: corev1.DefaultSchedulerName, release: ""},
		{pod: corev1.DefaultSchedulerName, release: apiv1.SchedulerName},
	} {
		if got := ScheduledBy(tc.pod, tc.release); got != tc.want {
			t.Errorf("ScheduledBy(%q, %q) = %v, want %v", tc.pod, tc.release, got, tc.want)
		}
	}
}

func TestJudgeExisting(t *testing.T) {
	pod := podWith("p", nil)
	ref := func(kind, name string, uid types.UID) *apiv1.GpuClaim {
		return &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}}}
	}
	for _, tc := range []struct {
		desc  string
		claim *apiv1.GpuClaim
		want  Existing
	}{
		{desc: "own", claim: ref("Pod", "p", pod.UID), want: ExistingOwn},
		{desc: "earlier pod of the name", claim: ref("Pod", "p", "earlier"), want: ExistingOfEarlierPod},
		{desc: "another pod", claim: ref("Pod", "q", "other"), want: ExistingForeign},
		{desc: "another kind", claim: ref("GpuWorkload", "p", "w"), want: ExistingForeign},
		{desc: "made by hand", claim: &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, want: ExistingForeign},
	} {
		if got := JudgeExisting(tc.claim, pod); got != tc.want {
			t.Errorf("%s: JudgeExisting = %v, want %v", tc.desc, got, tc.want)
		}
	}
}

package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestReaderCount reads counts from claims and templates and refuses sharing either way: a
// template must not be a way around the Exclusive-only rule of the device-plugin mode. The
// objects are in the caches; one created after the caches synced is found by the fallback GET.
func TestReaderCount(t *testing.T) {
	spec := func(n int32, e gpuv1.Exclusivity) gpuv1.GpuClaimSpec {
		return gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: n, Exclusivity: e}}
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ml", Name: name} }
	gpus := fake.NewSimpleClientset(
		&gpuv1.GpuClaim{ObjectMeta: meta("c4"), Spec: spec(4, gpuv1.Exclusive)},
		&gpuv1.GpuClaim{ObjectMeta: meta("shared"), Spec: spec(1, gpuv1.Shared)},
		&gpuv1.GpuClaim{ObjectMeta: meta("mig"), Spec: gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2, Exclusivity: gpuv1.MIG, MigProfile: "1g.10gb"}}},
		&gpuv1.GpuClaimTemplate{ObjectMeta: meta("t2"), Spec: gpuv1.GpuClaimTemplateSpec{Spec: spec(2, "")}},
		&gpuv1.GpuClaimTemplate{ObjectMeta: meta("tshared"), Spec: gpuv1.GpuClaimTemplateSpec{Spec: spec(1, gpuv1.Shared)}},
		&gpuv1.GpuWorkload{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "gw", UID: "gw-uid"}, Spec: gpuv1.GpuWorkloadSpec{Claim: gpuv1.WorkloadClaim{Spec: &gpuv1.GpuClaimSpec{Devices: gpuv1.DeviceRequest{Count: 2}}}}},
	)
	r := newClusterReader(kubefake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{LabelForbidPrivileged: "true"}}}), gpus, ReaderOptions{Claims: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Created behind the informers' back (the fake's watch delivers it, but maybe not yet).
	if _, err := gpus.GpuV1().GpuClaims("ml").Create(ctx, &gpuv1.GpuClaim{ObjectMeta: meta("late"), Spec: spec(3, gpuv1.Exclusive)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	count := r.Count
	workload := func(uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: gpuv1.SchemeGroupVersion.String(), Kind: "GpuWorkload", Name: "gw", UID: types.UID(uid), Controller: ptr.To(true)}
	}
	if forbid, err := r.ForbidsPrivileged(ctx, "ml"); err != nil || !forbid {
		t.Errorf("ForbidsPrivileged(ml) = %v, %v; want true", forbid, err)
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        int32
		wantOK      bool
		wantErr     string
		owner       *metav1.OwnerReference
	}{
		{name: "no claim", annotations: nil},
		{name: "claim", annotations: map[string]string{gpuv1.AnnotationClaim: "c4"}, want: 4, wantOK: true},
		{name: "claim created after the sync", annotations: map[string]string{gpuv1.AnnotationClaim: "late"}, want: 3, wantOK: true},
		{name: "template", annotations: map[string]string{gpuv1.AnnotationClaimTemplate: "t2"}, want: 2, wantOK: true},
		{name: "shared claim", annotations: map[string]string{gpuv1.AnnotationClaim: "shared"}, wantErr: "GpuClaim ml/shared: spec.devices.exclusivity Shared"},
		{name: "MIG claim", annotations: map[string]string{gpuv1.AnnotationClaim: "mig"}, wantErr: "GpuClaim ml/mig: spec.devices.exclusivity MIG"},
		{name: "shared template", annotations: map[string]string{gpuv1.AnnotationClaimTemplate: "tshared"}, wantErr: "GpuClaimTemplate ml/tshared: spec.spec.devices.exclusivity Shared"},
		{name: "missing claim", annotations: map[string]string{gpuv1.AnnotationClaim: "nope"}, wantErr: "GpuClaim ml/nope"},
		{name: "missing template", annotations: map[string]string{gpuv1.AnnotationClaimTemplate: "nope"}, wantErr: "GpuClaimTemplate ml/nope"},
		// A GpuWorkload makes the claim right after the pod: count from its inline spec.
		{name: "workload pod before its claim", annotations: map[string]string{gpuv1.AnnotationClaim: "p"}, owner: workload("gw-uid"), want: 2, wantOK: true},
		{name: "workload pod naming another claim", annotations: map[string]string{gpuv1.AnnotationClaim: "nope"}, owner: workload("gw-uid"), wantErr: "GpuClaim ml/nope"},
		{name: "pod claiming a workload it is not from", annotations: map[string]string{gpuv1.AnnotationClaim: "p"}, owner: workload("other-uid"), wantErr: "GpuClaim ml/p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: tc.annotations}}
			if tc.owner != nil {
				pod.OwnerReferences = []metav1.OwnerReference{*tc.owner}
			}
			n, ok, err := count(context.Background(), pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || n != tc.want || ok != tc.wantOK {
				t.Fatalf("count = %d, %v, %v; want %d, %v, nil", n, ok, err, tc.want, tc.wantOK)
			}
		})
	}
}

// TestReaderRequest: in device-plugin mode a MIG claim asks for its count of its profile's
// resource, a Shared claim or template for one gpu-shared per GPU, an Exclusive one for the
// webhook's own resource (Resource empty); none is refused.
func TestReaderRequest(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ml", Name: name} }
	dev := func(d gpuv1.DeviceRequest) gpuv1.GpuClaimSpec { return gpuv1.GpuClaimSpec{Devices: d} }
	gpus := fake.NewSimpleClientset(
		&gpuv1.GpuClaim{ObjectMeta: meta("mig"), Spec: dev(gpuv1.DeviceRequest{Count: 2, Exclusivity: gpuv1.MIG, MigProfile: "1g.10gb"})},
		&gpuv1.GpuClaim{ObjectMeta: meta("shared"), Spec: dev(gpuv1.DeviceRequest{Count: 1, Exclusivity: gpuv1.Shared, Share: &gpuv1.GPUShare{MemoryPercent: 25}})},
		&gpuv1.GpuClaim{ObjectMeta: meta("whole"), Spec: dev(gpuv1.DeviceRequest{Count: 4})},
		&gpuv1.GpuClaimTemplate{ObjectMeta: meta("tshared"), Spec: gpuv1.GpuClaimTemplateSpec{Spec: dev(gpuv1.DeviceRequest{Count: 2, Exclusivity: gpuv1.Shared})}},
	)
	r := newClusterReader(kubefake.NewSimpleClientset(), gpus, ReaderOptions{Claims: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		annotations map[string]string
		want        GPURequest
	}{
		{map[string]string{gpuv1.AnnotationClaim: "mig"}, GPURequest{Resource: "gpu.scheduling/mig-1g.10gb", Count: 2}},
		{map[string]string{gpuv1.AnnotationClaim: "shared"}, GPURequest{Resource: "gpu.scheduling/gpu-shared", Count: 1}},
		{map[string]string{gpuv1.AnnotationClaimTemplate: "tshared"}, GPURequest{Resource: "gpu.scheduling/gpu-shared", Count: 2}},
		{map[string]string{gpuv1.AnnotationClaim: "whole"}, GPURequest{Count: 4}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: tc.annotations}}
		got, ok, err := r.Request(ctx, pod)
		if err != nil || !ok || got != tc.want {
			t.Errorf("Request(%v) = %+v, %v, %v; want %+v", tc.annotations, got, ok, err, tc.want)
		}
	}
	if _, ok, err := r.Request(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p"}}); ok || err != nil {
		t.Errorf("a pod without a claim: %v, %v; want not ok, no error", ok, err)
	}
}

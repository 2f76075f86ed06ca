package webhook

import (
	"context"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// BenchmarkRespondMutate measures one /mutate review of a four-container GPU pod, from request
// bytes to response bytes: the work the apiserver waits for on every GPU pod creation.
func BenchmarkRespondMutate(b *testing.B) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler}
	pod := gpuPod(nil, []corev1.EnvVar{env("A", "1"), env("B", "2")}, []corev1.EnvVar{env(EnvCUDAVisibleDevices, "0")}, nil)
	body := reviewBody(b, request(b, admissionv1.Create, "", "Pod", alice, pod, nil))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if code, _, out := Respond(ctx, body, a.Mutate); code != http.StatusOK || !out.Mutated {
			b.Fatalf("code %d outcome %+v", code, out)
		}
	}
}

// BenchmarkRespondValidate measures a denied binding review.
func BenchmarkRespondValidate(b *testing.B) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler}
	body := reviewBody(b, request(b, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", map[string]string{ids: "0,1"}), nil))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if code, _, out := Respond(ctx, body, a.Validate); code != http.StatusOK || out.DenyReason != ReasonBinding {
			b.Fatalf("code %d outcome %+v", code, out)
		}
	}
}

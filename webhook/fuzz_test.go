package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzDecodeAndAdmit feeds arbitrary request bodies to the decoder and both admitters: nothing
// may panic, every decoded request gets a response with its UID, and a patch, when there is
// one, must apply to the pod and leave it needing no further patch.
func FuzzDecodeAndAdmit(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"metadata":{"annotations":{"gpu.scheduling/claim":"c"}},"spec":{"containers":[{"name":"a"},{"name":"b","env":[{"name":"CUDA_VISIBLE_DEVICES","value":"0"}]}],"initContainers":[{"name":"i","env":[]}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"2","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"UPDATE","userInfo":{"username":"alice"},"object":{"metadata":{"annotations":{"gpu.scheduling/gpu-ids":"0"}}},"oldObject":{"metadata":{}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"3","kind":{"version":"v1","kind":"Binding"},"resource":{"version":"v1","resource":"pods"},"subResource":"binding","operation":"CREATE","userInfo":{"username":"system:serviceaccount:gpu-scheduler:gpu-scheduler"},"object":{"metadata":{"annotations":{"gpu.scheduling/allocated":"n:0,1","gpu.scheduling/gpu-ids":"0,1"}},"target":{"name":"n"}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"8","kind":{"version":"v1","kind":"Binding"},"resource":{"version":"v1","resource":"bindings"},"name":"p","namespace":"ml","operation":"CREATE","userInfo":{"username":"alice"},"object":{"metadata":{"name":"p","annotations":{"gpu.scheduling/gpu-ids":"0,1"}},"target":{"name":"n"}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"4","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"spec":{"schedulerName":"gpu-scheduler","containers":[{"env":[{"name":"NVIDIA_VISIBLE_DEVICES","value":"all"},{"name":"CUDA_VISIBLE_DEVICES"}]}]}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"5","object":null,"oldObject":7}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"6","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","object":{"spec":{"containers":7}}}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"7","kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"subResource":"ephemeralcontainers","operation":"UPDATE","object":{"metadata":{"annotations":{"gpu.scheduling/claim":"c"}},"spec":{"ephemeralContainers":[{"name":"old"},{"name":"new","env":[{"name":"CUDA_VISIBLE_DEVICES","value":"1"}]}]}},"oldObject":{"spec":{"ephemeralContainers":[{"name":"old"}]}}}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	ctx := context.Background()
	admitters := []*Admitter{
		{Mode: EnvModeCUDA, Scheduler: testScheduler},
		{Mode: EnvModeNVIDIA, Scheduler: testScheduler},
		{Mode: EnvModeBoth, Scheduler: testScheduler},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		review, err := DecodeReview(data)
		if err != nil {
			return
		}
		for _, a := range admitters {
			vr, _ := a.Validate(ctx, review.Request)
			if vr == nil || vr.UID != review.Request.UID {
				t.Fatalf("validate response %+v for request %s", vr, review.Request.UID)
			}
			if !vr.Allowed && (vr.Result == nil || vr.Result.Message == "") {
				t.Fatalf("validate denied without a message: %+v", vr)
			}
			mr, out := a.Mutate(ctx, review.Request)
			if mr == nil || mr.UID != review.Request.UID {
				t.Fatalf("mutate response %+v for request %s", mr, review.Request.UID)
			}
			if out.Mutated != (len(mr.Patch) > 0) {
				t.Fatalf("outcome %+v but patch %s", out, mr.Patch)
			}
			if len(mr.Patch) == 0 {
				continue
			}
			// The pod as the apiserver would serialize it, the patch applied the way it would.
			pod := &corev1.Pod{}
			if err := decodeObject(review.Request.Object.Raw, pod); err != nil {
				t.Fatalf("a patch was returned for an object that does not decode: %v", err)
			}
			var ops []PatchOp
			if err := json.Unmarshal(mr.Patch, &ops); err != nil {
				t.Fatalf("patch is not JSON patch: %v: %s", err, mr.Patch)
			}
			got := applyPatch(t, pod, ops)
			if review.Request.SubResource == "ephemeralcontainers" {
				old := &corev1.Pod{}
				if err := decodeObject(review.Request.OldObject.Raw, old); err != nil {
					t.Fatalf("a patch was returned for an old object that does not decode: %v", err)
				}
				if again := MutateEphemeralContainers(old, got, a.Mode, ""); len(again.Patch) != 0 {
					t.Fatalf("ephemeral containers not idempotent: %+v", again.Patch)
				}
				continue
			}
			checkMutated(t, got, a.Mode)
		}
	})
}

// FuzzMutatePod builds pods from a compact description and checks what the patch does to them:
// every container ends with exactly our variables, the user's other variables are kept in
// order, one warning per replaced value, and a second run changes nothing.
//
// spec is a list of containers separated by '|', each a list of variables separated by ';'
// ("NAME=value", or "NAME@" for our own Downward API reference); a leading '+' marks an init
// container.
func FuzzMutatePod(f *testing.F) {
	f.Add(uint8(0), "")
	f.Add(uint8(0), "|")
	f.Add(uint8(1), "A=1;CUDA_VISIBLE_DEVICES=0|+NVIDIA_VISIBLE_DEVICES=all")
	f.Add(uint8(2), "CUDA_VISIBLE_DEVICES@;CUDA_DEVICE_ORDER@;B=$(CUDA_VISIBLE_DEVICES)|CUDA_VISIBLE_DEVICES@;CUDA_VISIBLE_DEVICES@")
	f.Add(uint8(0), "CUDA_DEVICE_ORDER=FASTEST_FIRST;CUDA_VISIBLE_DEVICES@")
	f.Add(uint8(2), "+;|NVIDIA_VISIBLE_DEVICES@;X=y;CUDA_VISIBLE_DEVICES=3")
	f.Fuzz(func(t *testing.T, modeSel uint8, spec string) {
		// Objects reach the webhook as JSON, which cannot carry invalid UTF-8.
		if len(spec) > 4096 || !utf8.ValidString(spec) {
			return
		}
		mode := []EnvMode{EnvModeCUDA, EnvModeNVIDIA, EnvModeBoth}[int(modeSel)%3]
		pod := gpuPod()
		for _, c := range strings.Split(spec, "|") {
			init := strings.HasPrefix(c, "+")
			c = strings.TrimPrefix(c, "+")
			var vars []corev1.EnvVar
			for _, v := range strings.Split(c, ";") {
				switch {
				case v == "":
				case strings.HasSuffix(v, "@"):
					name := strings.TrimSuffix(v, "@")
					if w, ok := managedVar(mode, name); ok {
						vars = append(vars, w)
					} else {
						vars = append(vars, visibleDevicesEnv(name))
					}
				default:
					name, value, _ := strings.Cut(v, "=")
					vars = append(vars, corev1.EnvVar{Name: name, Value: value})
				}
			}
			container := corev1.Container{Name: "c", Env: vars}
			if init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, container)
			} else {
				pod.Spec.Containers = append(pod.Spec.Containers, container)
			}
		}
		m := MutatePod(pod, mode, "")
		got := applyPatch(t, pod, m.Patch)
		checkMutated(t, got, mode)

		wantWarnings := 0
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				for _, e := range c.Env {
					if w, ok := managedVar(mode, e.Name); ok && !equality.Semantic.DeepEqual(e, w) {
						wantWarnings++
					}
				}
			}
		}
		if len(m.Warnings) != wantWarnings {
			t.Errorf("%d warnings %q, want %d", len(m.Warnings), m.Warnings, wantWarnings)
		}
		// The user's own variables survive, in order.
		for i, before := range pod.Spec.Containers {
			if !equality.Semantic.DeepEqual(others(before.Env, mode), others(got.Spec.Containers[i].Env, mode)) {
				t.Errorf("container %d lost or reordered user variables: before %+v after %+v", i, before.Env, got.Spec.Containers[i].Env)
			}
		}
	})
}

func managedVar(mode EnvMode, name string) (corev1.EnvVar, bool) {
	for _, w := range mode.Env() {
		if w.Name == name {
			return w, true
		}
	}
	return corev1.EnvVar{}, false
}

func others(env []corev1.EnvVar, mode EnvMode) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range env {
		if !slices.Contains(mode.Names(), e.Name) {
			out = append(out, e)
		}
	}
	return out
}

// checkMutated: every container of a GPU pod carries each of the mode's variables exactly once,
// as our Downward API reference, and a second run wants nothing.
func checkMutated(t *testing.T, pod *corev1.Pod, mode EnvMode) {
	t.Helper()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i, c := range cs {
			for _, w := range mode.Env() {
				n := 0
				for _, e := range c.Env {
					if e.Name != w.Name {
						continue
					}
					n++
					if !equality.Semantic.DeepEqual(e, w) {
						t.Errorf("container %d: %s is %+v after the patch", i, w.Name, e)
					}
				}
				if n != 1 {
					t.Errorf("container %d has %s %d times after the patch", i, w.Name, n)
				}
			}
		}
	}
	if again := MutatePod(pod, mode, ""); len(again.Patch) != 0 {
		t.Errorf("not idempotent: second patch %+v", again.Patch)
	}
}

package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

var (
	cudaRef   = visibleDevicesEnv(EnvCUDAVisibleDevices)
	nvidiaRef = visibleDevicesEnv(EnvNVIDIAVisibleDevices)
	order     = corev1.EnvVar{Name: EnvCUDADeviceOrder, Value: CUDADeviceOrderPCIBus}
)

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// gpuPod returns a pod that names a claim, with containers of the given env lists.
func gpuPod(containers ...[]corev1.EnvVar) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: map[string]string{gpuv1.AnnotationClaim: "two-gpus"}},
	}
	for i, e := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "c" + string(rune('0'+i)), Image: "cuda", Env: e})
	}
	return pod
}

// applyPatch applies ops the way the apiserver does (same JSON patch library) and returns the
// resulting pod.
func applyPatch(t testing.TB, pod *corev1.Pod, ops []PatchOp) *corev1.Pod {
	t.Helper()
	if len(ops) == 0 {
		return pod.DeepCopy()
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatalf("marshal pod: %v", err)
	}
	raw, err := json.Marshal(ops)
	if err != nil {
		t.Fatalf("marshal patch: %v", err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decode patch %s: %v", raw, err)
	}
	out, err := patch.Apply(doc)
	if err != nil {
		t.Fatalf("apply patch %s: %v", raw, err)
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(out, got); err != nil {
		t.Fatalf("unmarshal patched pod: %v", err)
	}
	return got
}

func TestMutatePod(t *testing.T) {
	user := env("EPOCHS", "3")
	userDep := env("LOG", "$(CUDA_VISIBLE_DEVICES)")
	// What cuda mode adds, and the operations that put it in front of an existing list.
	cuda := []corev1.EnvVar{cudaRef, order}
	prepend := func(c int) []PatchOp {
		p := "/spec/containers/" + index(c) + "/env/0"
		return []PatchOp{{Op: "add", Path: p, Value: order}, {Op: "add", Path: p, Value: cudaRef}}
	}
	with := func(a []corev1.EnvVar, b ...corev1.EnvVar) []corev1.EnvVar {
		return append(append([]corev1.EnvVar{}, a...), b...)
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		mode EnvMode
		// wantPatch is the exact patch; nil means "no patch".
		wantPatch []PatchOp
		// wantEnv is each container's env after the patch (containers, then init containers).
		wantEnv, wantInitEnv [][]corev1.EnvVar
		wantWarnings         []string
	}{
		{
			name:      "one container without env gets the whole list",
			pod:       gpuPod(nil),
			wantPatch: []PatchOp{{Op: "add", Path: "/spec/containers/0/env", Value: cuda}},
			wantEnv:   [][]corev1.EnvVar{cuda},
		},
		{
			name: "a pod naming a claim template is a GPU pod too",
			pod: func() *corev1.Pod {
				p := gpuPod(nil)
				p.Annotations = map[string]string{gpuv1.AnnotationClaimTemplate: "x8"}
				return p
			}(),
			wantPatch: []PatchOp{{Op: "add", Path: "/spec/containers/0/env", Value: cuda}},
			wantEnv:   [][]corev1.EnvVar{cuda},
		},
		{
			name:      "an empty env list is replaced by add",
			pod:       gpuPod([]corev1.EnvVar{}),
			wantPatch: []PatchOp{{Op: "add", Path: "/spec/containers/0/env", Value: cuda}},
			wantEnv:   [][]corev1.EnvVar{cuda},
		},
		{
			name: "several containers each get it",
			pod:  gpuPod(nil, []corev1.EnvVar{user}, nil),
			wantPatch: append(append([]PatchOp{{Op: "add", Path: "/spec/containers/0/env", Value: cuda}}, prepend(1)...),
				PatchOp{Op: "add", Path: "/spec/containers/2/env", Value: cuda}),
			wantEnv: [][]corev1.EnvVar{cuda, with(cuda, user), cuda},
		},
		{
			name: "init containers too, before the containers",
			pod: func() *corev1.Pod {
				p := gpuPod(nil)
				p.Spec.InitContainers = []corev1.Container{{Name: "fetch"}, {Name: "warm", Env: []corev1.EnvVar{user}}}
				return p
			}(),
			wantPatch: []PatchOp{
				{Op: "add", Path: "/spec/initContainers/0/env", Value: cuda},
				{Op: "add", Path: "/spec/initContainers/1/env/0", Value: order},
				{Op: "add", Path: "/spec/initContainers/1/env/0", Value: cudaRef},
				{Op: "add", Path: "/spec/containers/0/env", Value: cuda},
			},
			wantInitEnv: [][]corev1.EnvVar{cuda, with(cuda, user)},
			wantEnv:     [][]corev1.EnvVar{cuda},
		},
		{
			name:      "existing env keeps its variables, ours go first so $(CUDA_VISIBLE_DEVICES) expands",
			pod:       gpuPod([]corev1.EnvVar{user, userDep}),
			wantPatch: prepend(0),
			wantEnv:   [][]corev1.EnvVar{with(cuda, user, userDep)},
		},
		{
			name:         "a user-set CUDA_VISIBLE_DEVICES is replaced with a warning",
			pod:          gpuPod([]corev1.EnvVar{user, env(EnvCUDAVisibleDevices, "0,1,2,3,4,5,6,7"), userDep}),
			wantPatch:    []PatchOp{{Op: "replace", Path: "/spec/containers/0/env", Value: with(cuda, user, userDep)}},
			wantEnv:      [][]corev1.EnvVar{with(cuda, user, userDep)},
			wantWarnings: []string{"spec.containers[0].env[1]: CUDA_VISIBLE_DEVICES from the pod was replaced: the gpu-scheduler sets it to the allocated GPUs"},
		},
		{
			name: "a user-set valueFrom is replaced too, and each copy is warned about",
			pod: gpuPod([]corev1.EnvVar{
				{Name: EnvCUDAVisibleDevices, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mine']"}}},
				env(EnvCUDAVisibleDevices, "3"),
				env(EnvCUDADeviceOrder, "FASTEST_FIRST"),
			}),
			wantPatch: []PatchOp{{Op: "replace", Path: "/spec/containers/0/env", Value: cuda}},
			wantEnv:   [][]corev1.EnvVar{cuda},
			wantWarnings: []string{
				"spec.containers[0].env[0]: CUDA_VISIBLE_DEVICES from the pod was replaced: the gpu-scheduler sets it to the allocated GPUs",
				"spec.containers[0].env[1]: CUDA_VISIBLE_DEVICES from the pod was replaced: the gpu-scheduler sets it to the allocated GPUs",
				"spec.containers[0].env[2]: CUDA_DEVICE_ORDER from the pod was replaced: the gpu-scheduler sets PCI_BUS_ID so GPU IDs match the host's",
			},
		},
		{
			name:      "a duplicate of our own variable is collapsed without a warning",
			pod:       gpuPod(with(cuda, user, cudaRef)),
			wantPatch: []PatchOp{{Op: "replace", Path: "/spec/containers/0/env", Value: with(cuda, user)}},
			wantEnv:   [][]corev1.EnvVar{with(cuda, user)},
		},
		{
			name: "already mutated: no patch, wherever a later webhook moved our variables",
			pod:  gpuPod(with(cuda, user), []corev1.EnvVar{order, user, cudaRef}),
		},
		{
			name: "a pod without a claim or our scheduler is untouched",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ml"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Env: []corev1.EnvVar{env(EnvCUDAVisibleDevices, "0")}}}},
			},
		},
		{
			name: "a pod of our scheduler without a claim gets it (it resolves to no GPU)",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "cpu", Namespace: "ml"},
				Spec:       corev1.PodSpec{SchedulerName: gpuv1.SchedulerName, Containers: []corev1.Container{{Name: "c"}}},
			},
			wantPatch: []PatchOp{{Op: "add", Path: "/spec/containers/0/env", Value: cuda}},
			wantEnv:   [][]corev1.EnvVar{cuda},
		},
		{
			name:      "nvidia mode sets NVIDIA_VISIBLE_DEVICES and leaves the user's CUDA variables alone",
			mode:      EnvModeNVIDIA,
			pod:       gpuPod([]corev1.EnvVar{env(EnvCUDAVisibleDevices, "0"), env(EnvCUDADeviceOrder, "FASTEST_FIRST")}),
			wantPatch: []PatchOp{{Op: "add", Path: "/spec/containers/0/env/0", Value: nvidiaRef}},
			wantEnv:   [][]corev1.EnvVar{{nvidiaRef, env(EnvCUDAVisibleDevices, "0"), env(EnvCUDADeviceOrder, "FASTEST_FIRST")}},
		},
		{
			name:         "nvidia mode replaces a user-set NVIDIA_VISIBLE_DEVICES=all",
			mode:         EnvModeNVIDIA,
			pod:          gpuPod([]corev1.EnvVar{env(EnvNVIDIAVisibleDevices, "all")}),
			wantPatch:    []PatchOp{{Op: "replace", Path: "/spec/containers/0/env", Value: []corev1.EnvVar{nvidiaRef}}},
			wantEnv:      [][]corev1.EnvVar{{nvidiaRef}},
			wantWarnings: []string{"spec.containers[0].env[0]: NVIDIA_VISIBLE_DEVICES from the pod was replaced: the gpu-scheduler sets it to the allocated GPUs"},
		},
		{
			name: "both mode adds all three, in order",
			mode: EnvModeBoth,
			pod:  gpuPod(nil, []corev1.EnvVar{user}),
			wantPatch: []PatchOp{
				{Op: "add", Path: "/spec/containers/0/env", Value: with(cuda, nvidiaRef)},
				{Op: "add", Path: "/spec/containers/1/env/0", Value: nvidiaRef},
				{Op: "add", Path: "/spec/containers/1/env/0", Value: order},
				{Op: "add", Path: "/spec/containers/1/env/0", Value: cudaRef},
			},
			wantEnv: [][]corev1.EnvVar{with(cuda, nvidiaRef), with(cuda, nvidiaRef, user)},
		},
		{
			name:      "switching from cuda to both adds the missing one",
			mode:      EnvModeBoth,
			pod:       gpuPod(with(cuda, user)),
			wantPatch: []PatchOp{{Op: "replace", Path: "/spec/containers/0/env", Value: with(cuda, nvidiaRef, user)}},
			wantEnv:   [][]corev1.EnvVar{with(cuda, nvidiaRef, user)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = EnvModeCUDA
			}
			before := tc.pod.DeepCopy()
			m := MutatePod(tc.pod, mode, "")
			if diff := cmp.Diff(before, tc.pod); diff != "" {
				t.Fatalf("MutatePod changed its input (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPatch, m.Patch); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarnings, m.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			got := applyPatch(t, tc.pod, m.Patch)
			if tc.wantPatch != nil {
				if diff := cmp.Diff(tc.wantEnv, envs(got.Spec.Containers)); diff != "" {
					t.Errorf("containers' env after the patch (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantInitEnv, envs(got.Spec.InitContainers)); diff != "" {
					t.Errorf("init containers' env after the patch (-want +got):\n%s", diff)
				}
			}
			// Idempotent: the patched pod needs nothing more (this is what reinvocation sees).
			if again := MutatePod(got, mode, ""); len(again.Patch) != 0 || len(again.Warnings) != 0 {
				t.Errorf("second run on the patched pod: patch %+v, warnings %q; want none", again.Patch, again.Warnings)
			}
		})
	}
}

func envs(cs []corev1.Container) [][]corev1.EnvVar {
	if len(cs) == 0 {
		return nil
	}
	out := make([][]corev1.EnvVar, len(cs))
	for i, c := range cs {
		out[i] = c.Env
	}
	return out
}

func TestMutatePodPatchJSON(t *testing.T) {
	// The exact bytes the apiserver receives for the common case.
	m := MutatePod(gpuPod(nil, []corev1.EnvVar{env("A", "1")}), EnvModeCUDA, "")
	got, err := json.Marshal(m.Patch)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"add","path":"/spec/containers/0/env","value":[{"name":"CUDA_VISIBLE_DEVICES","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.annotations['gpu.scheduling/gpu-ids']"}}},{"name":"CUDA_DEVICE_ORDER","value":"PCI_BUS_ID"}]},` +
		`{"op":"add","path":"/spec/containers/1/env/0","value":{"name":"CUDA_DEVICE_ORDER","value":"PCI_BUS_ID"}},` +
		`{"op":"add","path":"/spec/containers/1/env/0","value":{"name":"CUDA_VISIBLE_DEVICES","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.annotations['gpu.scheduling/gpu-ids']"}}}}]`
	if string(got) != want {
		t.Errorf("patch JSON:\n got %s\nwant %s", got, want)
	}
}

func TestPointer(t *testing.T) {
	tests := []struct {
		tokens []string
		want   string
	}{
		{[]string{"spec", "containers", "0", "env"}, "/spec/containers/0/env"},
		{[]string{"metadata", "annotations", gpuv1.AnnotationGPUIDs}, "/metadata/annotations/gpu.scheduling~1gpu-ids"},
		{[]string{"a~b/c"}, "/a~0b~1c"},
		{[]string{"~1"}, "/~01"},
		{nil, ""},
	}
	for _, tc := range tests {
		if got := Pointer(tc.tokens...); got != tc.want {
			t.Errorf("Pointer(%q) = %q, want %q", tc.tokens, got, tc.want)
		}
	}
}

func TestParseEnvMode(t *testing.T) {
	for _, s := range []string{"cuda", "nvidia", "both"} {
		if m, err := ParseEnvMode(s); err != nil || string(m) != s {
			t.Errorf("ParseEnvMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseEnvMode("CUDA"); err == nil || err.Error() != `visible devices env "CUDA" is not one of cuda, nvidia, both, none` {
		t.Errorf("ParseEnvMode(CUDA) error = %v", err)
	}
}

func TestMutateEphemeralContainers(t *testing.T) {
	cuda := EnvModeCUDA.Env()
	old := gpuPod(nil)
	old.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug-1"}}}
	pod := old.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers,
		corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug-2", Env: []corev1.EnvVar{env("A", "1")}}})
	m := MutateEphemeralContainers(old, pod, EnvModeCUDA, "")
	want := []PatchOp{
		{Op: "add", Path: "/spec/ephemeralContainers/1/env/0", Value: order},
		{Op: "add", Path: "/spec/ephemeralContainers/1/env/0", Value: cudaRef},
	}
	if diff := cmp.Diff(want, m.Patch); diff != "" {
		t.Errorf("patch (-want +got):\n%s (the existing debug-1 must be left alone: the apiserver refuses changes to it)", diff)
	}
	got := applyPatch(t, pod, m.Patch)
	if diff := cmp.Diff(append(cuda, env("A", "1")), got.Spec.EphemeralContainers[1].Env); diff != "" {
		t.Errorf("env of the new ephemeral container (-want +got):\n%s", diff)
	}
	if again := MutateEphemeralContainers(old, got, EnvModeCUDA, ""); len(again.Patch) != 0 {
		t.Errorf("not idempotent: %+v", again.Patch)
	}
	plain := &corev1.Pod{Spec: corev1.PodSpec{EphemeralContainers: pod.Spec.EphemeralContainers}}
	if m := MutateEphemeralContainers(&corev1.Pod{}, plain, EnvModeCUDA, ""); len(m.Patch) != 0 {
		t.Errorf("a pod that asks for no GPU was patched: %+v", m.Patch)
	}
}

// A release with another scheduler name mutates its own pods and leaves the default release's
// pods (and any other scheduler's) alone; a pod naming a claim is always a GPU pod.
func TestWantsGPUsFollowsSchedulerName(t *testing.T) {
	pod := func(scheduler string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: corev1.PodSpec{SchedulerName: scheduler}}
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		ours string
		want bool
	}{
		{pod("gpu-scheduler", nil), "", true},
		{pod("gpu-scheduler", nil), "canary", false},
		{pod("canary", nil), "canary", true},
		{pod("canary", nil), "", false},
		{pod("default-scheduler", map[string]string{gpuv1.AnnotationClaim: "c"}), "canary", true},
	} {
		if got := WantsGPUs(tc.pod, tc.ours); got != tc.want {
			t.Errorf("WantsGPUs(schedulerName %q, ours %q) = %v, want %v", tc.pod.Spec.SchedulerName, tc.ours, got, tc.want)
		}
	}
	if m := MutatePod(pod("gpu-scheduler", nil), EnvModeCUDA, "canary"); len(m.Patch) != 0 {
		t.Errorf("the canary release mutated a pod of gpu-scheduler: %v", m.Patch)
	}
}

func TestSchedulerNamePatch(t *testing.T) {
	withScheduler := func(name string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml", Annotations: annotations}, Spec: corev1.PodSpec{SchedulerName: name}}
	}
	claim := map[string]string{gpuv1.AnnotationClaim: "c"}
	template := map[string]string{gpuv1.AnnotationClaimTemplate: "t"}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		release  string
		refuse   bool
		want     string // the schedulerName after the patch
		wantErrs []string
	}{
		{name: "claim, no scheduler", pod: withScheduler("", claim), want: gpuv1.SchedulerName},
		{name: "claim, default scheduler", pod: withScheduler(corev1.DefaultSchedulerName, claim), want: gpuv1.SchedulerName},
		{name: "template, default scheduler, named release", pod: withScheduler(corev1.DefaultSchedulerName, template), release: "canary", want: "canary"},
		{name: "claim, this release", pod: withScheduler("canary", claim), release: "canary", refuse: true, want: "canary"},
		{name: "claim, a sibling", pod: withScheduler("team-b", claim), release: "canary", refuse: true, want: "team-b"},
		{name: "no claim, default scheduler", pod: withScheduler(corev1.DefaultSchedulerName, map[string]string{"a": "b"}), want: corev1.DefaultSchedulerName},
		{name: "claim, another scheduler, not refused", pod: withScheduler("volcano", claim), want: "volcano"},
		{name: "claim, another scheduler", pod: withScheduler("volcano", claim), refuse: true,
			wantErrs: []string{`spec.schedulerName`, `a GpuClaim in annotation gpu.scheduling/claim`, `scheduler "volcano"`, `set spec.schedulerName to "gpu-scheduler"`}},
		{name: "template, another scheduler", pod: withScheduler("volcano", template), release: "canary", refuse: true,
			wantErrs: []string{`a GpuClaimTemplate in annotation gpu.scheduling/claim-template`, `only the scheduler "canary" places`, `scheduler "volcano"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := SchedulerNamePatch(tc.pod, tc.release, []string{"team-b"}, tc.refuse)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("got patch %+v, want an error", ops)
				}
				for _, w := range tc.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := applyPatch(t, tc.pod, ops).Spec.SchedulerName; got != tc.want {
				t.Errorf("schedulerName after patch %+v: %q, want %q", ops, got, tc.want)
			}
		})
	}
}

func TestUnknownAnnotations(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		gpuv1.AnnotationClaim: "c", gpuv1.AnnotationNodeStrategy: "cost-aware", "example.com/claim": "x",
		"gpu.scheduling/claimm": "c", "gpu.scheduling/Claim-Template": "t",
	}}}
	if got, want := UnknownAnnotations(pod), []string{"gpu.scheduling/Claim-Template", "gpu.scheduling/claimm"}; !cmp.Equal(got, want) {
		t.Errorf("UnknownAnnotations = %q, want %q", got, want)
	}
	for _, k := range gpuv1.PodAnnotations {
		if got := UnknownAnnotations(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{k: "v"}}}); len(got) != 0 {
			t.Errorf("known key %s reported unknown: %q", k, got)
		}
	}
}

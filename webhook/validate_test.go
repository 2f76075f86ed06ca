package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

var (
	testScheduler = SchedulerIdentity{Users: []string{DefaultSchedulerUser}, Groups: []string{"system:kube-scheduler"}}
	schedulerUser = authenticationv1.UserInfo{Username: DefaultSchedulerUser, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	groupUser     = authenticationv1.UserInfo{Username: "someone", Groups: []string{"system:kube-scheduler"}}
	alice         = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
)

func annotated(kv ...string) map[string]string {
	m := map[string]string{gpuv1.AnnotationClaim: "two-gpus"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func podWith(nodeName string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}},
	}
}

func bindingWith(node string, annotations map[string]string) *corev1.Binding {
	return &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
}

const (
	alloc = gpuv1.AnnotationAllocated
	ids   = gpuv1.AnnotationGPUIDs
)

func TestValidatePodCreate(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want Decision
	}{
		{"no allocation", podWith("", annotated()), allow},
		{"no annotations at all", podWith("", nil), allow},
		{"allocated set by the creator", podWith("", annotated(alloc, "node-a:0,1")), Decision{Reason: ReasonCreate,
			Message: "pod ml/train may not be created with annotation gpu.scheduling/allocated: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead"}},
		{"both set, even empty", podWith("", annotated(alloc, "", ids, "")), Decision{Reason: ReasonCreate,
			Message: "pod ml/train may not be created with annotations gpu.scheduling/allocated and gpu.scheduling/gpu-ids: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead"}},
		{"MIG devices set by the creator", podWith("", annotated(gpuv1.AnnotationMIGDevices, "3:0")), Decision{Reason: ReasonCreate,
			Message: "pod ml/train may not be created with annotation gpu.scheduling/mig-devices: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead"}},
		{"generateName", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "job-", Namespace: "ml", Annotations: annotated(ids, "0")}}, Decision{Reason: ReasonCreate,
			Message: "pod ml/job-* may not be created with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ValidatePodCreate(tc.pod)); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidatePodUpdate(t *testing.T) {
	bound := annotated(alloc, "node-a:0,1", ids, "0,1")
	tests := []struct {
		name     string
		old, new *corev1.Pod
		user     authenticationv1.UserInfo
		want     Decision
	}{
		{"user changes other annotations", podWith("node-a", bound), podWith("node-a", mergeAnn(bound, "team", "ml")), alice, allow},
		{"scheduler sets the allocation", podWith("", annotated()), podWith("", bound), schedulerUser, allow},
		{"a member of a scheduler group sets it", podWith("", annotated()), podWith("", bound), groupUser, allow},
		{"scheduler removes it", podWith("node-a", bound), podWith("node-a", annotated()), schedulerUser, allow},
		{"user adds ids", podWith("node-a", annotated()), podWith("node-a", annotated(ids, "0,1,2,3")), alice, Decision{Reason: ReasonUpdate,
			Message: `user "alice" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod ml/train: only the gpu-scheduler writes the GPU allocation`}},
		{"user changes both", podWith("node-a", bound), podWith("node-a", annotated(alloc, "node-a:2,3", ids, "2,3")), alice, Decision{Reason: ReasonUpdate,
			Message: `user "alice" may not set, change or remove annotations gpu.scheduling/allocated and gpu.scheduling/gpu-ids on pod ml/train: only the gpu-scheduler writes the GPU allocation`}},
		{"user removes allocated", podWith("node-a", bound), podWith("node-a", annotated(ids, "0,1")), alice, Decision{Reason: ReasonUpdate,
			Message: `user "alice" may not set, change or remove annotation gpu.scheduling/allocated on pod ml/train: only the gpu-scheduler writes the GPU allocation`}},
		{"user sets an empty value where none was", podWith("", annotated()), podWith("", annotated(ids, "")), alice, Decision{Reason: ReasonUpdate,
			Message: `user "alice" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod ml/train: only the gpu-scheduler writes the GPU allocation`}},
		{"scheduler writes a malformed id list", podWith("", annotated()), podWith("", annotated(ids, "0,x")), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `pod ml/train: annotation gpu.scheduling/gpu-ids: GPU ID list "0,x": "x" is not a non-negative integer`}},
		{"scheduler writes ids that disagree with the allocation", podWith("", annotated()), podWith("", annotated(alloc, "node-a:0,1", ids, "0,2")), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `pod ml/train: annotation gpu.scheduling/gpu-ids="0,2" does not match annotation gpu.scheduling/allocated="node-a:0,1"`}},
		{"user widens a share", podWith("node-a", mergeAnn(bound, gpuv1.AnnotationShare, "memoryMiB=1024")), podWith("node-a", mergeAnn(bound, gpuv1.AnnotationShare, "memoryMiB=81920")), alice, Decision{Reason: ReasonUpdate,
			Message: `user "alice" may not set, change or remove annotation gpu.scheduling/share on pod ml/train: only the gpu-scheduler writes the GPU allocation`}},
		{"scheduler writes a malformed share", podWith("", annotated()), podWith("", annotated(gpuv1.AnnotationShare, "memory=1")), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `pod ml/train: annotation gpu.scheduling/share: share "memory=1": unknown key "memory"; known keys are memoryMiB, computePercent`}},
		{"scheduler writes another node than the pod's", podWith("node-b", annotated()), podWith("node-b", bound), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `pod ml/train: annotation gpu.scheduling/allocated names node "node-a" but the pod is bound to node "node-b"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ValidatePodUpdate(tc.old, tc.new, tc.user, testScheduler)); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func mergeAnn(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestValidateBinding(t *testing.T) {
	tests := []struct {
		name string
		b    *corev1.Binding
		user authenticationv1.UserInfo
		want Decision
	}{
		{"plain binding by anyone", bindingWith("node-a", nil), alice, allow},
		{"scheduler binds with the allocation", bindingWith("node-a", map[string]string{alloc: "node-a:0,1", ids: "1,0"}), schedulerUser, allow},
		{"user binds with the allocation", bindingWith("node-a", map[string]string{alloc: "node-a:0,1", ids: "0,1"}), alice, Decision{Reason: ReasonBinding,
			Message: `user "alice" may not bind pod ml/train with annotations gpu.scheduling/allocated and gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`}},
		{"user binds with ids only", bindingWith("node-a", map[string]string{ids: "7"}), alice, Decision{Reason: ReasonBinding,
			Message: `user "alice" may not bind pod ml/train with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`}},
		{"user binds with MIG devices", bindingWith("node-a", map[string]string{gpuv1.AnnotationMIGDevices: "3:0"}), alice, Decision{Reason: ReasonBinding,
			Message: `user "alice" may not bind pod ml/train with annotation gpu.scheduling/mig-devices: only the gpu-scheduler writes the GPU allocation`}},
		{"scheduler binds MIG devices of a GPU the allocation does not name", bindingWith("node-a", map[string]string{alloc: "node-a:3", ids: "3", gpuv1.AnnotationMIGDevices: "3:0,4:0"}), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `binding of pod ml/train: annotation gpu.scheduling/mig-devices="3:0,4:0" names GPU 4, which annotation gpu.scheduling/allocated="node-a:3" does not`}},
		{"scheduler binds to another node than the allocation names", bindingWith("node-b", map[string]string{alloc: "node-a:0"}), schedulerUser, Decision{Reason: ReasonInvalid,
			Message: `binding of pod ml/train: annotation gpu.scheduling/allocated names node "node-a" but the pod is bound to node "node-b"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ValidateBinding(tc.b, tc.user, testScheduler)); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSchedulerIdentityMatches(t *testing.T) {
	id := SchedulerIdentity{Users: []string{"u"}, Groups: []string{"g"}}
	for _, tc := range []struct {
		user authenticationv1.UserInfo
		want bool
	}{
		{authenticationv1.UserInfo{Username: "u"}, true},
		{authenticationv1.UserInfo{Username: "v", Groups: []string{"x", "g"}}, true},
		{authenticationv1.UserInfo{Username: "v", Groups: []string{"x"}}, false},
		{authenticationv1.UserInfo{}, false},
		{authenticationv1.UserInfo{Username: "U"}, false},
	} {
		if got := id.Matches(tc.user); got != tc.want {
			t.Errorf("Matches(%+v) = %v, want %v", tc.user, got, tc.want)
		}
	}
	if (SchedulerIdentity{Groups: []string{""}}).Matches(authenticationv1.UserInfo{Groups: []string{""}}) {
		t.Error("an empty group must not match")
	}
}

// request builds an AdmissionRequest as the apiserver sends it.
func request(t testing.TB, op admissionv1.Operation, sub string, kind string, user authenticationv1.UserInfo, obj, old runtime.Object) *admissionv1.AdmissionRequest {
	t.Helper()
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: data}
	}
	return &admissionv1.AdmissionRequest{
		UID:         types.UID("uid-1"),
		Kind:        metav1.GroupVersionKind{Version: "v1", Kind: kind},
		Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource: sub,
		Name:        "train",
		Namespace:   "ml",
		Operation:   op,
		UserInfo:    user,
		Object:      raw(obj),
		OldObject:   raw(old),
	}
}

// onBindings is req, a pods/binding request, as the apiserver sends it when the Binding is
// posted to the older namespaced bindings resource instead: resource bindings, no subresource,
// the Binding's name as the request's name.
func onBindings(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionRequest {
	r := req.DeepCopy()
	r.Resource = metav1.GroupVersionResource{Version: "v1", Resource: "bindings"}
	r.SubResource = ""
	return r
}

func TestAdmitterValidate(t *testing.T) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler}
	bound := annotated(alloc, "node-a:0,1", ids, "0,1")
	noNS := podWith("", annotated(ids, "0"))
	noNS.Namespace = ""
	tests := []struct {
		name        string
		req         *admissionv1.AdmissionRequest
		wantAllowed bool
		wantCode    int32
		wantMessage string
		wantReason  string
	}{
		{name: "pod create without allocation", req: request(t, admissionv1.Create, "", "Pod", alice, podWith("", annotated()), nil), wantAllowed: true},
		{name: "pod create with allocation, even by the scheduler", req: request(t, admissionv1.Create, "", "Pod", schedulerUser, noNS, nil),
			wantCode: http.StatusForbidden, wantReason: ReasonCreate,
			wantMessage: "pod ml/train may not be created with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead"},
		{name: "pod update by the scheduler", req: request(t, admissionv1.Update, "", "Pod", schedulerUser, podWith("", bound), podWith("", annotated())), wantAllowed: true},
		{name: "pod update by a user", req: request(t, admissionv1.Update, "", "Pod", alice, podWith("", bound), podWith("", annotated())),
			wantCode: http.StatusForbidden, wantReason: ReasonUpdate,
			wantMessage: `user "alice" may not set, change or remove annotations gpu.scheduling/allocated and gpu.scheduling/gpu-ids on pod ml/train: only the gpu-scheduler writes the GPU allocation`},
		{name: "pods/status update by a node", req: request(t, admissionv1.Update, "status", "Pod", authenticationv1.UserInfo{Username: "system:node:node-a"}, podWith("node-a", annotated(ids, "0,1,2,3")), podWith("node-a", annotated())),
			wantCode: http.StatusForbidden, wantReason: ReasonUpdate,
			wantMessage: `user "system:node:node-a" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod ml/train: only the gpu-scheduler writes the GPU allocation`},
		{name: "binding by the scheduler", req: request(t, admissionv1.Create, "binding", "Binding", schedulerUser, bindingWith("node-a", bound), nil), wantAllowed: true},
		{name: "binding by a user", req: request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", map[string]string{ids: "0"}), nil),
			wantCode: http.StatusForbidden, wantReason: ReasonBinding,
			wantMessage: `user "alice" may not bind pod ml/train with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`},
		{name: "binding through the bindings resource by the scheduler", req: onBindings(request(t, admissionv1.Create, "binding", "Binding", schedulerUser, bindingWith("node-a", bound), nil)), wantAllowed: true},
		{name: "binding through the bindings resource by a user", req: onBindings(request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", map[string]string{ids: "0"}), nil)),
			wantCode: http.StatusForbidden, wantReason: ReasonBinding,
			wantMessage: `user "alice" may not bind pod ml/train with annotation gpu.scheduling/gpu-ids: only the gpu-scheduler writes the GPU allocation`},
		{name: "binding through the bindings resource sent as a Pod", req: onBindings(request(t, admissionv1.Create, "binding", "Pod", alice, podWith("", nil), nil)),
			wantCode: http.StatusBadRequest, wantMessage: "validate bindings: expected a v1 Binding, got /v1, Kind=Pod"},
		{name: "another resource", req: func() *admissionv1.AdmissionRequest {
			r := request(t, admissionv1.Create, "", "Deployment", alice, podWith("", nil), nil)
			r.Kind.Group, r.Resource.Group, r.Resource.Resource = "apps", "apps", "deployments"
			return r
		}(), wantCode: http.StatusBadRequest, wantMessage: "validate: expected resource pods or bindings, got apps/v1, Resource=deployments"},
		{name: "delete is not judged", req: request(t, admissionv1.Delete, "", "Pod", alice, nil, podWith("", bound)), wantAllowed: true},
		{name: "binding sent as a Pod", req: request(t, admissionv1.Create, "binding", "Pod", alice, podWith("", nil), nil),
			wantCode: http.StatusBadRequest, wantMessage: "validate pods/binding: expected a v1 Binding, got /v1, Kind=Pod"},
		{name: "pod without object", req: request(t, admissionv1.Create, "", "Pod", alice, nil, nil),
			wantCode: http.StatusBadRequest, wantMessage: "validate pod ml/train: request carries no object"},
		{name: "update without old object", req: request(t, admissionv1.Update, "", "Pod", alice, podWith("", nil), nil),
			wantCode: http.StatusBadRequest, wantMessage: "validate pod ml/train: old object: request carries no object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := a.Validate(context.Background(), tc.req)
			if resp.UID != tc.req.UID {
				t.Errorf("response UID %q, want %q", resp.UID, tc.req.UID)
			}
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if out.DenyReason != tc.wantReason {
				t.Errorf("deny reason %q, want %q", out.DenyReason, tc.wantReason)
			}
			if tc.wantAllowed {
				if resp.Result != nil {
					t.Errorf("allowed response carries a result %+v", resp.Result)
				}
				return
			}
			if resp.Result == nil || resp.Result.Code != tc.wantCode || resp.Result.Message != tc.wantMessage {
				t.Errorf("result = %+v, want code %d message %q", resp.Result, tc.wantCode, tc.wantMessage)
			}
		})
	}
}

// TestAdmitterValidateBindingsResource checks that a Binding posted to the older namespaced
// bindings resource gets exactly the answer it gets through pods/binding: the apiserver binds
// through the same code for both and copies the Binding's annotations onto the pod.
func TestAdmitterValidateBindingsResource(t *testing.T) {
	a := &Admitter{Mode: EnvModeCUDA, Scheduler: testScheduler}
	bound := annotated(alloc, "node-a:0,1", ids, "0,1")
	unnamed := bindingWith("node-a", map[string]string{alloc: "node-a:0"})
	unnamed.Name, unnamed.Namespace = "", ""
	notJSONObject := request(t, admissionv1.Create, "binding", "Binding", alice, nil, nil)
	notJSONObject.Object.Raw = []byte(`{"metadata":7}`)
	for _, tc := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
	}{
		{"scheduler with the allocation", request(t, admissionv1.Create, "binding", "Binding", schedulerUser, bindingWith("node-a", bound), nil)},
		{"scheduler group member with the allocation", request(t, admissionv1.Create, "binding", "Binding", groupUser, bindingWith("node-a", bound), nil)},
		{"scheduler to another node than the allocation names", request(t, admissionv1.Create, "binding", "Binding", schedulerUser, bindingWith("node-b", bound), nil)},
		{"scheduler with IDs that do not parse", request(t, admissionv1.Create, "binding", "Binding", schedulerUser, bindingWith("node-a", map[string]string{ids: "x"}), nil)},
		{"user with the allocation", request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", bound), nil)},
		{"user with IDs only", request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", map[string]string{ids: "0"}), nil)},
		{"user without user name", request(t, admissionv1.Create, "binding", "Binding", authenticationv1.UserInfo{}, bindingWith("node-a", bound), nil)},
		{"user without the allocation", request(t, admissionv1.Create, "binding", "Binding", alice, bindingWith("node-a", annotated()), nil)},
		{"object without name and namespace", request(t, admissionv1.Create, "binding", "Binding", alice, unnamed, nil)},
		{"no object", request(t, admissionv1.Create, "binding", "Binding", alice, nil, nil)},
		{"object that does not decode", notJSONObject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantOut := a.Validate(context.Background(), tc.req)
			got, gotOut := a.Validate(context.Background(), onBindings(tc.req))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("response through bindings differs from pods/binding (-pods/binding +bindings):\n%s", diff)
			}
			if gotOut != wantOut {
				t.Errorf("outcome through bindings %+v, through pods/binding %+v", gotOut, wantOut)
			}
		})
	}
}

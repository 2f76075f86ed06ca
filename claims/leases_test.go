package claims

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func gpuLease(labels map[string]string, holder *string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-system", Name: "gpu-n1-3", Labels: labels},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: holder}}
}

func TestParseGPULease(t *testing.T) {
	ok := map[string]string{apiv1.LabelLeaseNode: "n1", apiv1.LabelLeaseGPU: "3"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for k, v := range ok {
			m[k] = v
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		desc   string
		lease  *coordinationv1.Lease
		want   GPULease
		wantOK bool
	}{
		{desc: "exclusive", lease: gpuLease(ok, ptr.To("u1")), want: GPULease{Node: "n1", GPU: 3, Holders: []types.UID{"u1"}}, wantOK: true},
		{desc: "shared", lease: gpuLease(with(apiv1.LabelLeaseShared, "true"), ptr.To("u1,u2")),
			want: GPULease{Node: "n1", GPU: 3, Shared: true, Holders: []types.UID{"u1", "u2"}}, wantOK: true},
		{desc: "empty entries and spaces dropped", lease: gpuLease(ok, ptr.To(" u1,,u2 ,")),
			want: GPULease{Node: "n1", GPU: 3, Holders: []types.UID{"u1", "u2"}}, wantOK: true},
		{desc: "empty holder: a lease with no pod", lease: gpuLease(ok, ptr.To("")), want: GPULease{Node: "n1", GPU: 3}, wantOK: true},
		{desc: "no holder", lease: gpuLease(ok, nil)},
		{desc: "no node label", lease: gpuLease(map[string]string{apiv1.LabelLeaseGPU: "3"}, ptr.To("u1"))},
		{desc: "no GPU label", lease: gpuLease(map[string]string{apiv1.LabelLeaseNode: "n1"}, ptr.To("u1"))},
		{desc: "GPU not a number", lease: gpuLease(with(apiv1.LabelLeaseGPU, "x"), ptr.To("u1"))},
		{desc: "negative GPU", lease: gpuLease(with(apiv1.LabelLeaseGPU, "-1"), ptr.To("u1"))},
		{desc: "GPU past MaxGPUID", lease: gpuLease(with(apiv1.LabelLeaseGPU, strconv.Itoa(apiv1.MaxGPUID+1)), ptr.To("u1"))},
		{desc: "GPU MaxGPUID", lease: gpuLease(with(apiv1.LabelLeaseGPU, strconv.Itoa(apiv1.MaxGPUID)), ptr.To("u1")),
			want: GPULease{Node: "n1", GPU: apiv1.MaxGPUID, Holders: []types.UID{"u1"}}, wantOK: true},
		{desc: "huge GPU", lease: gpuLease(with(apiv1.LabelLeaseGPU, "99999999999999999999999"), ptr.To("u1"))},
		{desc: "MIG device", lease: gpuLease(with(apiv1.LabelLeaseMIGSlot, "4"), ptr.To("u1")),
			want: GPULease{Node: "n1", GPU: 3, MIG: true, Slot: 4, Holders: []types.UID{"u1"}}, wantOK: true},
		{desc: "MIG slot not a number", lease: gpuLease(with(apiv1.LabelLeaseMIGSlot, "x"), ptr.To("u1"))},
		{desc: "MIG slot empty", lease: gpuLease(with(apiv1.LabelLeaseMIGSlot, ""), ptr.To("u1"))},
		{desc: "MIG slot past MaxMIGSlot", lease: gpuLease(with(apiv1.LabelLeaseMIGSlot, strconv.Itoa(apiv1.MaxMIGSlot+1)), ptr.To("u1"))},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got, ok := ParseGPULease(tc.lease)
			if ok != tc.wantOK || got.Node != tc.want.Node || got.GPU != tc.want.GPU || got.Shared != tc.want.Shared || got.MIG != tc.want.MIG || got.Slot != tc.want.Slot || !slices.Equal(got.Holders, tc.want.Holders) {
				t.Errorf("ParseGPULease = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestParseHolders(t *testing.T) {
	if got := ParseHolders("a,b,c"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("ParseHolders(a,b,c) = %q", got)
	}
	if got := ParseHolders(""); got != nil {
		t.Errorf("ParseHolders(\"\") = %q, want none", got)
	}
}

func TestParseLiveness(t *testing.T) {
	renewed := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	live := func(name string, holder *string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-system", Name: name, Labels: map[string]string{apiv1.LabelAgentLiveness: apiv1.SchedulerName}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: holder, RenewTime: &metav1.MicroTime{Time: renewed}},
		}
	}
	for _, tc := range []struct {
		desc    string
		obj     any
		node    string
		renewed time.Time
		err     bool
	}{
		{desc: "own node", obj: live("gpu-n1-agent", ptr.To("n1")), node: "n1", renewed: renewed},
		{desc: "tombstone", obj: cache.DeletedFinalStateUnknown{Key: "k", Obj: live("gpu-n1-agent", ptr.To("n1"))}, node: "n1", renewed: renewed},
		{desc: "another node's lease", obj: live("gpu-n1-agent", ptr.To("n2")), err: true},
		{desc: "no holder", obj: live("gpu-n1-agent", nil)},
		{desc: "empty holder", obj: live("gpu-n1-agent", ptr.To(""))},
		{desc: "a GPU lease's name", obj: live("gpu-n1-3", ptr.To("n1"))},
		{desc: "no lease", obj: "x"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			node, got, err := ParseLiveness(tc.obj)
			if node != tc.node || !got.Equal(tc.renewed) || (err != nil) != tc.err {
				t.Errorf("ParseLiveness = %q, %v, %v; want %q, %v, error %v", node, got, err, tc.node, tc.renewed, tc.err)
			}
		})
	}
	if l := live("gpu-n1-agent", ptr.To("n1")); !IsLiveness(l) || IsLiveness(gpuLease(nil, nil)) {
		t.Error("IsLiveness tells a liveness lease from a GPU lease wrongly")
	}
}

func FuzzParseHolders(f *testing.F) {
	for _, s := range []string{"", "a", "a,b", " , ,", "uid-1,uid-2,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, h := range ParseHolders(s) {
			if h == "" || h[0] == ' ' || h[len(h)-1] == ' ' {
				t.Fatalf("ParseHolders(%q) gave %q", s, h)
			}
		}
	})
}

// What the agent writes (RenewLiveness) is what the scheduler and kubectl gpu read
// (ParseLiveness), and never a GPU lease, even on a lease that carried the GPU leases' label.
func TestRenewLivenessRoundTrip(t *testing.T) {
	name, err := apiv1.AgentLeaseName("n1")
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-system", Name: name,
		Labels: map[string]string{apiv1.LabelLeaseNode: "n1", apiv1.LabelLeaseGPU: "0"}}}
	RenewLiveness(l, "n1", "gpu-b", renewed)
	node, got, err := ParseLiveness(l)
	if node != "n1" || !got.Equal(renewed) || err != nil {
		t.Fatalf("ParseLiveness = %q, %v, %v; want n1, %v", node, got, err, renewed)
	}
	if !IsLiveness(l) || l.Labels[apiv1.LabelAgentLiveness] != "gpu-b" {
		t.Errorf("labels %v, want %s=gpu-b", l.Labels, apiv1.LabelAgentLiveness)
	}
	if g, ok := ParseGPULease(l); ok {
		t.Errorf("the liveness lease reads as GPU lease %+v", g)
	}
}

// What the scheduler writes (NewGPULease) reads back as the same lock (ParseGPULease), under
// the name apiv1.LeaseName gives, and naming the pod for kubectl gpu leases.
func TestNewGPULeaseRoundTrip(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-0", UID: "u1"}}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, shared := range []bool{false, true} {
		l, err := NewGPULease("gpu-system", pod, "n1", 7, shared, now)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := apiv1.LeaseName("n1", 7); l.Name != want || l.Namespace != "gpu-system" || !l.Spec.AcquireTime.Time.Equal(now) {
			t.Errorf("lease %s/%s acquired %v, want gpu-system/%s at %v", l.Namespace, l.Name, l.Spec.AcquireTime, want, now)
		}
		g, ok := ParseGPULease(l)
		if !ok || g.Node != "n1" || g.GPU != 7 || g.Shared != shared || !slices.Equal(g.Holders, []types.UID{"u1"}) {
			t.Errorf("shared %v: ParseGPULease = %+v, %v", shared, g, ok)
		}
		if l.Labels[apiv1.LabelPodName] != "train-0" || l.Annotations[AnnotationLeasePodName] != "train-0" || (l.Labels[apiv1.LabelPodUID] == "u1") == shared {
			t.Errorf("shared %v: labels %v, annotations %v", shared, l.Labels, l.Annotations)
		}
	}
	long := pod.DeepCopy()
	long.Name = strings.Repeat("p", 64)
	if l, err := NewGPULease("gpu-system", long, "n1", 0, false, now); err != nil || l.Labels[apiv1.LabelPodName] != "" || l.Annotations[AnnotationLeasePodName] != long.Name {
		t.Errorf("a pod name too long for a label: %v, %v", l, err)
	}
	if _, err := NewGPULease("gpu-system", pod, strings.Repeat("n", 64), 0, false, now); err == nil {
		t.Error("a node name too long for a label gave a lease")
	}
}

func TestNewMIGLease(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
	l, err := NewMIGLease("gpu-system", pod, "n1", 3, 4, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "gpu-n1-3-mig4" || l.Labels[apiv1.LabelLeaseGPU] != "3" || l.Labels[apiv1.LabelLeaseMIGSlot] != "4" || l.Labels[apiv1.LabelPodUID] != "u1" || l.Labels[apiv1.LabelLeaseShared] != "" {
		t.Fatalf("lease %s %v", l.Name, l.Labels)
	}
	got, ok := ParseGPULease(l)
	if !ok || !got.MIG || got.Slot != 4 || got.GPU != 3 || !slices.Equal(got.Holders, []types.UID{"u1"}) {
		t.Fatalf("ParseGPULease = %+v, %v", got, ok)
	}
	if _, err := NewMIGLease("gpu-system", pod, "n1", 3, apiv1.MaxMIGSlot+1, time.Unix(0, 0)); err == nil {
		t.Fatal("slot out of range accepted")
	}
}

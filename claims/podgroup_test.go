package claims

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodGroupOf(t *testing.T) {
	labelled := func(v string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{LabelPodGroup: v}}}
	}
	both := labelled("a")
	both.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("b")}
	grouped := &corev1.Pod{Spec: corev1.PodSpec{SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr.To("b")}}}
	for _, c := range []struct {
		name    string
		pod     *corev1.Pod
		want    PodGroupRef
		ok, err bool
	}{
		{"none", &corev1.Pod{}, PodGroupRef{}, false, false},
		{"empty label", labelled(""), PodGroupRef{}, false, false},
		{"coscheduling", labelled("a"), PodGroupRef{GroupCoscheduling, "a"}, true, false},
		{"workload", grouped, PodGroupRef{GroupWorkload, "b"}, true, false},
		{"both", both, PodGroupRef{}, false, true},
	} {
		got, ok, err := PodGroupOf(c.pod)
		if got != c.want || ok != c.ok || (err != nil) != c.err {
			t.Errorf("%s: got %+v %v %v, want %+v %v error %v", c.name, got, ok, err, c.want, c.ok, c.err)
		}
		if InPodGroup(c.pod) != (c.ok || c.err) {
			t.Errorf("%s: InPodGroup %v", c.name, InPodGroup(c.pod))
		}
	}
}

func TestGangRefForGroup(t *testing.T) {
	if g, err := GangRefForGroup(PodGroupRef{GroupCoscheduling, "train"}); err != nil || g != "scheduling.x-k8s.io/train" {
		t.Errorf("got %q %v, want scheduling.x-k8s.io/train", g, err)
	}
	long := strings.Repeat("a", 240)
	if _, err := GangRefForGroup(PodGroupRef{GroupWorkload, long}); err == nil || !strings.Contains(err.Error(), "shorten") {
		t.Errorf("a 258-character gangRef: err %v, want it refused", err)
	}
}

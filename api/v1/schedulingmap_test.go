package v1

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseSchedulingMap(t *testing.T) {
	tests := []struct {
		in      string
		want    map[int]Allocation
		wantErr string
	}{
		{in: "0=node-a:0,1\n1=node-b:3", want: map[int]Allocation{0: {Node: "node-a", IDs: []int{0, 1}}, 1: {Node: "node-b", IDs: []int{3}}}},
		{in: "# comment\n\n 2 = node-a:1,0 \r\n", want: map[int]Allocation{2: {Node: "node-a", IDs: []int{0, 1}}}},
		{in: "", wantErr: "no entries"},
		{in: "0=node-a:0\nnode-b:1", wantErr: `line 2 "node-b:1": no '='`},
		{in: "x=node-a:0", wantErr: `line 1 "x=node-a:0": pod index "x" is not a non-negative integer`},
		{in: "-1=node-a:0", wantErr: `pod index "-1" is not a non-negative integer`},
		{in: "01=node-a:0", wantErr: `pod index "01"`},
		{in: "0=node-a", wantErr: "line 1: allocation \"node-a\" has no ':'"},
		{in: "0=node-a:0,0", wantErr: "line 1: allocation \"node-a:0,0\": GPU ID list \"0,0\": ID 0 appears twice"},
		{in: "0=Node_A:0", wantErr: "line 1: allocation \"Node_A:0\": node name \"Node_A\" is invalid"},
		{in: "0=node-a:0\n\n0=node-b:1", wantErr: "line 3: pod index 0 appears twice (already node-a:0)"},
	}
	for _, tt := range tests {
		got, err := ParseSchedulingMap(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseSchedulingMap(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSchedulingMap(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseSchedulingMap: nothing a user writes may crash the parser, and what it accepts
// formats back into entries it accepts again.
func FuzzParseSchedulingMap(f *testing.F) {
	for _, s := range []string{"0=node-a:0,1\n1=node-b:3", "# c\n2=n:7", "0=a:0\n0=b:1", "x=y", "", "0=node-a:" + strings.Repeat("1,", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseSchedulingMap(s)
		if err != nil {
			return
		}
		for idx, a := range m {
			again, err := ParseAllocation(a.String())
			if err != nil || !reflect.DeepEqual(again, a) {
				t.Fatalf("entry %d=%s does not parse back: %v %v", idx, a, again, err)
			}
		}
	})
}

func TestPodIndex(t *testing.T) {
	tests := []struct {
		name   string
		pod    metav1.ObjectMeta
		want   int
		wantOK bool
	}{
		{"indexed Job pod", metav1.ObjectMeta{Name: "train-2-x7k9p", GenerateName: "train-2-", Annotations: map[string]string{AnnotationJobCompletionIndex: "2"}}, 2, true},
		{"StatefulSet pod by label", metav1.ObjectMeta{Name: "shard-1", Labels: map[string]string{LabelPodIndex: "1"}}, 1, true},
		{"completion index wins over the label", metav1.ObjectMeta{Name: "x-9", Annotations: map[string]string{AnnotationJobCompletionIndex: "3"}, Labels: map[string]string{LabelPodIndex: "4"}}, 3, true},
		{"StatefulSet pod by name", metav1.ObjectMeta{Name: "shard-12"}, 12, true},
		{"a generated name's digits are not an index", metav1.ObjectMeta{Name: "serve-5d8f-24567", GenerateName: "serve-5d8f-"}, 0, false},
		{"no trailing number", metav1.ObjectMeta{Name: "worker"}, 0, false},
		{"leading zero", metav1.ObjectMeta{Name: "worker-01"}, 0, false},
		{"malformed completion index", metav1.ObjectMeta{Name: "w-1", Annotations: map[string]string{AnnotationJobCompletionIndex: "-1"}}, 0, false},
	}
	for _, tt := range tests {
		got, ok := PodIndex(&tt.pod)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: PodIndex = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

package v1

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseAllocation(t *testing.T) {
	tests := []struct {
		in      string
		want    Allocation
		wantErr string
	}{
		{in: "node-a:0", want: Allocation{Node: "node-a", IDs: []int{0}}},
		{in: "node-b:3,0,2,1", want: Allocation{Node: "node-b", IDs: []int{0, 1, 2, 3}}},
		{in: "gpu.example.com:7", want: Allocation{Node: "gpu.example.com", IDs: []int{7}}},
		{in: "", wantErr: `allocation "" has no ':'`},
		{in: "node-a", wantErr: `allocation "node-a" has no ':'`},
		{in: ":0,1", wantErr: "has an empty node name"},
		{in: "node-a:", wantErr: "GPU ID list is empty"},
		{in: "node-a:0,,1", wantErr: `"" is not a GPU ID`},
		{in: "node-a:0,1,", wantErr: `"" is not a GPU ID`},
		{in: "node-a:-1", wantErr: `"-1" is not a non-negative integer`},
		{in: "node-a:+1", wantErr: `"+1" is not a non-negative integer`},
		{in: "node-a: 1", wantErr: `" 1" is not a non-negative integer`},
		{in: "node-a:01", wantErr: `"01" has a leading zero`},
		{in: "node-a:1,1", wantErr: "ID 1 appears twice"},
		{in: "node-a:99999", wantErr: "GPU ID 99999 is out of range 0-63"},
		{in: "node-a:64", wantErr: "GPU ID 64 is out of range 0-63"},
		{in: "node-a:1000", wantErr: "GPU ID 1000 is out of range 0-63"},
		{in: "node-a:9999999999", wantErr: `"9999999999" is not a GPU ID`},
		{in: "node-a:63", want: Allocation{Node: "node-a", IDs: []int{63}}},
		{in: "Node_A:1", wantErr: `node name "Node_A" is invalid`},
		{in: "node-a:" + strings.Repeat("1,", 70) + "1", wantErr: "at most 64 are allowed"},
	}
	for _, tt := range tests {
		got, err := ParseAllocation(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseAllocation(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseAllocation(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseAllocation(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if back := got.String(); back != tt.want.Node+":"+FormatIDs(tt.want.IDs) {
			t.Errorf("String() = %q", back)
		}
	}
}

func TestLeaseName(t *testing.T) {
	if got, err := LeaseName("node-a", 3); err != nil || got != "gpu-node-a-3" {
		t.Fatalf("LeaseName = %q, %v", got, err)
	}
	for _, tc := range []struct {
		node string
		id   int
		want string
	}{
		{"", 0, "node name is empty"},
		{"n", -1, "is out of range 0-63"},
		{"n", MaxGPUID + 1, "is out of range 0-63"},
		{strings.Repeat("a", 250), 1, "is not a valid object name"},
	} {
		if _, err := LeaseName(tc.node, tc.id); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LeaseName(%q, %d) error = %v, want %q", tc.node, tc.id, err, tc.want)
		}
	}
}

func TestAgentLeaseName(t *testing.T) {
	if got, err := AgentLeaseName("node-a"); err != nil || got != "gpu-node-a-agent" {
		t.Fatalf("AgentLeaseName = %q, %v", got, err)
	}
	for _, node := range []string{"", strings.Repeat("a", 250)} {
		if _, err := AgentLeaseName(node); err == nil {
			t.Errorf("AgentLeaseName(%q) succeeded", node)
		}
	}
}

// No liveness lease name is ever a GPU lease name, whatever the two nodes are called: the node
// names below are the ones a prefix (gpu-agent-{node}) would have let collide.
func TestAgentLeaseNameNeverCollidesWithGPULeases(t *testing.T) {
	nodes := []string{"foo", "foo-3", "agent-foo", "agent-foo-3", "a", "3", "agent", "x-agent", "x-agent-1"}
	gpuLeases := map[string]string{}
	for _, n := range nodes {
		for id := range 17 {
			name, err := LeaseName(n, id)
			if err != nil {
				t.Fatal(err)
			}
			gpuLeases[name] = fmt.Sprintf("GPU %d of node %s", id, n)
		}
	}
	for _, n := range nodes {
		name, err := AgentLeaseName(n)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := gpuLeases[name]; ok {
			t.Errorf("liveness lease of node %s is named %s, as the lease of %s", n, name, other)
		}
	}
}

// FuzzParseAllocation checks that no input panics and that whatever parses formats back to a
// value that parses to the same allocation.
func FuzzParseAllocation(f *testing.F) {
	for _, s := range []string{"node-a:0", "node-b:0,1,2,3", ":", "a:b:1", "n:1,1", "n:-0", "n:٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if len(a.IDs) == 0 || a.Node == "" {
			t.Fatalf("parsed %q into an empty allocation %+v", s, a)
		}
		b, err := ParseAllocation(a.String())
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, a, a.String(), b, err)
		}
	})
}

func TestSchedulerPeerLeaseName(t *testing.T) {
	for identity, want := range map[string]string{
		"gpu-scheduler-7d9f5-x2kq": "gpu-gpu-scheduler-7d9f5-x2kq-scheduler",
		"Host_01.example.com":      "gpu-host-01-example-com-scheduler",
		"--":                       "", // reduced to a hash: checked below for validity only
		strings.Repeat("a", 300):   "",
	} {
		got := SchedulerPeerLeaseName(identity)
		if want != "" && got != want {
			t.Errorf("SchedulerPeerLeaseName(%q) = %q, want %q", identity, got, want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("SchedulerPeerLeaseName(%q) = %q, not a valid name: %v", identity, got, errs)
		}
		if !strings.HasSuffix(got, "-scheduler") {
			t.Errorf("SchedulerPeerLeaseName(%q) = %q, want the -scheduler suffix", identity, got)
		}
	}
	if a, b := SchedulerPeerLeaseName(strings.Repeat("a", 300)), SchedulerPeerLeaseName(strings.Repeat("a", 301)); a == b {
		t.Errorf("two long identities share the lease name %q", a)
	}
}

func TestParseLeaseName(t *testing.T) {
	for _, tc := range []struct {
		name string
		node string
		id   int
		ok   bool
	}{
		{"gpu-a-0", "a", 0, true},
		{"gpu-node-1-63", "node-1", 63, true},
		{"gpu-a.b.c-7", "a.b.c", 7, true},
		{"gpu-a-64", "", 0, false},
		{"gpu-a-07", "", 0, false},
		{"gpu-a-agent", "", 0, false},
		{"gpu-vm-scheduler", "", 0, false},
		{"gpu-controller.gpu.scheduling", "", 0, false},
		{"gpu--1", "", 0, false},
		{"gpu-3", "", 0, false},
		{"lock-a-1", "", 0, false},
	} {
		node, id, ok := ParseLeaseName(tc.name)
		if node != tc.node || id != tc.id || ok != tc.ok {
			t.Errorf("ParseLeaseName(%q) = %q, %d, %v; want %q, %d, %v", tc.name, node, id, ok, tc.node, tc.id, tc.ok)
		}
		if ok {
			if back, err := LeaseName(node, id); err != nil || back != tc.name {
				t.Errorf("LeaseName(%q, %d) = %q, %v; want %q", node, id, back, err, tc.name)
			}
		}
	}
}

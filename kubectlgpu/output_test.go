package kubectlgpu

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TestOutputFormats: kubectl's output conventions on a list of claims and on views that are no
// API objects.
func TestOutputFormats(t *testing.T) {
	claims := []apiv1.GpuClaim{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "a", Labels: map[string]string{"team": "x"}}, Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2}}, Status: apiv1.GpuClaimStatus{Phase: apiv1.ClaimBound, NodeName: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "b"}, Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 8}}},
	}
	nodes := []NodeView{{Name: "n1"}, {Name: "n2"}}
	tests := []struct {
		output, resource string
		v                any
		noHeaders        bool
		want             string
		wantErr          string
	}{
		{output: "name", resource: "gpuclaim", v: claims, want: "gpuclaim/a\ngpuclaim/b\n"},
		{output: "name", resource: "node", v: nodes, want: "node/n1\nnode/n2\n"},
		{output: "jsonpath={.items[*].metadata.name}", resource: "gpuclaim", v: claims, want: "a b"},
		{output: "jsonpath={.items[0].status.nodeName}", resource: "gpuclaim", v: claims, want: "n1"},
		{output: "custom-columns=NAME:.metadata.name,GPUS:.spec.devices.count,NODE:.status.nodeName", resource: "gpuclaim", v: claims,
			want: "NAME  GPUS  NODE\na     2     n1\nb     8     <none>\n"},
		{output: "custom-columns=NAME:.metadata.name", resource: "gpuclaim", v: claims, noHeaders: true, want: "a\nb\n"},
		{output: "custom-columns=NAME", resource: "gpuclaim", v: claims, wantErr: `"NAME" is not HEADER:JSONPATH`},
		{output: "jsonpath", resource: "gpuclaim", v: claims, wantErr: "-o jsonpath needs a template"},
		{output: "table", resource: "gpuclaim", v: claims, wantErr: `unknown --output "table"`},
	}
	for _, tt := range tests {
		t.Run(tt.output, func(t *testing.T) {
			var out bytes.Buffer
			o := &Options{Output: tt.output, NoHeaders: tt.noHeaders}
			done, err := o.printData(&out, tt.resource, tt.v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !done {
				t.Fatalf("printed %v, error %v", done, err)
			}
			if out.String() != tt.want {
				t.Fatalf("output\n%q\nwant\n%q", out.String(), tt.want)
			}
		})
	}
	// -o json of a list is a List, as kubectl prints it.
	var out bytes.Buffer
	if _, err := (&Options{Output: "json"}).printData(&out, "gpuclaim", claims); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string           `json:"kind"`
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || list.Kind != "List" || len(list.Items) != 2 {
		t.Fatalf("-o json: kind %q, %d items, %v:\n%s", list.Kind, len(list.Items), err, out.String())
	}
	// A view that is no API object (status, explain) prints as it is in json and yaml.
	view := Explanation{Pod: "ml/p", Claim: "ml/c"}
	for format, want := range map[string]string{"json": `"claim": "ml/c"`, "yaml": "claim: ml/c"} {
		out.Reset()
		if _, err := (&Options{Output: format}).printData(&out, "explanation", view); err != nil || !strings.Contains(out.String(), want) {
			t.Fatalf("-o %s of a view: %v\n%s", format, err, out.String())
		}
	}
	// Tables and views print themselves for "" and wide.
	if done, err := (&Options{Output: "wide"}).printData(&out, "gpuclaim", claims); done || err != nil {
		t.Fatalf("-o wide printed data: %v %v", done, err)
	}
}

// TestSelectorAndNoHeaders: -l filters by labels as kubectl's does, and --no-headers drops
// exactly the header line of a table.
func TestSelectorAndNoHeaders(t *testing.T) {
	type item struct{ labels map[string]string }
	items := []item{{map[string]string{"team": "x", "tier": "a"}}, {map[string]string{"team": "y"}}, {nil}}
	of := func(i item) map[string]string { return i.labels }
	for sel, want := range map[string]int{"": 3, "team=x": 1, "team!=x": 2, "team in (x,y)": 2, "!team": 1} {
		got, err := labelled(items, sel, of)
		if err != nil || len(got) != want {
			t.Errorf("-l %q kept %d, %v; want %d", sel, len(got), err, want)
		}
	}
	if _, err := labelled(items, "team in (x", of); err == nil {
		t.Error("a malformed selector was accepted")
	}
	var out bytes.Buffer
	w := (&Options{NoHeaders: true}).tableOut(&out)
	for _, chunk := range []string{"NAME\tGPUS", "\nn1\t2\n", "n2\t3\n"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != "n1\t2\nn2\t3\n" {
		t.Fatalf("--no-headers wrote %q", out.String())
	}
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryCRDIsDocumented renders api/v1 and checks that every CRD the chart installs has its
// section, and every property of each CRD's spec and status schema its row.
func TestEveryCRDIsDocumented(t *testing.T) {
	pkg, err := load("../../api/v1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := render(pkg)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(out)
	crds, err := filepath.Glob("../../charts/gpu-scheduler/crds/*.yaml")
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	kindPattern := regexp.MustCompile(`(?m)^    kind: (\w+)$`)
	for _, crd := range crds {
		raw, err := os.ReadFile(crd)
		if err != nil {
			t.Fatal(err)
		}
		m := kindPattern.FindSubmatch(raw)
		if m == nil {
			t.Fatalf("%s: no kind", crd)
		}
		if !strings.Contains(doc, "\n## "+string(m[1])+"\n") {
			t.Errorf("%s: no section for kind %s", crd, m[1])
		}
	}
	for _, row := range []string{
		"| `count` | int32 | **required.** Count is the number of GPUs needed, on one node. Minimum 1. Maximum 64. |",
		"| `policy` | [Policy](#policy) (string) | Policy is the allocation strategy on the node. Default: `contiguous`. |",
		"| `devices` | [][Device](#device) |",
		"| `template` | corev1.PodTemplateSpec | **required.**",
		"| `Shared` | Lets several Shared pods use a GPU",
		"- set exactly one of claim.spec and claim.templateName.",
		"| [GpuNodeStatus](#gpunodestatus) | Cluster | gns | yes |",
	} {
		if !strings.Contains(doc, row) {
			t.Errorf("the reference lacks %q", row)
		}
	}
}

// TestFieldWithoutJSONTag: a field the generator cannot name is an error, not a silent gap.
func TestFieldWithoutJSONTag(t *testing.T) {
	dir := t.TempDir()
	src := `// +groupName=example.com
package v1

// +kubebuilder:object:root=true

// Thing is a thing.
type Thing struct {
	Spec ThingSpec ` + "`json:\"spec\"`" + `
}

// ThingSpec is its spec.
type ThingSpec struct {
	Size int32
}
`
	if err := os.WriteFile(filepath.Join(dir, "types.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render(pkg); err == nil || !strings.Contains(err.Error(), "ThingSpec.Size has no json tag") {
		t.Errorf("render: err %v, want one naming ThingSpec.Size", err)
	}
}

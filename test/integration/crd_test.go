//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// TestCRDRejectsBadClaims applies bad GpuClaims to the real apiserver, as kubectl apply would,
// and checks each is rejected with a message a user understands.
func TestCRDRejectsBadClaims(t *testing.T) {
	ns := namespace(t, "crd")
	dyn, err := dynamic.NewForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	claims := dyn.Resource(schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuclaims"}).Namespace(ns)
	tests := []struct {
		name string
		spec string
		want string // empty: accepted
	}{
		{"minimal", `devices: {count: 1}`, ""},
		{"seed example", `{devices: {count: 4, policy: contiguous, exclusivity: Exclusive}, topology: {mode: Preferred, minBandwidthGBps: 600}, selector: {matchLabels: {gpu-type: a100}}}`, ""},
		{"count 0", `devices: {count: 0}`, "spec.devices.count: Invalid value: 0: spec.devices.count in body should be greater than or equal to 1"},
		{"count too big", `devices: {count: 65}`, "spec.devices.count: Invalid value: 65: spec.devices.count in body should be less than or equal to 64"},
		{"missing count", `devices: {policy: spread}`, "spec.devices.count: Required value"},
		{"missing devices", `gangRef: x`, "spec.devices: Required value"},
		{"unknown policy", `devices: {count: 1, policy: packed}`, `spec.devices.policy: Unsupported value: "packed": supported values: "contiguous", "spread", "preferIds"`},
		{"unknown exclusivity", `devices: {count: 1, exclusivity: Private}`, `spec.devices.exclusivity: Unsupported value: "Private": supported values: "Exclusive", "Shared", "MIG"`},
		{"unknown mode", `{devices: {count: 1}, topology: {mode: Always}}`, `spec.topology.mode: Unsupported value: "Always": supported values: "Required", "Preferred", "Ignore"`},
		{"negative bandwidth", `{devices: {count: 1}, topology: {minBandwidthGBps: -1}}`, "spec.topology.minBandwidthGBps: Invalid value: -1: spec.topology.minBandwidthGBps in body should be greater than or equal to 0"},
		{"negative preferIds", `devices: {count: 1, policy: preferIds, preferIds: [-1]}`, "spec.devices.preferIds[0]: Invalid value: -1: spec.devices.preferIds[0] in body should be greater than or equal to 0"},
		{"duplicate preferIds", `devices: {count: 2, policy: preferIds, preferIds: [2, 2]}`, "spec.devices.preferIds: Invalid value: preferIds must not repeat a GPU ID"},
		{"preferIds policy without IDs", `devices: {count: 1, policy: preferIds}`, "preferIds must list at least one GPU ID when policy is preferIds"},
		{"preferIds without the policy", `devices: {count: 1, preferIds: [1]}`, "preferIds is only used with policy: preferIds"},
		{"spread with Required", `{devices: {count: 2, policy: spread}, topology: {mode: Required}}`, "policy spread places GPUs across islands and cannot be combined with topology.mode Required"},
		{"gang", `{devices: {count: 8}, gangRef: train-1, gangSize: 4}`, ""},
		{"gangSize without gangRef", `{devices: {count: 8}, gangSize: 4}`, "gangSize needs gangRef: name the gang the claim belongs to"},
		{"gangSize 0", `{devices: {count: 8}, gangRef: train-1, gangSize: 0}`, "spec.gangSize: Invalid value: 0: spec.gangSize in body should be greater than or equal to 1"},
		{"MIG", `devices: {count: 2, exclusivity: MIG, migProfile: 1g.10gb}`, ""},
		{"MIG without a profile", `devices: {count: 1, exclusivity: MIG}`, "migProfile is set exactly when exclusivity is MIG"},
		{"a profile without MIG", `devices: {count: 1, migProfile: 1g.10gb}`, "migProfile is set exactly when exclusivity is MIG"},
		{"a profile misspelt", `devices: {count: 1, exclusivity: MIG, migProfile: 1g10gb}`, "spec.devices.migProfile: Invalid value"},
		{"MIG with preferIds", `devices: {count: 1, exclusivity: MIG, migProfile: 1g.10gb, policy: preferIds, preferIds: [1]}`, "policy preferIds names whole GPUs; a MIG claim cannot use it"},
		{"shared with a share", `devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 25, computePercent: 25}}`, ""},
		{"a share, not shared", `devices: {count: 1, share: {memoryMiB: 1024}}`, "share is only used with exclusivity: Shared"},
		{"memory stated twice", `devices: {count: 1, exclusivity: Shared, share: {memoryMiB: 1024, memoryPercent: 10}}`, "state the memory share once"},
		{"an empty share", `devices: {count: 1, exclusivity: Shared, share: {}}`, "share states memoryMiB, memoryPercent or computePercent"},
		{"compute above 100", `devices: {count: 1, exclusivity: Shared, share: {computePercent: 101}}`, "spec.devices.share.computePercent: Invalid value: 101"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(tt.spec), &spec); err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gpu.scheduling/v1",
				"kind":       "GpuClaim",
				"metadata":   map[string]any{"name": "c" + strings.Repeat("x", i)},
				"spec":       spec,
			}}
			_, err := claims.Create(t.Context(), obj, metav1.CreateOptions{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid claim rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("bad claim accepted; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestCRDRejectsBadWorkloads applies bad GpuWorkloads to the real apiserver and checks that
// each is rejected with the field named.
func TestCRDRejectsBadWorkloads(t *testing.T) {
	ns := namespace(t, "crdgw")
	dyn, err := dynamic.NewForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	workloads := dyn.Resource(schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuworkloads"}).Namespace(ns)
	const tmpl = `template: {spec: {containers: [{name: c, image: busybox}]}}`
	tests := []struct {
		name string
		spec string
		want string // empty: accepted
	}{
		{"minimal", `{claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`, ""},
		{"template reference", `{replicas: 2, claim: {templateName: train-8x}, nodeStrategy: cost-aware, ` + tmpl + `}`, ""},
		{"gang", `{replicas: 4, gang: true, priorityClassName: high, nodeStrategy: round-robin, retryPolicy: {maxRetries: 0, backoffSeconds: 1}, claim: {spec: {devices: {count: 8}}}, ` + tmpl + `}`, ""},
		{"negative retries", `{retryPolicy: {maxRetries: -1}, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.retryPolicy.maxRetries: Invalid value: -1: spec.retryPolicy.maxRetries in body should be greater than or equal to 0"},
		{"backoff 0", `{retryPolicy: {backoffSeconds: 0}, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.retryPolicy.backoffSeconds: Invalid value: 0: spec.retryPolicy.backoffSeconds in body should be greater than or equal to 1"},
		{"backoff over five minutes", `{retryPolicy: {backoffSeconds: 301}, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.retryPolicy.backoffSeconds: Invalid value: 301: spec.retryPolicy.backoffSeconds in body should be less than or equal to 300"},
		{"negative replicas", `{replicas: -1, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"},
		{"gang of 0 replicas", `{replicas: 0, gang: true, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.replicas: Invalid value: a gang needs at least 1 replica"},
		{"0 replicas without gang", `{replicas: 0, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`, ""},
		{"unknown strategy", `{nodeStrategy: cheapest, claim: {spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			`spec.nodeStrategy: Unsupported value: "cheapest": supported values: "binpack", "spread", "least-utilized", "round-robin", "random", "cost-aware"`},
		{"no claim", tmpl, "spec.claim: Required value"},
		{"both claim forms", `{claim: {templateName: t, spec: {devices: {count: 1}}}, ` + tmpl + `}`,
			"spec.claim: Invalid value: set exactly one of claim.spec and claim.templateName"},
		{"neither claim form", `{claim: {}, ` + tmpl + `}`,
			"spec.claim: Invalid value: set exactly one of claim.spec and claim.templateName"},
		{"gangRef in the claim", `{claim: {spec: {devices: {count: 1}, gangRef: g}}, ` + tmpl + `}`,
			"spec.claim.spec.gangRef: Invalid value: claim.spec.gangRef is set by the controller; use gang: true instead"},
		{"gang with a template reference", `{gang: true, claim: {templateName: t}, ` + tmpl + `}`,
			"spec.claim: Invalid value: gang: true needs an inline claim.spec"},
		{"gangTopology without gang", `{claim: {spec: {devices: {count: 4}, gangTopology: {level: nvidia.com/gpu.clique}}}, ` + tmpl + `}`,
			"spec.claim: Invalid value: claim.spec.gangTopology needs gang: true"},
		{"gangTopology in a gang", `{gang: true, replicas: 2, claim: {spec: {devices: {count: 4}, gangTopology: {level: nvidia.com/gpu.clique, mode: Required}}}, ` + tmpl + `}`, ""},
		{"bad claim spec", `{claim: {spec: {devices: {count: 0}}}, ` + tmpl + `}`,
			"spec.claim.spec.devices.count: Invalid value: 0: spec.claim.spec.devices.count in body should be greater than or equal to 1"},
		{"no template", `{claim: {spec: {devices: {count: 1}}}}`, "spec.template: Required value"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(tt.spec), &spec); err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gpu.scheduling/v1",
				"kind":       "GpuWorkload",
				"metadata":   map[string]any{"name": fmt.Sprintf("w%d", i)},
				"spec":       spec,
			}}
			_, err := workloads.Create(t.Context(), obj, metav1.CreateOptions{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid workload rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("bad workload accepted; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
	t.Run("name too long", func(t *testing.T) {
		var spec map[string]any
		if err := yaml.Unmarshal([]byte(`{claim: {spec: {devices: {count: 1}}}, `+tmpl+`}`), &spec); err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gpu.scheduling/v1", "kind": "GpuWorkload",
			"metadata": map[string]any{"name": strings.Repeat("w", 53)}, "spec": spec,
		}}
		_, err := workloads.Create(t.Context(), obj, metav1.CreateOptions{})
		const want = "metadata.name must be at most 52 characters"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error = %v, want it to contain %q", err, want)
		}
	})
}

// TestExampleWorkloadIsValid applies examples/gpuworkload.yaml (server-side dry run): the
// example the docs point at must pass the schema.
func TestExampleWorkloadIsValid(t *testing.T) {
	ns := namespace(t, "example")
	dyn, err := dynamic.NewForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "examples", "gpuworkload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &obj.Object); err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(ns)
	gvr := schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuworkloads"}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("examples/gpuworkload.yaml: %v", err)
	}
}

// TestWorkloadPrinterColumns asks for GpuWorkloads as kubectl get does (as a Table) and checks
// the columns.
func TestWorkloadPrinterColumns(t *testing.T) {
	ns := namespace(t, "columns")
	raw, err := env.kube.CoreV1().RESTClient().Get().AbsPath("/apis/gpu.scheduling/v1/namespaces/"+ns+"/gpuworkloads").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if want := []string{"Name", "Phase", "Ready", "GPUs", "Nodes", "Age"}; !slices.Equal(names, want) {
		t.Fatalf("columns %v, want %v", names, want)
	}
}

// TestCRDRejectsBadClaimTemplates checks that a GpuClaimTemplate's claim spec is validated
// exactly like a claim's, at apply time, with the field path under spec.spec.
func TestCRDRejectsBadClaimTemplates(t *testing.T) {
	ns := namespace(t, "crd-template")
	dyn, err := dynamic.NewForConfig(env.c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	templates := dyn.Resource(schema.GroupVersionResource{Group: "gpu.scheduling", Version: "v1", Resource: "gpuclaimtemplates"}).Namespace(ns)
	tests := []struct {
		name string
		spec string
		want string // empty: accepted
	}{
		{"minimal", `spec: {devices: {count: 1}}`, ""},
		{"labels, annotations and a gang", `{metadata: {labels: {team: ml}, annotations: {note: x}}, spec: {devices: {count: 8}, gangRef: train, gangSize: 4}}`, ""},
		{"missing claim spec", `metadata: {labels: {team: ml}}`, "spec.spec: Required value"},
		{"count 0", `spec: {devices: {count: 0}}`, "spec.spec.devices.count: Invalid value: 0"},
		{"spread with Required", `spec: {devices: {count: 2, policy: spread}, topology: {mode: Required}}`, "policy spread places GPUs across islands and cannot be combined with topology.mode Required"},
		{"gangSize without gangRef", `spec: {devices: {count: 8}, gangSize: 4}`, "gangSize needs gangRef"},
		// For the pods of PodGroups, whose claims take the group's gang.
		{"gangTopology without gangRef", `spec: {devices: {count: 4}, gangTopology: {level: nvidia.com/gpu.clique, mode: Required}}`, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var spec map[string]any
			if err := yaml.Unmarshal([]byte(tt.spec), &spec); err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gpu.scheduling/v1",
				"kind":       "GpuClaimTemplate",
				"metadata":   map[string]any{"name": "t" + strings.Repeat("x", i)},
				"spec":       spec,
			}}
			_, err := templates.Create(t.Context(), obj, metav1.CreateOptions{})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid template rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("bad template accepted; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// TestCRDBoundsNodeStatuses writes GpuNodeStatuses past the schema's bounds to the real
// apiserver: more devices than a node carries (apiv1.MaxGPUsPerNode) or a GPU ID beyond
// apiv1.MaxGPUID cannot be written, so no status can make every placement walk thousands of GPUs.
func TestCRDBoundsNodeStatuses(t *testing.T) {
	const node = "crd-bounds"
	t.Cleanup(func() {
		_ = env.gpu.GpuV1().GpuNodeStatuses().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	devs := func(ids ...int32) []apiv1.Device {
		out := make([]apiv1.Device, len(ids))
		for i, id := range ids {
			out[i] = apiv1.Device{ID: id, Health: apiv1.Healthy}
		}
		return out
	}
	upTo := func(n int32) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(i)
		}
		return ids
	}
	for _, tt := range []struct {
		name string
		devs []apiv1.Device
		want string // empty: accepted
	}{
		{"a full node", devs(upTo(apiv1.MaxGPUsPerNode)...), ""},
		{"one device too many", append(devs(upTo(apiv1.MaxGPUsPerNode)...), apiv1.Device{ID: apiv1.MaxGPUsPerNode + 1}), "status.devices: Too many: 65: must have at most 64 items"},
		{"ten thousand devices", devs(upTo(10000)...), "status.devices: Too many: 10000: must have at most 64 items"},
		{"ID out of range", devs(0, apiv1.MaxGPUID+1), "should be less than or equal to 63"},
		{"ID 1000", devs(1000), "should be less than or equal to 63"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := writeStatus(t.Context(), node, tt.devs)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid status refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

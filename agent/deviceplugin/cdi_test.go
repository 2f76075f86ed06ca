package deviceplugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestCDISpec checks that each CDI device carries only its own GPU's device node and UUID,
// and that the spec is rewritten when the inventory changes but not on a health change.
func TestCDISpec(t *testing.T) {
	dir := t.TempDir()
	p, err := New(Config{NodeName: "n", Pods: v1.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, nil)), CDIDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	gpus := []GPU{{Index: 0, UUID: "GPU-a", Healthy: true}, {Index: 1, UUID: "GPU-b", Healthy: true}}
	if err := p.SetGPUs(gpus); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpu.scheduling-gpu.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != DefaultCDIKind || len(spec.Devices) != 2 {
		t.Fatalf("spec kind %q with %d devices, want %q with 2", spec.Kind, len(spec.Devices), DefaultCDIKind)
	}
	d := spec.Devices[1]
	if d.Name != "1" || len(d.ContainerEdits.DeviceNodes) != 1 || d.ContainerEdits.DeviceNodes[0].Path != "/dev/nvidia1" ||
		d.ContainerEdits.Env[0] != "NVIDIA_VISIBLE_DEVICES=GPU-b" {
		t.Fatalf("device 1 is %+v; want only /dev/nvidia1 and GPU-b", d)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	gpus[1].Healthy = false
	if err := p.SetGPUs(gpus); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a health change rewrote the CDI spec (stat: %v)", err)
	}
	if err := p.SetGPUs(gpus[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("an inventory change did not rewrite the CDI spec: %v", err)
	}
}

package deviceplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultOtherGPUResources are the extended resources other GPU device plugins serve: NVIDIA's
// device plugin (whole GPUs, time-sliced or MPS-shared ones, MIG slices) and AMD's. A trailing
// * matches any suffix.
var DefaultOtherGPUResources = []string{"nvidia.com/gpu", "nvidia.com/gpu.*", "nvidia.com/mig-*", "amd.com/gpu"}

// otherGPUSocketPrefixes start the socket names other GPU device plugins register with: NVIDIA's
// device plugin serves nvidia-<resource>.sock (nvidia-gpu.sock, nvidia-mig-1g.10gb.sock), AMD's
// amdgpu.sock.
var otherGPUSocketPrefixes = []string{"nvidia", "amdgpu"}

// OtherGPUPlugins says what shows that another device plugin serves this node's GPUs besides
// this one, serving ownResource on socket ownSocket in the kubelet's device-plugin directory
// pluginDir: a GPU resource of another name (otherResources; DefaultOtherGPUResources when nil)
// in the node's capacity, which the kubelet fills from every registered plugin, and another GPU
// plugin's socket in pluginDir, which shows it even when it serves our own resource name (the
// kubelet then keeps only the last plugin to register). Each finding is one sentence; none
// means none was found. Two plugins serving one GPU hand it out twice, and neither knows.
func OtherGPUPlugins(node *corev1.Node, pluginDir, ownResource, ownSocket string, otherResources []string) ([]string, error) {
	if otherResources == nil {
		otherResources = DefaultOtherGPUResources
	}
	var found []string
	if node != nil {
		var names []string
		for name, q := range node.Status.Capacity {
			if string(name) != ownResource && q.Value() > 0 && matchesAny(string(name), otherResources) {
				names = append(names, fmt.Sprintf("%s: %s", name, q.String()))
			}
		}
		slices.Sort(names)
		for _, n := range names {
			found = append(found, fmt.Sprintf("node %s has capacity %s, registered with its kubelet by another device plugin", node.Name, n))
		}
	}
	entries, err := os.ReadDir(pluginDir)
	if err != nil {
		return found, fmt.Errorf("reading the kubelet's device-plugin directory %s: %w", pluginDir, err)
	}
	kubelet := filepath.Base(pluginapi.KubeletSocket)
	for _, e := range entries {
		name := e.Name()
		if name == kubelet || name == ownSocket || e.Type()&os.ModeSocket == 0 {
			continue
		}
		for _, prefix := range otherGPUSocketPrefixes {
			if strings.HasPrefix(name, prefix) {
				found = append(found, fmt.Sprintf("%s holds %s, the socket of another GPU device plugin", pluginDir, name))
				break
			}
		}
	}
	return found, nil
}

func matchesAny(name string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

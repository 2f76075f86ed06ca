package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The agents serve and the webhook asks for one resource: the chart passes
// devicePlugin.resourceName to both, in the default device-plugin mode and with a name of one's
// own; the agent refuses to serve beside another GPU plugin unless allowOtherGPUPlugins; and
// without the device plugin neither gets the resource.
func TestDevicePluginResourceAgrees(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		resource     string
		allowOthers  bool
		managedLabel bool
	}{
		{name: "default", resource: "gpu.scheduling/gpu", managedLabel: true},
		{name: "own name, split GPUs", args: []string{"--set", "devicePlugin.resourceName=example.com/gpu", "--set", "devicePlugin.allowOtherGPUPlugins=true"},
			resource: "example.com/gpu", allowOthers: true, managedLabel: true},
		{name: "Downward-API mode", args: []string{"--set", "devicePlugin.enabled=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := parseObjects(t, mustTemplate(t, tc.args...))
			var ds appsv1.DaemonSet
			var webhook appsv1.Deployment
			into(t, find(t, objs, "DaemonSet", releaseName+"-agent"), &ds)
			into(t, find(t, objs, "Deployment", releaseName+"-webhook"), &webhook)
			agentArgs, webhookArgs := ds.Spec.Template.Spec.Containers[0].Args, webhook.Spec.Template.Spec.Containers[0].Args
			resourceOf := func(args []string) string {
				for _, a := range args {
					if v, ok := strings.CutPrefix(a, "--resource-name="); ok {
						return v
					}
				}
				return ""
			}
			if got := resourceOf(agentArgs); got != tc.resource {
				t.Errorf("agent --resource-name %q, want %q (args %q)", got, tc.resource, agentArgs)
			}
			if got := resourceOf(webhookArgs); got != tc.resource {
				t.Errorf("webhook --resource-name %q, want %q (args %q)", got, tc.resource, webhookArgs)
			}
			if got := slices.Contains(agentArgs, "--allow-other-gpu-plugins"); got != tc.allowOthers {
				t.Errorf("agent --allow-other-gpu-plugins %v, want %v (args %q)", got, tc.allowOthers, agentArgs)
			}
			if tc.resource == "" && !slices.Contains(agentArgs, "--device-plugin=false") {
				t.Errorf("agent args %q lack --device-plugin=false in the Downward-API mode", agentArgs)
			}
			if got := ds.Spec.Template.Spec.NodeSelector["gpu.scheduling/managed"] == "true"; got != tc.managedLabel {
				t.Errorf("agent nodeSelector %v: gpu.scheduling/managed=true %v, want %v", ds.Spec.Template.Spec.NodeSelector, got, tc.managedLabel)
			}
		})
	}
}

// devicePlugin.mps.enabled has the agent run MPS: its flags, the MPS root mounted from the host
// at the same path (Shared containers mount their GPU's pipe from there), the daemons' shared
// memory as /dev/shm, and the compute driver capability that brings the MPS binaries. Off (the
// default) none of it is there.
func TestMPSRendersDaemonsPathsAndCapability(t *testing.T) {
	for _, on := range []bool{false, true} {
		var args []string
		if on {
			args = []string{"--set", "devicePlugin.mps.enabled=true", "--set", "devicePlugin.mps.root=/run/example/mps"}
		}
		var ds appsv1.DaemonSet
		into(t, find(t, parseObjects(t, mustTemplate(t, args...)), "DaemonSet", releaseName+"-agent"), &ds)
		spec := ds.Spec.Template.Spec
		c := spec.Containers[0]
		hasArgs := slices.Contains(c.Args, "--mps") && slices.Contains(c.Args, "--mps-root=/run/example/mps") &&
			slices.Contains(c.Args, "--mps-control=nvidia-cuda-mps-control")
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		hostPaths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		hasMounts := mounts["mps"] == "/run/example/mps" && hostPaths["mps"] == "/run/example/mps" &&
			mounts["mps-shm"] == "/dev/shm" && hostPaths["mps-shm"] == "/run/example/mps/shm"
		caps := ""
		for _, e := range c.Env {
			if e.Name == "NVIDIA_DRIVER_CAPABILITIES" {
				caps = e.Value
			}
		}
		if hasArgs != on || hasMounts != on || (caps == "compute,utility") != on {
			t.Errorf("mps.enabled=%v: args %q, mounts %v, host paths %v, NVIDIA_DRIVER_CAPABILITIES=%q", on, c.Args, mounts, hostPaths, caps)
		}
	}
}

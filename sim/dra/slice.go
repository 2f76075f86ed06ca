// Package dra publishes a node's GPUs the way a Dynamic Resource Allocation driver does: one
// resource.k8s.io/v1 ResourceSlice per node with one device per GPU, and a DeviceClass that
// selects them. The devices come from the node agent's own discovery (agent/topology over NVML,
// the mock NVML in the simulator), so a DRA cluster and a gpu-scheduler cluster see the same
// GPUs, islands and health. The stock kube-scheduler then allocates devices itself from the
// slices (its DynamicResources plugin); no kubelet plugin is involved here, so it serves
// placement only, not the preparing of devices on the node.
//
// It is the simulator's DRA baseline (the stock kube-scheduler allocating through DRA), fed by
// the simulated agent fleet (package sim/fleet); no product binary links it.
package dra

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// DriverName is the driver the slices are published for; attribute names without a domain
// belong to it.
const DriverName = "gpu.scheduling"

// DeviceClassName is the DeviceClass a claim names to get one of our GPUs.
const DeviceClassName = "gpu.scheduling"

// Attributes of each device (in the driver's domain) and its capacity.
const (
	AttrIndex     = "index"         // int: the NVML index, the GPU ID of the GpuNodeStatus
	AttrUUID      = "uuid"          // string
	AttrModel     = "productName"   // string: "NVIDIA H100 80GB HBM3"
	AttrIsland    = "island"        // string: nvlink-group-N, per node
	AttrBandwidth = "bandwidthGBps" // int: to the island's peers; 0 when not Healthy
	AttrPCIBusID  = "pciBusID"      // string
	AttrHealth    = "health"        // string: Healthy, Unhealthy or Unknown
	CapMemory     = "memory"        // quantity: the GPU's memory
)

// IslandAttribute is the island's fully qualified name, for a claim's matchAttribute constraint.
const IslandAttribute resourceapi.FullyQualifiedName = DriverName + "/" + AttrIsland

// TaintUnhealthy is put on a device that is not Healthy, with effect NoSchedule: the allocator
// gives it to no new claim (device taints are beta and on by default in Kubernetes 1.36), and
// pods already running on it stay, as with gpu-scheduler.
const TaintUnhealthy = DriverName + "/unhealthy"

// DeviceName is the name of GPU id in its node's slice.
func DeviceName(id int32) string { return "gpu-" + strconv.Itoa(int(id)) }

// DeviceIndex reads the GPU ID back from a device name of DeviceName, for an allocation result.
func DeviceIndex(name string) (int, error) {
	const prefix = "gpu-"
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return 0, fmt.Errorf("device %q is not one of ours (gpu-<index>)", name)
	}
	id, err := strconv.Atoi(name[len(prefix):])
	if err != nil || id < 0 {
		return 0, fmt.Errorf("device %q has no GPU index: %w", name, err)
	}
	return id, nil
}

// SliceName is the name of node's ResourceSlice.
func SliceName(node string) string { return node + "-" + "gpus" }

// Slice is the node's ResourceSlice: its pool is the node (one slice in it), owned by the Node
// so that it goes with it. generation is the pool's generation; a changed slice must carry a
// higher one.
func Slice(node *corev1.Node, devices []apiv1.Device, generation int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: SliceName(node.Name),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true),
			}},
		},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DriverName,
			NodeName: ptr.To(node.Name),
			Pool:     resourceapi.ResourcePool{Name: node.Name, Generation: generation, ResourceSliceCount: 1},
		},
	}
	for _, d := range devices {
		s.Spec.Devices = append(s.Spec.Devices, Device(d))
	}
	return s
}

// Device is one GPU as a DRA device. A GPU the agent could not read (lost during discovery)
// has no island and no facts: it carries only its index and health, so no island constraint
// can pick it.
func Device(d apiv1.Device) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrIndex:     {IntValue: ptr.To(int64(d.ID))},
		AttrBandwidth: {IntValue: ptr.To(int64(d.BandwidthGBps))},
		AttrHealth:    {StringValue: ptr.To(string(healthOf(d)))},
	}
	str := func(name resourceapi.QualifiedName, v string) {
		if v != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		}
	}
	str(AttrUUID, d.UUID)
	str(AttrModel, d.Product)
	str(AttrIsland, d.Island)
	str(AttrPCIBusID, d.PCIBusID)
	dev := resourceapi.Device{Name: DeviceName(d.ID), Attributes: attrs}
	if d.MemoryMiB > 0 {
		dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapMemory: {Value: *resource.NewQuantity(d.MemoryMiB<<20, resource.BinarySI)},
		}
	}
	if h := healthOf(d); h != apiv1.Healthy {
		dev.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: string(h), Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return dev
}

func healthOf(d apiv1.Device) apiv1.Health {
	if d.Health == "" {
		return apiv1.Unknown
	}
	return d.Health
}

// DeviceClass selects this driver's devices.
func DeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DriverName)},
		}}},
	}
}

// sameDevices tells whether two device lists publish the same slice: usage (inUseBy,
// utilization) is not part of a slice, the allocator keeps that in the claims.
func sameDevices(a, b []apiv1.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.UUID != y.UUID || x.Product != y.Product || x.MemoryMiB != y.MemoryMiB ||
			x.PCIBusID != y.PCIBusID || x.Island != y.Island || x.BandwidthGBps != y.BandwidthGBps || healthOf(x) != healthOf(y) {
			return false
		}
	}
	return true
}

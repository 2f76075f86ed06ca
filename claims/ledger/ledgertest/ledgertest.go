// Package ledgertest holds the GpuNodeStatus fixtures the ledger's tests and the scheduler
// plugin's tests share.
package ledgertest

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// SeedStatus is the API reference's example node as an agent reports it: eight GPUs in two
// islands of four (600 and 64 GB/s), GPU 7 unhealthy, heartbeat at the given time.
func SeedStatus(node string, heartbeat time.Time) *apiv1.GpuNodeStatus {
	s := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}
	for i := int32(0); i < 8; i++ {
		d := apiv1.Device{ID: i, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 600}
		if i >= 4 {
			d.Island, d.BandwidthGBps = "nvlink-group-1", 64
		}
		s.Status.Devices = append(s.Status.Devices, d)
	}
	s.Status.Devices[7].Health = apiv1.Unhealthy
	s.Status.LastHeartbeatTime = metav1.NewTime(heartbeat)
	return s
}

// Node is a node with the given labels.
func Node(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// Claim is a GpuClaim in namespace "ns".
func Claim(name string, spec apiv1.GpuClaimSpec) *apiv1.GpuClaim {
	return &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: spec}
}

// Pod is a pod in namespace "ns" with UID "uid-<name>", naming claim when it is not empty.
func Pod(name, claim string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}}}
	if claim != "" {
		p.Annotations[apiv1.AnnotationClaim] = claim
	}
	return p
}

// SchedulingMap is the map every pod of the tests' indexed "Job" carries, as pods copy it from
// their template.
const SchedulingMap = `# index=node:gpus
0=b:4,6
1=a:0,1
2=b:4,5
3=a:7
4=a:2,9
5=gone:0,1
6=a:3
`

// IndexedPod is pod index i of an indexed Job naming claim c<i>, with SchedulingMap.
func IndexedPod(i int) *v1.Pod {
	p := Pod(fmt.Sprintf("train-%d-x7k9p", i), fmt.Sprintf("c%d", i))
	p.GenerateName = fmt.Sprintf("train-%d-", i)
	p.Annotations[apiv1.AnnotationJobCompletionIndex] = fmt.Sprint(i)
	p.Annotations[apiv1.AnnotationSchedulingMap] = SchedulingMap
	return p
}

// MIGStatus is a mixed node of eight GPUs in one island: GPUs 0-3 in MIG mode (0: seven
// 1g.10gb at slots 0-6; 1: two 3g.40gb at slots 0 and 4; 2: a 2g.20gb at 0, a 1g.20gb at 2 and
// 1g.10gb at 4 and 5; 3: no devices), GPUs 4-7 whole, as the dgx-h100-mig preset lays them out.
func MIGStatus(node string, heartbeat time.Time) *apiv1.GpuNodeStatus {
	s := &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}
	dev := func(slot int32, profile string) apiv1.MigDevice {
		return apiv1.MigDevice{Slot: slot, Profile: profile, Health: apiv1.Healthy, UUID: fmt.Sprintf("MIG-%s-%d", profile, slot)}
	}
	for i := int32(0); i < 8; i++ {
		d := apiv1.Device{ID: i, Health: apiv1.Healthy, Island: "nvswitch", BandwidthGBps: 900, MemoryMiB: 81559, Product: "NVIDIA H100 80GB HBM3"}
		if i < 4 {
			d.MIG = &apiv1.DeviceMIG{Enabled: true, Slices: 8}
		}
		switch i {
		case 0:
			for slot := int32(0); slot < 7; slot++ {
				d.MIG.Devices = append(d.MIG.Devices, dev(slot, "1g.10gb"))
			}
		case 1:
			d.MIG.Devices = []apiv1.MigDevice{dev(0, "3g.40gb"), dev(4, "3g.40gb")}
		case 2:
			d.MIG.Devices = []apiv1.MigDevice{dev(0, "2g.20gb"), dev(2, "1g.20gb"), dev(4, "1g.10gb"), dev(5, "1g.10gb")}
		}
		s.Status.Devices = append(s.Status.Devices, d)
	}
	s.Status.LastHeartbeatTime = metav1.NewTime(heartbeat)
	return s
}

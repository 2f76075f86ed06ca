//go:build integration

package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/agent"
	"github.com/gpu-scheduler/gpu-scheduler/agent/status"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/fleet"
)

// TestFleetFabricOnRealControlPlane runs the fleet for a few GB200 trays against a real
// kube-apiserver: each publishes its rack's NVLink domain in status.fabric and as the clique
// label (the agent's merge patch with its resourceVersion precondition is accepted), and a tray
// whose clique label NVIDIA's labeller set keeps that label.
func TestFleetFabricOnRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 5*time.Minute)
	defer cancel()
	kube, gpus, c := controlPlane(ctx, t, "agent-fabric", 0, 0)
	const pool, trays = "gb200-nvl72", 3
	if err := c.CreateNodePool(ctx, cluster.NodePool{Name: pool, Count: trays, GPUsPerNode: 4, Topology: pool}); err != nil {
		t.Fatal(err)
	}
	const theirs = "set-by-gfd.7"
	foreign := cluster.NodeName(pool, 2)
	patch := []byte(`{"metadata":{"labels":{"` + apiv1.LabelGPUClique + `":"` + theirs + `"}}}`)
	if _, err := kube.CoreV1().Nodes().Patch(ctx, foreign, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	f, err := fleet.New(fleet.Config{
		KubeClient: kube, GPUClient: gpus,
		Agent: agent.Config{ProbeInterval: 200 * time.Millisecond, HeartbeatInterval: time.Hour, TelemetryInterval: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFleet := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- f.Run(fctx) }()
	defer func() {
		stopFleet()
		if err := <-done; err != nil {
			t.Errorf("fleet: %v", err)
		}
	}()

	var clique string
	poll(t, ctx, "the fabric and the clique label on every tray", func() error {
		for i := range trays {
			name := cluster.NodeName(pool, i)
			st, err := gpus.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			fab := st.Status.Fabric
			if fab == nil || fab.State != "Completed" || fab.Clique == "" {
				return fmt.Errorf("%s: fabric %+v, want a registered clique", name, fab)
			}
			if clique == "" {
				clique = fab.Clique
			}
			if fab.Clique != clique {
				return fmt.Errorf("%s: clique %q, want the rack's %q", name, fab.Clique, clique)
			}
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			wantLabel, wantAnnotation := clique, clique
			if name == foreign {
				wantLabel, wantAnnotation = theirs, ""
			}
			if n.Labels[apiv1.LabelGPUClique] != wantLabel || n.Annotations[status.AnnotationClique] != wantAnnotation || n.Labels[apiv1.LabelGPUCount] != "4" {
				return fmt.Errorf("%s: clique label %q, annotation %q, count %q; want %q, %q, 4", name,
					n.Labels[apiv1.LabelGPUClique], n.Annotations[status.AnnotationClique], n.Labels[apiv1.LabelGPUCount], wantLabel, wantAnnotation)
			}
		}
		return nil
	})
}

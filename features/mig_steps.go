package features

import (
	"context"
	"fmt"
	"slices"

	"github.com/cucumber/godog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps about MIG devices: where a MIG claim lands, its lease and what the agent reports.
func registerMIGSteps(sc *godog.ScenarioContext) {
	sc.Step(`^pod "([^"]*)" is bound to MIG devices? "([^"]*)" on GPUs? "([^"]*)"$`, podBoundToMIG)
	sc.Step(`^the MIG device "([^"]*)" of node (\d+) is locked by pod "([^"]*)" alone, and GPU (\d+) by no whole-GPU lease$`, migLocked)
	sc.Step(`^the agent of node (\d+) reports MIG device "([^"]*)" in use by pod "([^"]*)"$`, migInUse)
	sc.Step(`^MIG device "([^"]*)" of node (\d+) is reported (Healthy|Unhealthy|Unknown)$`, migReported)
}

// podBoundToMIG waits until the pod is bound with its leases and claim status recorded
// (waitBound: a lease per MIG device, the claim's migDevices), and checks its MIG devices and
// the GPUs its allocation names.
func podBoundToMIG(ctx context.Context, name, devs, ids string) error {
	st := state(ctx)
	a, err := st.waitBound(ctx, name)
	if err != nil {
		return err
	}
	pod, err := st.getPod(ctx, name)
	if err != nil {
		return err
	}
	if got := pod.Annotations[apiv1.AnnotationMIGDevices]; got != devs || apiv1.FormatIDs(a.IDs) != ids {
		return fmt.Errorf("pod %s got MIG devices %q on GPUs %s of node %s, want MIG devices %q on GPUs %s", name, got, apiv1.FormatIDs(a.IDs), a.Node, devs, ids)
	}
	return nil
}

// migRef parses one "<gpu>:<slot>".
func migRef(dev string) (apiv1.MIGDeviceRef, error) {
	refs, err := apiv1.ParseMIGDevices(dev)
	if err != nil {
		return apiv1.MIGDeviceRef{}, fmt.Errorf("%q is not one MIG device <gpu>:<slot>: %w", dev, err)
	}
	if len(refs) != 1 {
		return apiv1.MIGDeviceRef{}, fmt.Errorf("%q names %d MIG devices; want one <gpu>:<slot>", dev, len(refs))
	}
	return refs[0], nil
}

// migLocked checks the MIG device's lease (name, labels, holder) and that its GPU has no
// whole-GPU lease.
func migLocked(ctx context.Context, dev string, node int, pod string, gpu int) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	ref, err := migRef(dev)
	if err != nil {
		return err
	}
	uid, err := st.podUID(pod)
	if err != nil {
		return err
	}
	lname, err := apiv1.MIGLeaseName(name, ref.GPU, ref.Slot)
	if err != nil {
		return err
	}
	l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, lname, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the lease of MIG device %s: %w", dev, err)
	}
	if h := holders(l); !slices.Equal(h, []string{string(uid)}) || l.Labels[apiv1.LabelLeaseNode] != name ||
		l.Labels[apiv1.LabelLeaseGPU] != fmt.Sprint(ref.GPU) || l.Labels[apiv1.LabelLeaseMIGSlot] != fmt.Sprint(ref.Slot) {
		return fmt.Errorf("lease %s: holders %v, labels %v; want pod %s (%s) alone, labelled node %s, GPU %d, slot %d", lname, h, l.Labels, pod, uid, name, ref.GPU, ref.Slot)
	}
	whole, err := apiv1.LeaseName(name, gpu)
	if err != nil {
		return err
	}
	_, err = st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, whole, metav1.GetOptions{})
	switch {
	case err == nil:
		return fmt.Errorf("GPU %d of node %s, in MIG mode, has a whole-GPU lease %s", gpu, name, whole)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading lease %s: %w", whole, err)
	}
	return nil
}

// migDevice finds a MIG device in a node's GpuNodeStatus.
func (st *scenario) migDevice(ctx context.Context, node int, dev string) (*apiv1.MigDevice, string, error) {
	name, err := st.node(node)
	if err != nil {
		return nil, "", err
	}
	ref, err := migRef(dev)
	if err != nil {
		return nil, "", err
	}
	g, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err.Error(), nil
	}
	for _, d := range g.Status.Devices {
		if int(d.ID) != ref.GPU || d.MIG == nil {
			continue
		}
		for i := range d.MIG.Devices {
			if int(d.MIG.Devices[i].Slot) == ref.Slot {
				return &d.MIG.Devices[i], describeNodeStatus(g), nil
			}
		}
	}
	return nil, describeNodeStatus(g), nil
}

// migInUse waits until the agent's GpuNodeStatus lists the pod as the MIG device's holder:
// it reads the MIG lease as the device's, not its GPU's.
func migInUse(ctx context.Context, node int, dev, pod string) error {
	st := state(ctx)
	uid, err := st.podUID(pod)
	if err != nil {
		return err
	}
	return eventually(ctx, waitSlow, fmt.Sprintf("MIG device %s of node %d in use by pod %s", dev, node, pod), func(ctx context.Context) (bool, string, error) {
		d, why, err := st.migDevice(ctx, node, dev)
		if err != nil || d == nil {
			return false, why, err
		}
		return slices.Equal(d.InUseBy, []string{string(uid)}), why, nil
	})
}

func migReported(ctx context.Context, dev string, node int, health string) error {
	st := state(ctx)
	return eventually(ctx, waitSlow, fmt.Sprintf("MIG device %s of node %d %s", dev, node, health), func(ctx context.Context) (bool, string, error) {
		d, why, err := st.migDevice(ctx, node, dev)
		if err != nil || d == nil {
			return false, why, err
		}
		return string(d.Health) == health, why, nil
	})
}

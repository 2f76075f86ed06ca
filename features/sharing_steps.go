package features

import (
	"context"
	"fmt"
	"slices"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func registerSharingSteps(sc *godog.ScenarioContext) {
	sc.Step(`^the lease of GPU (\d+) of node (\d+) records the shares of pods? ((?:"[^"]*"(?:, | and )?)+) alone$`, leaseRecordsShares)
	sc.Step(`^(\d+) pods each claim a Shared GPU with (\d+) % of its memory$`, batchShared)
	sc.Step(`^no GPU's shares over-commit its memory or compute$`, noOverCommit)
}

func batchShared(ctx context.Context, n, percent int) error {
	return state(ctx).batchOf(ctx, n, apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1, Exclusivity: apiv1.Shared, Share: &apiv1.GPUShare{MemoryPercent: int32(percent)}}})
}

// noOverCommit checks every Shared GPU lease of the scenario's nodes: the shares of its
// holders sum to at most the GPU's memory (its GpuNodeStatus) and 100 % compute, and every
// holder has its share listed.
func noOverCommit(ctx context.Context) error {
	st := state(ctx)
	leases, err := st.nodeLeases(ctx)
	if err != nil {
		return err
	}
	for i := range leases {
		l := &leases[i]
		if l.Labels[apiv1.LabelLeaseShared] != "true" {
			continue
		}
		shares, err := apiv1.ParseLeaseShares(l.Annotations[apiv1.AnnotationLeaseShares])
		if err != nil {
			return fmt.Errorf("lease %s: %w", l.Name, err)
		}
		node, id, ok := apiv1.ParseLeaseName(l.Name)
		if !ok {
			return fmt.Errorf("lease %s has no GPU lease name", l.Name)
		}
		gns, err := st.suite.gpu.GpuV1().GpuNodeStatuses().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the GpuNodeStatus of %s: %w", node, err)
		}
		var capacity int64
		for _, d := range gns.Status.Devices {
			if int(d.ID) == id {
				capacity = d.MemoryMiB
			}
		}
		var mem int64
		var compute int32
		for _, h := range holders(l) {
			s, listed := shares[h]
			if !listed {
				return fmt.Errorf("lease %s: holder %s has no share listed in %q", l.Name, h, l.Annotations[apiv1.AnnotationLeaseShares])
			}
			mem += s.MemoryMiB
			compute += s.ComputePercent
		}
		if mem > capacity || compute > 100 {
			return fmt.Errorf("lease %s over-commits GPU %d of %s: %d of %d MiB, %d %% compute (%s)", l.Name, id, node, mem, capacity, compute, l.Annotations[apiv1.AnnotationLeaseShares])
		}
	}
	return nil
}

// leaseRecordsShares waits until the lease of a Shared GPU names exactly the given pods as
// holders and lists exactly their shares (gpu.scheduling/shares), each with memory reserved.
func leaseRecordsShares(ctx context.Context, gpu, node int, list string) error {
	st := state(ctx)
	name, err := st.node(node)
	if err != nil {
		return err
	}
	leaseName, err := apiv1.LeaseName(name, gpu)
	if err != nil {
		return err
	}
	var want []string
	for _, p := range quoted(list) {
		uid, err := st.podUID(p)
		if err != nil {
			return err
		}
		want = append(want, string(uid))
	}
	slices.Sort(want)
	return eventually(ctx, waitBound, "lease "+leaseName+" records the shares of "+list, func(ctx context.Context) (bool, string, error) {
		l, err := st.suite.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		shares, err := apiv1.ParseLeaseShares(l.Annotations[apiv1.AnnotationLeaseShares])
		if err != nil {
			return false, err.Error(), nil
		}
		var got []string
		for uid, s := range shares {
			if s.MemoryMiB <= 0 {
				return false, fmt.Sprintf("holder %s has no memory share: %s", uid, l.Annotations[apiv1.AnnotationLeaseShares]), nil
			}
			got = append(got, uid)
		}
		slices.Sort(got)
		holders := holders(l)
		slices.Sort(holders)
		ok := slices.Equal(got, want) && slices.Equal(holders, want)
		return ok, fmt.Sprintf("holders %v, shares %q; want %v", holders, l.Annotations[apiv1.AnnotationLeaseShares], want), nil
	})
}

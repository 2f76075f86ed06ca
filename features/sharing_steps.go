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

package features

import (
	"context"
	"fmt"

	"github.com/cucumber/godog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Steps of gangs placed inside a topology domain (domains.feature).
func registerDomainSteps(sc *godog.ScenarioContext) {
	sc.Step(`^pods ((?:"[^"]*"(?:, | and )?)+) each claim:$`, podsEachClaimSpec)
	sc.Step(`^pods? ((?:"[^"]*"(?:, | and )?)+) runs? on (?:a node|nodes) labelled "([^"]*)"$`, podsOnNodesLabelled)
	sc.Step(`^pods ((?:"[^"]*"(?:, | and )?)+) hold no GPU$`, podsHoldNoGPU)
}

// podsEachClaimSpec creates, for each pod, its own claim with the spec.
func podsEachClaimSpec(ctx context.Context, list string, doc *godog.DocString) error {
	spec, err := parseClaimSpec(doc.Content)
	if err != nil {
		return err
	}
	st := state(ctx)
	for _, name := range quoted(list) {
		if err := st.claimAndPod(ctx, name, *spec.DeepCopy(), podOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// podsOnNodesLabelled checks that each bound pod's node carries the label key=value.
func podsOnNodesLabelled(ctx context.Context, list, label string) error {
	key, value, err := splitLabel(label)
	if err != nil {
		return err
	}
	st := state(ctx)
	for _, name := range quoted(list) {
		alloc, err := st.waitBound(ctx, name)
		if err != nil {
			return err
		}
		node, err := st.suite.kube.CoreV1().Nodes().Get(ctx, alloc.Node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s of pod %s: %w", alloc.Node, name, err)
		}
		if got, ok := node.Labels[key]; !ok || got != value {
			return fmt.Errorf("pod %s runs on node %s whose %s is %q, want %q", name, alloc.Node, key, got, value)
		}
	}
	return nil
}

// podsHoldNoGPU checks that the pods are not bound and that no GPU lease names them.
func podsHoldNoGPU(ctx context.Context, list string) error {
	st := state(ctx)
	leases, err := st.nodeLeases(ctx)
	if err != nil {
		return err
	}
	for _, name := range quoted(list) {
		pod, err := st.getPod(ctx, name)
		if err != nil {
			return err
		}
		if pod.Spec.NodeName != "" {
			return fmt.Errorf("pod %s is bound to node %s", name, pod.Spec.NodeName)
		}
		for i := range leases {
			if leases[i].Labels[apiv1.LabelPodName] == name {
				return fmt.Errorf("pod %s holds GPU lease %s", name, leases[i].Name)
			}
		}
	}
	return nil
}

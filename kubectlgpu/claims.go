package kubectlgpu

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func newClaimsCommand(o *Options) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:               "claims [CLAIM...]",
		Short:             "GpuClaims: phase, node, GPU IDs, age and the reason when Pending",
		ValidArgsFunction: o.completeNames(gpuClaims, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			all, err := o.loadClaims(cmd.Context())
			if err != nil {
				return err
			}
			claims, err := named(all, args, "GpuClaim", func(c apiv1.GpuClaim) string { return c.Name })
			if err != nil {
				return err
			}
			if claims, err = labelled(claims, selector, func(c apiv1.GpuClaim) map[string]string { return c.Labels }); err != nil {
				return err
			}
			if done, err := o.printData(o.IO.Out, "gpuclaim", claims); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.tableOut(o.IO.Out), 0, 4, 2, ' ', 0)
			head := "NAMESPACE\tNAME\tPHASE\tCOUNT\tNODE\tGPUS\tAGE\tMESSAGE"
			if o.Output == "wide" {
				head += "\tPOD"
			}
			fmt.Fprintln(w, head)
			for _, c := range claims {
				phase := string(c.Status.Phase)
				if phase == "" {
					phase = "Pending"
				}
				line := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", c.Namespace, c.Name, phase, c.Spec.Devices.Count,
					dash(c.Status.NodeName), dash(joinIDs(c.Status.GpuIDs)),
					duration.HumanDuration(time.Since(c.CreationTimestamp.Time)), dash(c.Status.Message))
				if o.Output == "wide" {
					line += "\t" + dash(c.Status.PodName)
				}
				fmt.Fprintln(w, line)
			}
			return w.Flush()
		},
	}
	addSelectorFlag(cmd, &selector)
	return cmd
}

// named keeps the items whose name is in names (every item when names is empty), in their
// order; a name that matches none is an error naming kind.
func named[T any](items []T, names []string, kind string, name func(T) string) ([]T, error) {
	if len(names) == 0 {
		return items, nil
	}
	out := []T{}
	for _, n := range names {
		found := false
		for _, it := range items {
			if name(it) == n {
				out = append(out, it)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%s %q not found", kind, n)
		}
	}
	return out, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// addSelectorFlag adds kubectl's -l/--selector to a listing command.
func addSelectorFlag(cmd *cobra.Command, selector *string) {
	cmd.Flags().StringVarP(selector, "selector", "l", "", "label selector to filter on, as kubectl's (-l key=value,key2!=v2,key3 in (a,b))")
}

// labelled keeps the items whose labels match the selector (every item when it is empty).
func labelled[T any](items []T, selector string, labelsOf func(T) map[string]string) ([]T, error) {
	if selector == "" {
		return items, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("--selector %q: %w", selector, err)
	}
	out := []T{}
	for _, it := range items {
		if sel.Matches(labels.Set(labelsOf(it))) {
			out = append(out, it)
		}
	}
	return out, nil
}

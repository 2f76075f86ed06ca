package kubectlgpu

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func newWorkloadsCommand(o *Options) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:               "workloads [WORKLOAD...]",
		Short:             "GpuWorkloads: phase, ready replicas, GPUs, nodes, age and what happened last",
		ValidArgsFunction: o.completeNames(gpuWorkloads, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, dc, err := o.clients()
			if err != nil {
				return err
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			var ws []apiv1.GpuWorkload
			if err := listCustom(cmd.Context(), dc, "gpuworkloads", ns, &ws); err != nil {
				return err
			}
			sort.Slice(ws, func(i, j int) bool {
				if ws[i].Namespace != ws[j].Namespace {
					return ws[i].Namespace < ws[j].Namespace
				}
				return ws[i].Name < ws[j].Name
			})
			if ws == nil {
				ws = []apiv1.GpuWorkload{}
			}
			if ws, err = named(ws, args, "GpuWorkload", func(w apiv1.GpuWorkload) string { return w.Name }); err != nil {
				return err
			}
			if ws, err = labelled(ws, selector, func(w apiv1.GpuWorkload) map[string]string { return w.Labels }); err != nil {
				return err
			}
			if done, err := o.printData(o.IO.Out, "gpuworkload", ws); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.tableOut(o.IO.Out), 0, 4, 2, ' ', 0)
			head := "NAMESPACE\tNAME\tPHASE\tREADY\tGPUS\tNODES\tAGE\tMESSAGE"
			if o.Output == "wide" {
				head += "\tGANG\tRETRIES\tCLAIM"
			}
			fmt.Fprintln(w, head)
			for _, wl := range ws {
				phase := string(wl.Status.Phase)
				if phase == "" {
					phase = string(apiv1.WorkloadPending)
				}
				ready := wl.Status.Ready
				if ready == "" {
					ready = fmt.Sprintf("%d/%d", wl.Status.ReadyReplicas, wl.Spec.WorkloadReplicas())
				}
				line := fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", wl.Namespace, wl.Name, phase, ready, wl.Status.GPUs,
					dash(strings.Join(wl.Status.Nodes, ",")), duration.HumanDuration(time.Since(wl.CreationTimestamp.Time)), dash(oneLine(wl.Status.Message)))
				if o.Output == "wide" {
					claim := "template " + wl.Spec.Claim.TemplateName
					if s := wl.Spec.Claim.Spec; s != nil {
						claim = fmt.Sprintf("%d GPUs each", s.Devices.Count)
					}
					line += fmt.Sprintf("\t%t\t%d\t%s", wl.Spec.Gang, wl.Status.Retries, claim)
				}
				fmt.Fprintln(w, line)
			}
			return w.Flush()
		},
	}
	addSelectorFlag(cmd, &selector)
	return cmd
}

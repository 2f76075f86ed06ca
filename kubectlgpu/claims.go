package kubectlgpu

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
)

func newClaimsCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "claims",
		Short: "GpuClaims: phase, node, GPU IDs, age and the reason when Pending",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			if done, err := o.printData(o.IO.Out, f.Claims); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
			head := "NAMESPACE\tNAME\tPHASE\tCOUNT\tNODE\tGPUS\tAGE\tMESSAGE"
			if o.Output == "wide" {
				head += "\tPOD"
			}
			fmt.Fprintln(w, head)
			for _, c := range f.Claims {
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
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package kubectlgpu

import (
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newStatusCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "GPUs total, allocated, free and unhealthy per model and node pool; claims by phase; fragmentation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			f.Notes.print(o.IO.ErrOut)
			s := Summarise(f)
			if done, err := o.printData(o.IO.Out, "model", s); done || err != nil {
				return err
			}
			w := tabwriter.NewWriter(o.tableOut(o.IO.Out), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "MODEL\tPOOL\tNODES\tTOTAL\tALLOCATED\tFREE\tUNHEALTHY")
			for _, r := range s.Rows {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", r.Model, r.Pool, r.Nodes, r.Total, r.Allocated, r.Free, r.Unhealthy)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			phases := make([]string, 0, len(s.ClaimsByPhase))
			for p := range s.ClaimsByPhase {
				phases = append(phases, p)
			}
			sort.Strings(phases)
			fmt.Fprint(o.IO.Out, "\nClaims:")
			if len(phases) == 0 {
				fmt.Fprint(o.IO.Out, " none")
			}
			for _, p := range phases {
				fmt.Fprintf(o.IO.Out, " %s=%d", p, s.ClaimsByPhase[p])
			}
			fmt.Fprintf(o.IO.Out, "\nFragmentation: %d free GPUs in partly used islands\n", s.Fragmented)
			return nil
		},
	}
}

package kubectlgpu

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// UnhealthyGPU is one GPU the agent reports as not Healthy.
type UnhealthyGPU struct {
	Node   string `json:"node"`
	ID     int    `json:"id"`
	Model  string `json:"model,omitempty"`
	Health string `json:"health"`
	Reason string `json:"reason,omitempty"`
	Holder string `json:"holder,omitempty"`
}

// Unhealthy lists every GPU that is not Healthy, in node and ID order.
func Unhealthy(nodes []NodeView) []UnhealthyGPU {
	out := []UnhealthyGPU{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if g.Health == "Healthy" {
				continue
			}
			u := UnhealthyGPU{Node: n.Name, ID: g.ID, Model: g.Product, Health: g.Health, Reason: g.Reason}
			if len(g.Holders) > 0 {
				u.Holder = g.Holders[0]
			}
			out = append(out, u)
		}
	}
	return out
}

func newHealthCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "GPUs that are not Healthy, with the agent's reason (Xid, ECC) and the pod still holding them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			bad := Unhealthy(f.Nodes)
			if done, err := o.printData(o.IO.Out, bad); done || err != nil {
				return err
			}
			if len(bad) == 0 {
				fmt.Fprintln(o.IO.Out, "All GPUs are Healthy.")
				return nil
			}
			w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tGPU\tMODEL\tHEALTH\tREASON\tHOLDER")
			for _, u := range bad {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", u.Node, u.ID, dash(u.Model), u.Health, dash(u.Reason), dash(u.Holder))
			}
			return w.Flush()
		},
	}
}

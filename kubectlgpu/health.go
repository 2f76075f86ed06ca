package kubectlgpu

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// UnhealthyGPU is one GPU the agent reports as not Healthy (or, with --recovered, one that
// recovered before).
type UnhealthyGPU struct {
	Node   string `json:"node"`
	ID     int    `json:"id"`
	Model  string `json:"model,omitempty"`
	Health string `json:"health"`
	Reason string `json:"reason,omitempty"`
	Holder string `json:"holder,omitempty"`
	// Since is when the GPU's health last changed, as the agent saw it; nil when unknown.
	Since *metav1.Time `json:"since,omitempty"`
	// Recoveries is how often the GPU became Healthy again after being Unhealthy.
	Recoveries int32 `json:"recoveries"`
}

// Unhealthy lists every GPU that is not Healthy, in node and ID order; with recovered, also
// the Healthy GPUs that recovered at least once (a GPU that keeps failing and coming back).
func Unhealthy(nodes []NodeView, recovered bool) []UnhealthyGPU {
	out := []UnhealthyGPU{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			if g.Health == "Healthy" && !(recovered && g.Recoveries > 0) {
				continue
			}
			u := UnhealthyGPU{Node: n.Name, ID: g.ID, Model: g.Product, Health: g.Health, Reason: g.Reason,
				Since: g.Since, Recoveries: g.Recoveries}
			if len(g.Holders) > 0 {
				u.Holder = g.Holders[0]
			}
			out = append(out, u)
		}
	}
	return out
}

func newHealthCommand(o *Options) *cobra.Command {
	var recovered bool
	cmd := &cobra.Command{
		Use:   "health [NODE...]",
		Short: "GPUs that are not Healthy: the agent's reason (Xid, ECC), since when, how often they recovered, and the pod still holding them",
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			f.Notes.print(o.IO.ErrOut)
			nodes := f.Nodes
			if !f.NodesHidden {
				if nodes, err = selectNodes(f.Nodes, args); err != nil {
					return err
				}
			}
			bad := Unhealthy(nodes, recovered)
			if done, err := o.printData(o.IO.Out, "gpu", bad); done || err != nil {
				return err
			}
			if f.NodesHidden {
				// "All GPUs are Healthy" would claim what the user cannot see.
				return nil
			}
			return printUnhealthy(o.tableOut(o.IO.Out), bad, recovered, time.Now())
		},
		ValidArgsFunction: o.completeNodes,
	}
	cmd.Flags().BoolVar(&recovered, "recovered", false, "also list Healthy GPUs that recovered at least once")
	return cmd
}

// selectNodes keeps the nodes named in names (all of them when names is empty); a name with
// no GpuNodeStatus is an error.
func selectNodes(nodes []NodeView, names []string) ([]NodeView, error) {
	if len(names) == 0 {
		return nodes, nil
	}
	var out []NodeView
	for _, name := range names {
		i := slices.IndexFunc(nodes, func(n NodeView) bool { return n.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("node %q has no GpuNodeStatus", name)
		}
		out = append(out, nodes[i])
	}
	return out, nil
}

// printUnhealthy writes the health table; SINCE is an age as kubectl prints ages, and
// <unknown> where the agent recorded no time.
func printUnhealthy(out io.Writer, bad []UnhealthyGPU, recovered bool, now time.Time) error {
	if len(bad) == 0 {
		if recovered {
			fmt.Fprintln(out, "All GPUs are Healthy and none has recovered from a fault.")
		} else {
			fmt.Fprintln(out, "All GPUs are Healthy.")
		}
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tGPU\tMODEL\tHEALTH\tSINCE\tRECOVERIES\tREASON\tHOLDER")
	for _, u := range bad {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", u.Node, u.ID, dash(u.Model), u.Health, age(u.Since, now),
			u.Recoveries, dash(u.Reason), dash(u.Holder))
	}
	return w.Flush()
}

// age is how long ago t was, as kubectl prints ages ("5m", "3h2m", "4d").
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

package kubectlgpu

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newNodesCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:               "nodes [NODE]",
		Short:             "Per-node GPU map: islands, holders, health, link bandwidth",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeOneNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			f.Notes.print(o.IO.ErrOut)
			nodes := f.Nodes
			if len(args) == 1 && !f.NodesHidden {
				nodes = nil
				for _, n := range f.Nodes {
					if n.Name == args[0] {
						nodes = append(nodes, n)
					}
				}
				if len(nodes) == 0 {
					return fmt.Errorf("node %q has no GpuNodeStatus", args[0])
				}
			}
			if done, err := o.printData(o.IO.Out, "node", nodes); done || err != nil {
				return err
			}
			return printNodes(o.tableOut(o.IO.Out), nodes, o.Output == "wide", isTerminal(o.IO.Out), time.Now())
		},
	}
}

// shareCell is a GPU's SHARE: its sharers with the memory and compute their shares reserve,
// or its MIG devices free of all; "-" for a GPU neither shared nor in MIG mode.
func shareCell(g GPUView) string {
	switch {
	case g.MIG != nil:
		return fmt.Sprintf("mig %d/%d free", g.MIG.Free, g.MIG.Total)
	case g.Sharers > 0:
		mem := fmt.Sprintf("%d MiB", g.SharedMemoryMiB)
		if g.MemoryMiB > 0 {
			mem = fmt.Sprintf("%d/%d MiB", g.SharedMemoryMiB, g.MemoryMiB)
		}
		return fmt.Sprintf("%d sharers, %s, %d%% compute", g.Sharers, mem, g.SharedComputePercent)
	}
	return "-"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printNodes writes one line per GPU, grouped by node and island; colour marks free (green),
// held (yellow) and unhealthy (red) GPUs on a terminal only. Wide output adds the ages of the
// node's status heartbeat and of its agent's last liveness lease renewal (now - then).
func printNodes(out io.Writer, nodes []NodeView, wide, colour bool, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "NODE\tISLAND\tGPU\tSTATE\tHOLDER\tLINK"
	// The SHARE column is there only where some GPU is shared or in MIG mode.
	parts := false
	for _, n := range nodes {
		for _, g := range n.GPUs {
			parts = parts || g.Sharers > 0 || g.MIG != nil
		}
	}
	if parts {
		head += "\tSHARE"
	}
	if wide {
		head += "\tMODEL\tREASON\tHEARTBEAT\tLIVENESS"
	}
	fmt.Fprintln(w, head)
	for _, n := range nodes {
		for _, g := range n.GPUs {
			state, code := "free", "32"
			switch {
			case g.Health != "Healthy":
				state, code = strings.ToLower(g.Health), "31"
			case len(g.Holders) > 0:
				state, code = "held", "33"
			}
			if colour {
				state = "\x1b[" + code + "m" + state + "\x1b[0m"
			}
			holder := strings.Join(g.Holders, ",")
			if holder == "" {
				holder = "-"
			}
			island := g.Island
			if island == "" {
				island = "-"
			}
			line := fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%dGB/s", n.Name, island, g.ID, state, holder, g.BandwidthGBps)
			if parts {
				line += "\t" + shareCell(g)
			}
			if wide {
				reason := g.Reason
				if reason == "" {
					reason = "-"
				}
				line += "\t" + g.Product + "\t" + reason + "\t" + age(n.Heartbeat, now) + "\t" + age(n.Renewed, now)
			}
			fmt.Fprintln(w, line)
		}
	}
	return w.Flush()
}

package main

import (
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

type benchOptions struct {
	nodes       int
	step        int
	gpusPerNode int
	settle      time.Duration
}

// newClusterBenchCommand measures the harness itself: time for the control plane to be ready,
// time for batches of fake nodes to be Ready, and each process's memory. It reports figures and
// asserts nothing.
func newClusterBenchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure control-plane start time, time for N fake GPU nodes to be Ready, and RSS per process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			began := time.Now()
			c, err := cluster.Start(ctx, cluster.Config{Name: "bench", StockScheduler: true})
			if err != nil {
				return err
			}
			defer func() { _ = c.Stop() }()
			fmt.Printf("control plane ready in %s\n", time.Since(began).Round(time.Millisecond))
			printRSS(c, "idle")

			created := 0
			for batch := 0; created < o.nodes; batch++ {
				n := min(o.step, o.nodes-created)
				pool := cluster.NodePool{Name: fmt.Sprintf("bench%d", batch), Count: n, GPUsPerNode: o.gpusPerNode, Topology: "dgx-a100"}
				t := time.Now()
				if err := c.CreateNodePool(ctx, pool); err != nil {
					return err
				}
				createdIn := time.Since(t)
				if err := c.WaitNodesReady(ctx, cluster.PoolSelector(pool.Name), n, 5*time.Minute); err != nil {
					return err
				}
				created += n
				fmt.Printf("%d more nodes (%d total): created in %s, all Ready in %s\n", n, created,
					createdIn.Round(time.Millisecond), time.Since(t).Round(time.Millisecond))
			}
			if o.settle > 0 {
				// Steady state with all nodes: lease renewals and heartbeats only.
				select {
				case <-time.After(o.settle):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			printRSS(c, fmt.Sprintf("%d nodes", created))
			return nil
		},
	}
	cmd.Flags().IntVar(&o.nodes, "nodes", 5000, "total fake GPU nodes to create")
	cmd.Flags().IntVar(&o.step, "step", 1000, "nodes per batch; each batch is timed until all its nodes are Ready")
	cmd.Flags().IntVar(&o.gpusPerNode, "gpus-per-node", 8, "nvidia.com/gpu per node")
	cmd.Flags().DurationVar(&o.settle, "settle", 10*time.Second, "time to let the cluster settle before the final memory reading")
	return cmd
}

func printRSS(c *cluster.Cluster, when string) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "RSS (%s)\tPID\tMiB\n", when)
	var total int64
	for _, p := range c.Processes() {
		fmt.Fprintf(w, "  %s\t%d\t%d\n", p.Name, p.PID, p.RSSBytes>>20)
		total += p.RSSBytes
	}
	fmt.Fprintf(w, "  total\t\t%d\n", total>>20)
	_ = w.Flush()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

func init() { register(newClusterCommand) }

// clusterFlags are shared by the cluster subcommands.
type clusterFlags struct {
	name     string
	stateDir string
}

// dir is the cluster's state (and work) directory: --state-dir, else _output/cluster/<name> in
// the repository, else <tmp>/gpu-sim-<name>.
func (f *clusterFlags) dir() (string, error) {
	if f.stateDir != "" {
		return filepath.Abs(f.stateDir)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				if _, err := os.Stat(filepath.Join(d, "_output")); err == nil {
					return filepath.Join(d, "_output", "cluster", f.name), nil
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return filepath.Join(os.TempDir(), "gpu-sim-"+f.name), nil
}

func newClusterCommand() *cobra.Command {
	f := &clusterFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start, stop and inspect a local control plane (etcd, kube-apiserver, kube-controller-manager, kwok, kube-scheduler)",
	}
	cmd.PersistentFlags().StringVar(&f.name, "name", "default", "cluster name")
	cmd.PersistentFlags().StringVar(&f.stateDir, "state-dir", "", "directory for the cluster's state, kubeconfig and logs (default _output/cluster/<name>)")
	cmd.AddCommand(newClusterUpCommand(f), newClusterDownCommand(f), newClusterStatusCommand(f), newClusterBenchCommand(),
		newClusterFaultCommand(f))
	return cmd
}

// upCompleteFile is written into the state dir by the foreground process once the cluster and
// its nodes are ready; the detaching `up` waits for it.
const upCompleteFile = "up-complete"

type upOptions struct {
	foreground     bool
	stockScheduler bool
	nodes          int
	gpusPerNode    int
	topology       string
	pool           string
	timeout        time.Duration
	// gpuStack also runs what a GPU cluster runs: the CRDs, the agent fleet, the webhook,
	// gpu-scheduler and gpu-controller (dev.go).
	gpuStack bool
}

func newClusterUpCommand(f *clusterFlags) *cobra.Command {
	o := &upOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a cluster in the background and print its kubeconfig (stop it with `cluster down`)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.dir()
			if err != nil {
				return err
			}
			if err := o.resolveTopology(cmd.Flags().Changed("gpus-per-node")); err != nil {
				return err
			}
			if o.foreground {
				return runForeground(cmd.Context(), f.name, dir, o)
			}
			return upDetached(cmd.Context(), f.name, dir, o)
		},
	}
	cmd.Flags().BoolVar(&o.foreground, "foreground", false, "run the cluster in this process until interrupted")
	cmd.Flags().BoolVar(&o.stockScheduler, "stock-scheduler", true, "also run the stock kube-scheduler")
	cmd.Flags().IntVar(&o.nodes, "nodes", 0, "fake GPU nodes to create once the control plane is up")
	cmd.Flags().IntVar(&o.gpusPerNode, "gpus-per-node", 8, "nvidia.com/gpu capacity of each node")
	cmd.Flags().StringVar(&o.topology, "topology", "dgx-a100", "GPU topology name of the nodes (label gpu.scheduling/topology)")
	cmd.Flags().StringVar(&o.pool, "pool", "gpu", "pool name of the nodes (label gpu.scheduling/pool, node name prefix)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the cluster (and its nodes) to be ready")
	cmd.Flags().BoolVar(&o.gpuStack, "gpu-stack", false, "also install the CRDs and run the agent fleet (gpu-sim agent-fleet), gpu-webhook, gpu-scheduler and gpu-controller; --topology names a preset of scenarios/hardware and sets the GPUs per node")
	return cmd
}

// prepare makes sure no live cluster owns dir and clears what a dead one left behind.
func prepare(ctx context.Context, name, dir string) error {
	if st, err := cluster.ReadState(dir); err == nil {
		if st.OwnerAlive() {
			return fmt.Errorf("cluster %s is already running (pid %d, kubeconfig %s): run \"gpu-sim cluster down --name %s\" first",
				name, st.OwnerPID, st.Kubeconfig, name)
		}
		klog.FromContext(ctx).Info("Cleaning up after a cluster whose process is gone", "cluster", name, "pid", st.OwnerPID)
	}
	// Also clears a directory that has no state file (a start that died before writing one).
	if err := cluster.Teardown(ctx, dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// upDetached starts `gpu-sim cluster up --foreground` as a session leader of its own, so it
// outlives this command and the terminal, and waits until it reports the cluster ready.
func upDetached(ctx context.Context, name, dir string, o *upOptions) error {
	if err := prepare(ctx, name, dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state dir %s: %w", dir, err)
	}
	logPath := filepath.Join(dir, "gpu-sim.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating %s: %w", logPath, err)
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding own executable: %w", err)
	}
	args := []string{"cluster", "up", "--foreground", "--name", name, "--state-dir", dir,
		fmt.Sprintf("--stock-scheduler=%t", o.stockScheduler), fmt.Sprintf("--nodes=%d", o.nodes),
		fmt.Sprintf("--gpus-per-node=%d", o.gpusPerNode), "--topology", o.topology, "--pool", o.pool,
		"--timeout", o.timeout.String(), fmt.Sprintf("--gpu-stack=%t", o.gpuStack)}
	child := exec.Command(self, args...)
	child.Stdout, child.Stderr = logFile, logFile
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return fmt.Errorf("starting the cluster process: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	deadline := time.NewTimer(o.timeout + 30*time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("cluster %s did not come up (%w); its log %s ends:\n%s", name, err, logPath, tail(logPath))
		case <-deadline.C:
			_ = child.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("cluster %s not ready after %s; its log %s ends:\n%s", name, o.timeout, logPath, tail(logPath))
		case <-ctx.Done():
			_ = child.Process.Signal(syscall.SIGTERM)
			return ctx.Err()
		case <-tick.C:
			if _, err := os.Stat(filepath.Join(dir, upCompleteFile)); err == nil {
				st, err := cluster.ReadState(dir)
				if err != nil {
					return err
				}
				fmt.Printf("cluster %s is up (pid %d): %s\nexport KUBECONFIG=%s\n", name, st.OwnerPID, st.Server, st.Kubeconfig)
				return nil
			}
		}
	}
}

// runForeground runs the cluster in this process until the context ends (SIGINT, SIGTERM).
func runForeground(ctx context.Context, name, dir string, o *upOptions) error {
	logger := klog.FromContext(ctx)
	if _, err := cluster.ReadState(dir); err == nil {
		if err := prepare(ctx, name, dir); err != nil {
			return err
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := cluster.Start(startCtx, cluster.Config{Name: name, WorkDir: dir, StockScheduler: o.stockScheduler})
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			logger.Error(err, "Stopping cluster", "cluster", name)
		}
	}()
	if o.nodes > 0 {
		pool := cluster.NodePool{Name: o.pool, Count: o.nodes, GPUsPerNode: o.gpusPerNode, Topology: o.topology}
		if err := c.CreateNodePool(startCtx, pool); err != nil {
			return err
		}
		if err := c.WaitNodesReady(startCtx, cluster.PoolSelector(o.pool), o.nodes, o.timeout); err != nil {
			return err
		}
	}
	if o.gpuStack {
		if err := startGPUStack(startCtx, c, dir, o.nodes); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, upCompleteFile), nil, 0o600); err != nil {
		return fmt.Errorf("marking cluster %s up: %w", name, err)
	}
	fmt.Printf("cluster %s is up: %s\nexport KUBECONFIG=%s\n", name, c.Server(), c.Kubeconfig())
	<-ctx.Done()
	logger.Info("Stopping cluster", "cluster", name)
	return nil
}

func newClusterDownCommand(f *clusterFlags) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a cluster started by `cluster up` and remove its state directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.dir()
			if err != nil {
				return err
			}
			st, err := cluster.ReadState(dir)
			if errors.Is(err, os.ErrNotExist) {
				fmt.Printf("no cluster %s (nothing in %s)\n", f.name, dir)
				return os.RemoveAll(dir)
			}
			if err != nil {
				return err
			}
			// The owner stops its components and removes the directory itself; whatever is
			// still there afterwards (the owner was killed, or did not finish in time) is
			// stopped by PID from the state file.
			if st.OwnerAlive() {
				_ = syscall.Kill(st.OwnerPID, syscall.SIGTERM)
				deadline := time.Now().Add(grace)
				for st.OwnerAlive() && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond) // polling /proc: the owner is not our child
				}
			}
			if err := cluster.Teardown(cmd.Context(), dir); err != nil {
				return err
			}
			if err := os.RemoveAll(dir); err != nil {
				return fmt.Errorf("removing %s: %w", dir, err)
			}
			fmt.Printf("cluster %s stopped\n", f.name)
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", time.Minute, "how long the cluster process gets to stop before its components are killed by PID")
	return cmd
}

func newClusterStatusCommand(f *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show a cluster's processes, memory, readiness and node count; fails when it is not running",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := f.dir()
			if err != nil {
				return err
			}
			st, err := cluster.ReadState(dir)
			if err != nil {
				return fmt.Errorf("no cluster %s: %w", f.name, err)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "cluster\t%s\nowner pid\t%d (%s)\nserver\t%s\nkubeconfig\t%s\n\n", st.Name, st.OwnerPID, aliveWord(st.OwnerAlive()), st.Server, st.Kubeconfig)
			fmt.Fprintln(w, "COMPONENT\tPID\tSTATE\tRSS")
			for _, p := range st.Processes {
				rss := "-"
				if mib, ok := rssMiB(p.PID); ok && st.OwnerAlive() {
					rss = fmt.Sprintf("%d MiB", mib)
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", p.Name, p.PID, aliveWord(cluster.ProcessAlive(p)), rss)
			}
			_ = w.Flush()
			if !st.OwnerAlive() {
				return fmt.Errorf("cluster %s is not running (its process %d is gone): run \"gpu-sim cluster down --name %s\" to clean up", f.name, st.OwnerPID, f.name)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
			if err != nil {
				return err
			}
			cfg.Timeout = 5 * time.Second
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(cmd.Context()); err != nil {
				return fmt.Errorf("cluster %s: apiserver not ready: %w", f.name, err)
			}
			nodes, err := cs.CoreV1().Nodes().List(cmd.Context(), metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return fmt.Errorf("cluster %s: listing nodes: %w", f.name, err)
			}
			ready := 0
			for i := range nodes.Items {
				if cluster.NodeSchedulable(&nodes.Items[i]) {
					ready++
				}
			}
			fmt.Printf("\napiserver ready; nodes: %d, %d Ready\n", len(nodes.Items), ready)
			return nil
		},
	}
}

func aliveWord(ok bool) string {
	if ok {
		return "running"
	}
	return "gone"
}

func rssMiB(pid int) (int64, bool) {
	b, err := cluster.RSS(pid)
	if err != nil {
		return 0, false
	}
	return b >> 20, true
}

func tail(path string) string { return cluster.TailFile(path, 30) }

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/report"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func init() { register(newRunCommand) }

type runOptions struct {
	noBaseline bool
	reports    string
	validate   bool
	cpuProfile bool
	profile    bool
	// kubeconfig and baselineKubeconfig select existing clusters instead of the harness one.
	kubeconfig         string
	baselineKubeconfig string
	// dra, when the flag was given, overrides the scenario's spec.baseline.dra.
	dra *bool
}

// runnerOptions turns the flags into the runner's options and checks their combination.
func (o *runOptions) runnerOptions(s *scenario.Scenario) (runner.Options, error) {
	ro := runner.Options{
		Scenario: s, Baseline: !o.noBaseline, StartFleet: runner.StartInProcessFleet,
		Kubeconfig: o.kubeconfig, BaselineKubeconfig: o.baselineKubeconfig, DRA: o.dra, Profile: o.profile,
	}
	for _, p := range []string{o.kubeconfig, o.baselineKubeconfig} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return ro, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	_, err := ro.Targets()
	return ro, err
}

// quietLogs sends gpu-sim's own log (the in-process agent fleet logs a line per node, 5,000
// at scale-5k) to gpu-sim.log in the report directory, so that the terminal shows only the
// progress bar, the phase lines and the table. --logtostderr or --alsologtostderr given on the
// command line keep klog's usual output instead.
func quietLogs(cmd *cobra.Command, dir string) (*os.File, error) {
	for _, name := range []string{"logtostderr", "alsologtostderr"} {
		if f := cmd.Flag(name); f != nil && f.Changed {
			return nil, nil
		}
	}
	f, err := os.Create(filepath.Join(dir, "gpu-sim.log"))
	if err != nil {
		return nil, fmt.Errorf("creating the log file: %w", err)
	}
	// Where klog's backend writes is process-wide and has no contextual form.
	klog.LogToStderr(false) //nolint:logcheck // see above
	klog.SetOutput(f)       //nolint:logcheck // see above
	if t := cmd.Flag("stderrthreshold"); t != nil && !t.Changed {
		// Errors too: a run that is cancelled ends 5,000 agents, each with an error line.
		if err := t.Value.Set("FATAL"); err != nil {
			return nil, fmt.Errorf("setting -stderrthreshold: %w", err)
		}
	}
	return f, nil
}

// newRunCommand is the simulator: `gpu-sim run scenarios/quickstart.yaml`.
func newRunCommand() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run SCENARIO.yaml",
		Short: "Play a scenario with gpu-scheduler and the stock kube-scheduler on a local control plane and report",
		Long: `run brings up a local control plane (etcd, kube-apiserver, kube-controller-manager, kwok),
creates the scenario's kwok GPU nodes, starts the production agent fleet, webhook and
gpu-scheduler, plays the workload and faults, and measures; then removes everything that run
made but the nodes and does the same on that control plane with the stock kube-scheduler (pods
asking for nvidia.com/gpu), and with spec.baseline.dra or --dra a third time with the stock
kube-scheduler allocating the GPUs through Dynamic Resource Allocation (ResourceSlices,
ResourceClaimTemplates). It prints a table and writes
reports/<scenario>-<time>/report.{json,html} with the components' logs. Ctrl-C tears down.

With --kubeconfig it starts no control plane and runs against that existing cluster, which must
run kwok (kwokctl create cluster, or gpu-sim cluster up) and a kube-scheduler and hold no GPU
nodes of its own; it removes only what it created (its nodes, namespaces, leases, CRDs and
webhook configurations that were not there before). The stock baseline then runs on the same
cluster after that cleanup, or on a second cluster given with --baseline-kubeconfig.
The exit status is 1 when an expectation of the scenario fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := scenario.LoadFile(args[0])
			if err != nil {
				return err
			}
			if o.validate {
				sum := scenario.Summarize(scenario.Expand(s))
				nodes, gpus := s.TotalNodes()
				fmt.Printf("%s is valid: %d nodes, %d GPUs, %d pods asking for %d GPUs over %s\n", args[0], nodes, gpus, sum.Pods, sum.GPUs, sum.Span)
				return nil
			}
			if cmd.Flags().Changed("dra") {
				v, _ := cmd.Flags().GetBool("dra")
				o.dra = &v
			}
			ro, err := o.runnerOptions(s)
			if err != nil {
				return err
			}
			started := time.Now()
			dir := filepath.Join(o.reports, s.Metadata.Name+"-"+started.Format("20060102-150405"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating report directory %s: %w", dir, err)
			}
			ro.Progress, ro.LogDir = os.Stderr, dir
			logFile, err := quietLogs(cmd, dir)
			if err != nil {
				return err
			}
			if logFile != nil {
				defer func() { klog.Flush(); _ = logFile.Close() }() //nolint:logcheck // the log file is closed: flush klog's backend into it first
			}
			if o.cpuProfile {
				// gpu-sim hosts the whole agent fleet: at 5,000 nodes its CPU matters.
				f, err := os.Create(filepath.Join(dir, "gpu-sim.cpu.pprof"))
				if err != nil {
					return fmt.Errorf("creating the CPU profile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("starting the CPU profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			runs, err := runner.Run(cmd.Context(), ro)
			if err != nil {
				return fmt.Errorf("%w (component logs in %s)", err, dir)
			}
			rep := report.Build(s, args[0], runs, started, time.Since(started))
			rep.Table(os.Stdout)
			if err := rep.WriteJSON(filepath.Join(dir, "report.json")); err != nil {
				return err
			}
			if err := rep.WriteHTML(filepath.Join(dir, "report.html")); err != nil {
				return err
			}
			fmt.Printf("report: %s\n", filepath.Join(dir, "report.html"))
			if !rep.Passed() {
				return fmt.Errorf("scenario %s: expectations failed", s.Metadata.Name)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.noBaseline, "no-baseline", false, "skip the stock kube-scheduler runs (nvidia.com/gpu and DRA)")
	cmd.Flags().Bool("dra", false, "also run the stock kube-scheduler with Dynamic Resource Allocation (--dra=false: not even if the scenario's spec.baseline.dra asks); default: the scenario's spec.baseline.dra")
	cmd.Flags().StringVar(&o.reports, "reports", "reports", "directory for the reports")
	cmd.Flags().BoolVar(&o.validate, "validate", false, "only load and validate the scenario")
	cmd.Flags().BoolVar(&o.cpuProfile, "cpuprofile", false, "write a CPU profile of gpu-sim itself (which runs the agent fleet) to gpu-sim.cpu.pprof in the report directory")
	cmd.Flags().BoolVar(&o.profile, "profile", false, "profile the kube-apiserver, the scheduler and gpu-sim during each workload (profiles-*/ in the report directory) and split their CPU per bound pod by cause in the report")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "run against this existing cluster (it must run kwok) instead of starting a local control plane")
	cmd.Flags().StringVar(&o.baselineKubeconfig, "baseline-kubeconfig", "", "with --kubeconfig: run the stock baseline on this second existing cluster (default: the same cluster, after cleanup)")
	return cmd
}

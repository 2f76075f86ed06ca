package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpu-scheduler/gpu-scheduler/sim/report"
	"github.com/gpu-scheduler/gpu-scheduler/sim/runner"
	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

func init() { register(newRunCommand) }

type runOptions struct {
	noBaseline bool
	reports    string
	validate   bool
}

// newRunCommand is the simulator: `gpu-sim run scenarios/quickstart.yaml`.
func newRunCommand() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run SCENARIO.yaml",
		Short: "Play a scenario with gpu-scheduler and the stock kube-scheduler on fresh local clusters and report",
		Long: `run brings up a local control plane (etcd, kube-apiserver, kube-controller-manager, kwok),
creates the scenario's kwok GPU nodes, starts the production agent fleet, webhook and
gpu-scheduler, plays the workload and faults, and measures; then does the same on a fresh
identical cluster with the stock kube-scheduler. It prints a table and writes
reports/<scenario>-<time>/report.{json,html} with the components' logs. Ctrl-C tears down.
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
			started := time.Now()
			dir := filepath.Join(o.reports, s.Metadata.Name+"-"+started.Format("20060102-150405"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("creating report directory %s: %w", dir, err)
			}
			runs, err := runner.Run(cmd.Context(), runner.Options{
				Scenario: s, Baseline: !o.noBaseline, StartFleet: runner.StartInProcessFleet,
				Progress: os.Stderr, LogDir: dir,
			})
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
	cmd.Flags().BoolVar(&o.noBaseline, "no-baseline", false, "skip the stock kube-scheduler run")
	cmd.Flags().StringVar(&o.reports, "reports", "reports", "directory for the reports")
	cmd.Flags().BoolVar(&o.validate, "validate", false, "only load and validate the scenario")
	return cmd
}

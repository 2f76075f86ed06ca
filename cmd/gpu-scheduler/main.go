// Command gpu-scheduler is the real kube-scheduler with the GpuClaimPlugin compiled in. Run it
// with a KubeSchedulerConfiguration whose gpu-scheduler profile enables the plugin (see
// scheduler/config/scheduler-config.yaml); every kube-scheduler flag works, leader election
// included. --scheduler-name (or $SCHEDULER_NAME) renames that profile, so one configuration
// serves any release of the chart.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/config"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

// defaultFeatureGates are gpu-scheduler's defaults that differ from kube-scheduler's.
const defaultFeatureGates = "NominatedNodeNameForExpectation=false"

func main() {
	proc := gpuclaim.NewProcess()
	metrics.Register(proc)
	code := cli.Run(newCommand(proc))
	// kube-scheduler returns once its context ends (SIGTERM); the plugin's peer leases must go
	// before the process does, or its peers would wait for them to expire.
	proc.LeavePeers()
	os.Exit(code)
}

// newCommand is kube-scheduler's command with --scheduler-name added. The name is applied by
// rewriting the --config file into a temporary copy before kube-scheduler reads it: the profile
// name lives only in that file, and the scheduler's own flags have no say over it.
func newCommand(proc *gpuclaim.Process) *cobra.Command {
	cmd := app.NewSchedulerCommand(app.WithPlugin(gpuclaim.Name, proc.New))
	// With NominatedNodeNameForExpectation (beta, on since 1.35) the scheduler writes a pod's
	// nominatedNodeName before the binding cycle whenever a PreBind plugin has work: for us that
	// is every GPU pod, one more pod status write each (and a pass through the admission chain),
	// to announce a binding the lease creates delay by milliseconds. Off unless the command line's
	// own --feature-gates turns it on again: a later value of the flag wins.
	if err := cmd.Flags().Set("feature-gates", defaultFeatureGates); err != nil {
		panic(fmt.Sprintf("setting the default --feature-gates %s: %v", defaultFeatureGates, err))
	}
	var name string
	cmd.Flags().StringVar(&name, "scheduler-name", gpuv1.SchedulerName,
		"Name of the profile that runs the GpuClaimPlugin: the spec.schedulerName of the pods this release schedules (default $"+gpuv1.SchedulerNameEnv+", then the --config file's). Renames that profile of --config.")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		flagSet := c.Flags().Changed("scheduler-name")
		if flagSet || os.Getenv(gpuv1.SchedulerNameEnv) != "" {
			resolved, err := gpuv1.ResolveSchedulerName(name, flagSet, os.Getenv)
			if err != nil {
				return err
			}
			if err := renameConfig(c, resolved); err != nil {
				return err
			}
		}
		elect, err := leaderElect(c)
		if err != nil {
			return err
		}
		// Without leader election every process schedules from its start: it joins its peers
		// at once, before its queue fills, so that the first burst is already divided.
		proc.JoinPeersAtStart(!elect)
		return run(c, args)
	}
	return cmd
}

// leaderElect tells whether this process runs under leader election: --leader-elect when
// given, else the --config file's leaderElection.leaderElect (on by default).
func leaderElect(c *cobra.Command) (bool, error) {
	if f := c.Flags().Lookup("leader-elect"); f != nil && f.Changed {
		return f.Value.String() == "true", nil
	}
	f := c.Flags().Lookup("config")
	if f == nil || f.Value.String() == "" {
		return true, nil
	}
	data, err := os.ReadFile(f.Value.String())
	if err != nil {
		return false, fmt.Errorf("reading --config: %w", err)
	}
	elect, err := config.LeaderElect(data)
	if err != nil {
		return false, fmt.Errorf("--config %s: %w", f.Value.String(), err)
	}
	return elect, nil
}

// renameConfig points --config at a copy of it whose GpuClaimPlugin profile is called name.
func renameConfig(c *cobra.Command, name string) error {
	f := c.Flags().Lookup("config")
	if f == nil || f.Value.String() == "" {
		return fmt.Errorf("--scheduler-name/$%s %q needs --config: the name is that of a profile in the configuration file", gpuv1.SchedulerNameEnv, name)
	}
	in, err := os.ReadFile(f.Value.String())
	if err != nil {
		return fmt.Errorf("reading --config: %w", err)
	}
	out, err := config.SetSchedulerName(in, name)
	if err != nil {
		return fmt.Errorf("--config %s: %w", f.Value.String(), err)
	}
	dir, err := os.MkdirTemp("", "gpu-scheduler-config-")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("writing the renamed configuration: %w", err)
	}
	return c.Flags().Set("config", path)
}

// Command gpu-scheduler is the real kube-scheduler with the GpuClaimPlugin compiled in. Run it
// with a KubeSchedulerConfiguration whose gpu-scheduler profile enables the plugin (see
// scheduler/config/scheduler-config.yaml); every kube-scheduler flag works, leader election
// included.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim/metrics"
)

func main() {
	metrics.Register()
	cmd := app.NewSchedulerCommand(app.WithPlugin(gpuclaim.Name, gpuclaim.New))
	os.Exit(cli.Run(cmd))
}

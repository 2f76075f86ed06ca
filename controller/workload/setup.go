package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Options configure the controller.
type Options struct {
	// SchedulerName is this release's scheduler: the controller runs the GpuWorkloads whose
	// template names it (apiv1.ReleaseFor) and gives their pods that schedulerName. Default
	// gpu-scheduler.
	SchedulerName string
	// MaxConcurrentReconciles is how many workloads are reconciled at once; default 4.
	MaxConcurrentReconciles int
	// Clock and Jitter are injected by tests; defaults: the real clock and math/rand.
	Clock  clock.Clock
	Jitter func() float64
}

// SetupWithManager registers the GpuWorkload controller with a manager. It watches
// GpuWorkloads and the pods they own; the manager's scheme must hold api/v1 and core/v1.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	r := newReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("gpu-workload-controller"), opts)
	registerMetrics()
	err := ctrl.NewControllerManagedBy(mgr).
		Named("gpuworkload").
		For(&apiv1.GpuWorkload{}).
		Owns(&corev1.Pod{}).
		WithOptions(controllerOptions(opts)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the GpuWorkload controller: %w", err)
	}
	return nil
}

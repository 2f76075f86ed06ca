package workload

import (
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func newReconciler(c ctrlclient.Client, reader ctrlclient.Reader, rec events.EventRecorder, opts Options) *Reconciler {
	r := &Reconciler{client: c, reader: reader, recorder: rec, clock: opts.Clock, jitter: opts.Jitter, schedulerName: opts.SchedulerName}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.jitter == nil {
		r.jitter = defaultJitter
	}
	if r.schedulerName == "" {
		r.schedulerName = apiv1.SchedulerName
	}
	return r
}

func controllerOptions(opts Options) controller.Options {
	n := opts.MaxConcurrentReconciles
	if n <= 0 {
		n = 4
	}
	return controller.Options{MaxConcurrentReconciles: n}
}

package features

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

// LeaseNamespace is where the scheduler keeps the GPU leases (its default).
const LeaseNamespace = "gpu-scheduler"

// Options configure the suite's control plane.
type Options struct {
	// Name of the cluster (logs, work directory); default "acceptance".
	Name string
	// Out receives the descriptions of failed scenarios; default io.Discard.
	Out io.Writer
	// KeepWorkDir keeps the cluster's logs after Stop.
	KeepWorkDir bool
}

// Suite is the control plane and the production components every scenario shares. Scenario
// state never lives here: it is in the context (see scenario.go). What the suite holds that a
// scenario may change (which gpu-scheduler process is the shared one) is behind mu.
type Suite struct {
	opts    Options
	cluster *cluster.Cluster
	restCfg *rest.Config
	kube    kubernetes.Interface
	gpu     versioned.Interface
	webhook *launch.Webhook
	agents  *agentFleet
	// controller is the gpu-controller (GpuWorkloads); it runs for the whole suite.
	controller *launch.Controller

	// scenarios numbers the scenarios, for names that never repeat within a run.
	scenarios atomic.Int64

	mu sync.Mutex
	// scheduler is the shared gpu-scheduler; a scenario may kill it and start another.
	scheduler *launch.Scheduler
	// schedulerGen numbers the shared schedulers started so far, for process names.
	schedulerGen int
	// kueue is Kueue and its Job webhook, once a @kueue scenario started them.
	kueue *kueueHarness
}

// Start brings up the control plane, installs the CRDs, and starts the webhook, the shared
// gpu-scheduler and the node agents. On error it stops whatever it started.
func Start(ctx context.Context, opts Options) (_ *Suite, err error) {
	if opts.Name == "" {
		opts.Name = "acceptance"
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	s := &Suite{opts: opts}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.Stop())
		}
	}()
	began := time.Now()
	if s.cluster, err = cluster.Start(ctx, cluster.Config{Name: opts.Name, KeepWorkDir: opts.KeepWorkDir, APIServerExtraArgs: append(append([]string(nil), WorkloadAPIArgs...), KueueAPIServerArgs...)}); err != nil {
		return nil, err
	}
	s.restCfg = s.cluster.RESTConfig()
	if s.kube, err = kubernetes.NewForConfig(s.restCfg); err != nil {
		return nil, err
	}
	if s.gpu, err = versioned.NewForConfig(s.restCfg); err != nil {
		return nil, err
	}
	root, err := launch.RepoRoot()
	if err != nil {
		return nil, err
	}
	// The coscheduling plugin's PodGroup CRD too: podgroup.feature's gangs come from it.
	if err := s.cluster.InstallCRDs(ctx, filepath.Join(root, "charts/gpu-scheduler/crds"), filepath.Join(root, "test/testdata/podgroup-crd")); err != nil {
		return nil, err
	}
	if err := s.ensureNamespace(ctx, LeaseNamespace); err != nil {
		return nil, err
	}
	if s.webhook, err = launch.StartWebhook(ctx, s.cluster, launch.WebhookOptions{Namespace: LeaseNamespace}); err != nil {
		return nil, err
	}
	if s.agents, err = startAgentFleet(ctx, s); err != nil {
		return nil, err
	}
	if _, err := s.restartScheduler(ctx); err != nil {
		return nil, err
	}
	if s.controller, err = launch.StartController(ctx, s.cluster, launch.ControllerOptions{}); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Out, "acceptance: control plane, webhook, agents, gpu-scheduler and gpu-controller up in %s (work dir %s)\n",
		time.Since(began).Round(time.Millisecond), s.cluster.WorkDir())
	return s, nil
}

// Stop stops everything Start started. It is safe on a partly started suite.
func (s *Suite) Stop() error {
	var errs []error
	if s.agents != nil {
		errs = append(errs, s.agents.stop())
	}
	if s.cluster != nil {
		// The webhook and the schedulers are processes of the cluster and stop with it.
		errs = append(errs, s.cluster.Stop())
	}
	return errors.Join(errs...)
}

// Scheduler returns the shared gpu-scheduler process.
func (s *Suite) Scheduler() *launch.Scheduler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scheduler
}

// killScheduler kills the shared gpu-scheduler at once, as a crash would.
func (s *Suite) killScheduler() error {
	sched := s.Scheduler()
	if sched == nil {
		return nil
	}
	if err := sched.Kill(); err != nil {
		return fmt.Errorf("killing %s: %w", filepath.Base(sched.LogPath()), err)
	}
	return nil
}

// restartScheduler stops the shared gpu-scheduler if one runs and starts a fresh one, which
// must rebuild its state from the cluster.
func (s *Suite) restartScheduler(ctx context.Context) (*launch.Scheduler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scheduler != nil && s.scheduler.Running() {
		if err := s.scheduler.Stop(5 * time.Second); err != nil {
			return nil, fmt.Errorf("stopping %s: %w", filepath.Base(s.scheduler.LogPath()), err)
		}
	}
	s.schedulerGen++
	sched, err := launch.StartScheduler(ctx, s.cluster, launch.SchedulerOptions{
		Name:           fmt.Sprintf("gpu-scheduler-%d", s.schedulerGen),
		LeaseNamespace: LeaseNamespace,
		// Every generation is the same scheduler restarted, as a container is under its pod's
		// name: it keeps its identity among peers, so a second scheduler of a scenario never
		// leaves pods to a generation that was killed (until its peer lease ran out).
		Identity: "suite-gpu-scheduler",
	})
	if err != nil {
		return nil, err
	}
	s.scheduler = sched
	return sched, nil
}

// ensureSchedulerRunning starts a new shared gpu-scheduler when a scenario left it dead.
func (s *Suite) ensureSchedulerRunning(ctx context.Context) error {
	if sched := s.Scheduler(); sched != nil && sched.Running() {
		return nil
	}
	_, err := s.restartScheduler(ctx)
	return err
}

func (s *Suite) ensureNamespace(ctx context.Context, name string) error {
	_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// checkOptions are the flags of `gpu-controller check`.
type checkOptions struct {
	namespace     string
	userNamespace string
	schedulerName string
	deployments   []string
	timeout       time.Duration
}

// checkCommand is `gpu-controller check`, the chart's `helm test` pod: it checks that a release
// works as a user meets it. Each named Deployment of the release has an available replica (its
// readiness probe passes); a GpuClaim is accepted by the API server; and a pod naming it, created
// with the API server's dry run, comes back from the webhook with this release's schedulerName.
// The claim is real (the webhook reads it) and deleted again; the pod is never stored.
func checkCommand(args []string) error {
	var kubeconfig string
	o := checkOptions{schedulerName: apiv1.SchedulerName}
	fs := pflag.NewFlagSet("gpu-controller check", pflag.ContinueOnError)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty: in-cluster configuration (or $KUBECONFIG).")
	fs.StringVar(&o.namespace, "namespace", "", "Namespace of the release (its Deployments).")
	fs.StringVar(&o.userNamespace, "user-namespace", "default", "Namespace of the test claim and the dry-run pod; one the webhooks serve (not the release's).")
	fs.StringVar(&o.schedulerName, "scheduler-name", o.schedulerName, "schedulerName the webhook must give a pod that names a claim.")
	fs.StringSliceVar(&o.deployments, "deployments", nil, "Deployments of the release that must have an available replica.")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "How long the checks may take.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("check takes no arguments, got %q", fs.Args())
	}
	if o.namespace == "" {
		return errors.New("--namespace: the release's namespace is required")
	}
	cfg, err := subcommandConfig(kubeconfig, "gpu-controller-check")
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	gpu, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("gpu.scheduling client: %w", err)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), o.timeout)
	defer cancel()
	if err := check(ctx, kube, gpu, o); err != nil {
		return err
	}
	fmt.Println("gpu-scheduler release works: components available, claim accepted, webhook sets schedulerName", o.schedulerName)
	return nil
}

func check(ctx context.Context, kube kubernetes.Interface, gpu versioned.Interface, o checkOptions) error {
	logger := klog.FromContext(ctx)
	for _, name := range o.deployments {
		var last string
		err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			d, err := kube.AppsV1().Deployments(o.namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsForbidden(err) {
				return false, err
			}
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, d.Status.Replicas)
			return d.Status.AvailableReplicas > 0, nil
		})
		if err != nil {
			return fmt.Errorf("deployment %s/%s not available (%s): %w", o.namespace, name, last, err)
		}
		logger.Info("Deployment available", "deployment", klog.KRef(o.namespace, name), "status", last)
	}

	claim := &apiv1.GpuClaim{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpu-scheduler-check-", Namespace: o.userNamespace},
		Spec:       apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 1}},
	}
	claim, err := gpu.GpuV1().GpuClaims(o.userNamespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a GpuClaim in %s: %w", o.userNamespace, err)
	}
	defer func() {
		// A fresh context: the claim goes also when the checks ran out of time.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		if err := gpu.GpuV1().GpuClaims(o.userNamespace).Delete(dctx, claim.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting the check's GpuClaim", "claim", klog.KObj(claim))
		}
	}()
	logger.Info("GpuClaim accepted", "claim", klog.KObj(claim))

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: claim.Name, Namespace: o.userNamespace,
			Annotations: map[string]string{apiv1.AnnotationClaim: claim.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "check", Image: "gpu-scheduler-check.invalid/never-run"}}},
	}
	got, err := kube.CoreV1().Pods(o.userNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run creating a pod that names GpuClaim %s/%s (through the webhook): %w", o.userNamespace, claim.Name, err)
	}
	if got.Spec.SchedulerName != o.schedulerName {
		return fmt.Errorf("a pod naming GpuClaim %s/%s got schedulerName %q, want %q: the webhook did not mutate it (is its MutatingWebhookConfiguration serving namespace %s?)",
			o.userNamespace, claim.Name, got.Spec.SchedulerName, o.schedulerName, o.userNamespace)
	}
	logger.Info("Webhook set the scheduler", "pod", klog.KObj(got), "schedulerName", got.Spec.SchedulerName)
	return nil
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	kindcmd "sigs.k8s.io/kind/pkg/cmd"
	dockerimage "sigs.k8s.io/kind/pkg/cmd/kind/load/docker-image"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

const gpuNodeLabel = "nvidia.com/gpu.present"

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	logger := kindcmd.NewLogger()
	providerOpt, err := kindcluster.DetectNodeProvider()
	if err != nil {
		return fmt.Errorf("no container engine for kind (Docker, Podman or nerdctl): %w", err)
	}
	provider := kindcluster.NewProvider(providerOpt, kindcluster.ProviderWithLogger(logger))

	existing, err := provider.List()
	if err != nil {
		return fmt.Errorf("listing kind clusters: %w", err)
	}
	if !slices.Contains(existing, o.ClusterName) {
		step("creating kind cluster %s (%s, %d workers)", o.ClusterName, o.NodeImage, o.Workers)
		if err := provider.Create(o.ClusterName, kindcluster.CreateWithNodeImage(o.NodeImage),
			kindcluster.CreateWithRawConfig(o.kindConfig()), kindcluster.CreateWithWaitForReady(3*time.Minute),
			kindcluster.CreateWithDisplayUsage(false), kindcluster.CreateWithDisplaySalutation(false)); err != nil {
			return fmt.Errorf("creating kind cluster %s: %w", o.ClusterName, err)
		}
		if !o.KeepCluster {
			defer func() {
				step("deleting kind cluster %s", o.ClusterName)
				if err := provider.Delete(o.ClusterName, ""); err != nil {
					fmt.Fprintln(os.Stderr, "e2e-kind: deleting the cluster:", err)
				}
			}()
		}
	}
	kubeconfig, err := provider.KubeConfig(o.ClusterName, false)
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", o.ClusterName, err)
	}
	dir, err := os.MkdirTemp("", "gpu-scheduler-e2e-kind-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, []byte(kubeconfig), 0o600); err != nil {
		return err
	}

	step("loading images %s", strings.Join(o.images(), ", "))
	load := dockerimage.NewCommand(logger, kindcmd.StandardIOStreams())
	load.SetArgs(append(o.images(), "--name", o.ClusterName))
	if err := load.ExecuteContext(ctx); err != nil {
		return fmt.Errorf("loading the images into kind (build them with make docker-all): %w", err)
	}

	step("installing the chart")
	helm := exec.CommandContext(ctx, o.Helm, o.helmInstallArgs(kubeconfigPath)...)
	helm.Stdout, helm.Stderr = os.Stdout, os.Stderr
	if err := helm.Run(); err != nil {
		return fmt.Errorf("helm install: %w", err)
	}

	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return err
	}
	s := &smoke{o: o, kube: kubernetes.NewForConfigOrDie(cfg), gpu: versioned.NewForConfigOrDie(cfg)}
	if o.MockAgents == "fleet" {
		stop, err := startFleet(ctx, o, kubeconfigPath, dir)
		if err != nil {
			return err
		}
		defer stop()
	}
	return s.run(ctx)
}

// startFleet builds cmd/gpu-sim and runs its agent fleet against the kind cluster: one agent
// over mock NVML per worker, the same code a GPU node runs over the real NVML.
func startFleet(ctx context.Context, o options, kubeconfig, dir string) (func(), error) {
	bin := filepath.Join(dir, "gpu-sim")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/gpu-sim")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building gpu-sim (needs gcc; or use --mock-agents=static): %w\n%s", err, out)
	}
	step("starting gpu-sim agent-fleet")
	agentCtx, cancel := context.WithCancel(ctx)
	agent := exec.CommandContext(agentCtx, bin, o.fleetArgs(kubeconfig)...)
	log, err := os.Create(filepath.Join(dir, "agent-fleet.log"))
	if err != nil {
		cancel()
		return nil, err
	}
	agent.Stdout, agent.Stderr = log, log
	if err := agent.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting gpu-sim agent-fleet: %w", err)
	}
	return func() {
		cancel()
		_ = agent.Wait()
		_ = log.Close()
	}, nil
}

func step(format string, args ...any) {
	fmt.Printf("e2e-kind: "+format+"\n", args...)
}

// smoke is the GPU-less smoke test against an installed chart.
type smoke struct {
	o    options
	kube kubernetes.Interface
	gpu  versioned.Interface
}

func (s *smoke) run(ctx context.Context) error {
	nodes, err := s.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: gpuNodeLabel + "=true"})
	if err != nil {
		return err
	}
	if len(nodes.Items) == 0 {
		return fmt.Errorf("no node labelled %s=true", gpuNodeLabel)
	}
	if s.o.MockAgents == "fleet" {
		if err := s.waitStatuses(ctx, nodes.Items); err != nil {
			return err
		}
	} else if err := s.startStaticAgents(ctx, nodes.Items); err != nil {
		return err
	}
	return s.runPod(ctx)
}

// waitStatuses waits until every worker has a GpuNodeStatus with devices.
func (s *smoke) waitStatuses(ctx context.Context, nodes []corev1.Node) error {
	step("waiting for the fleet agent's GpuNodeStatus of %d workers", len(nodes))
	return wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			st, err := s.gpu.GpuV1().GpuNodeStatuses().Get(ctx, n.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || err == nil && len(st.Status.Devices) == 0 {
				return false, nil
			}
			if err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// startStaticAgents writes one status per worker, refreshed well inside the scheduler's
// freshness window, until ctx ends.
func (s *smoke) startStaticAgents(ctx context.Context, nodes []corev1.Node) error {
	for _, n := range nodes {
		if err := s.publish(ctx, n.Name); err != nil {
			return err
		}
	}
	agentsCtx := ctx // the caller's run bounds the goroutine
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-agentsCtx.Done():
				return
			case <-t.C:
				for _, n := range nodes {
					if err := s.publish(agentsCtx, n.Name); err != nil && agentsCtx.Err() == nil {
						fmt.Fprintln(os.Stderr, "e2e-kind: mock agent:", err)
					}
				}
			}
		}
	}()
	return nil
}

// runPod runs a pod on a two-GPU claim and checks what it got.
func (s *smoke) runPod(ctx context.Context) error {
	const ns = "gpu-smoke"
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	claim := &apiv1.GpuClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-gpus", Namespace: ns},
		Spec: apiv1.GpuClaimSpec{Devices: apiv1.DeviceRequest{Count: 2, Policy: apiv1.PolicyContiguous, Exclusivity: apiv1.Exclusive}}}
	if _, err := s.gpu.GpuV1().GpuClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	step("running a pod on GpuClaim %s/%s", ns, claim.Name)
	pod := smokePod(ns, claim.Name)
	_ = s.kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("old smoke pod still there: %w", err)
	}
	if _, err := s.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the GPU pod: %w", err)
	}
	var done *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := s.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done = p
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %s", p.Status.Message)
		}
		return p.Status.Phase == corev1.PodSucceeded, nil
	})
	if err != nil {
		return fmt.Errorf("the GPU pod did not succeed: %w (status %+v)", err, done.Status)
	}
	logs, err := s.kube.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("logs of the GPU pod: %w", err)
	}
	leases, err := s.kube.CoordinationV1().Leases(s.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: apiv1.LabelLeaseNode})
	if err != nil {
		return err
	}
	if err := checkSmoke(done, string(logs), leases.Items); err != nil {
		return err
	}
	step("pod ran on %s with %s", done.Spec.NodeName, strings.TrimSpace(string(logs)))

	step("checking that a forged allocation is refused")
	forged := smokePod(ns, claim.Name)
	forged.Name = "forged"
	forged.Annotations[apiv1.AnnotationAllocated] = done.Spec.NodeName + ":0"
	_, err = s.kube.CoreV1().Pods(ns).Create(ctx, forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return fmt.Errorf("a pod created with %s by the cluster admin was admitted; only the scheduler may set it", apiv1.AnnotationAllocated)
	}
	return nil
}

// smokePod prints the GPUs it was given and exits.
func smokePod(ns, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns, Annotations: map[string]string{apiv1.AnnotationClaim: claim}},
		Spec: corev1.PodSpec{
			SchedulerName: apiv1.SchedulerName,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox:1.37",
				Command: []string{"sh", "-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"},
			}},
		},
	}
}

// checkSmoke: the pod was bound with an allocation of two GPUs on its node, its container saw
// exactly those IDs, and one lease per GPU is held by the pod.
func checkSmoke(pod *corev1.Pod, logs string, leases []coordinationv1.Lease) error {
	alloc, err := apiv1.ParseAllocation(pod.Annotations[apiv1.AnnotationAllocated])
	if err != nil {
		return fmt.Errorf("pod %s: %w", pod.Name, err)
	}
	if alloc.Node != pod.Spec.NodeName || len(alloc.IDs) != 2 {
		return fmt.Errorf("pod %s on %s has allocation %s, want two GPUs on its node", pod.Name, pod.Spec.NodeName, alloc)
	}
	ids := make([]string, len(alloc.IDs))
	for i, id := range alloc.IDs {
		ids[i] = strconv.Itoa(id)
	}
	if want := "CUDA_VISIBLE_DEVICES=" + strings.Join(ids, ","); strings.TrimSpace(logs) != want {
		return fmt.Errorf("the container printed %q, want %q", strings.TrimSpace(logs), want)
	}
	held := 0
	for _, l := range leases {
		if l.Spec.HolderIdentity != nil && strings.Contains(*l.Spec.HolderIdentity, string(pod.UID)) {
			held++
		}
	}
	if held != len(alloc.IDs) {
		return fmt.Errorf("%d GPU leases are held by pod %s, want %d", held, pod.UID, len(alloc.IDs))
	}
	return nil
}

// publish writes node's GpuNodeStatus as an agent over the two-island mock topology would.
func (s *smoke) publish(ctx context.Context, node string) error {
	client := s.gpu.GpuV1().GpuNodeStatuses()
	obj, err := client.Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj, err = client.Create(ctx, &apiv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: apiv1.GpuNodeStatusSpec{NodeName: node}}, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("GpuNodeStatus %s: %w", node, err)
	}
	obj.Status = mockStatus(obj.Status.Devices)
	if _, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("GpuNodeStatus %s status: %w", node, err)
	}
	return nil
}

// mockStatus is the API reference's two-island box, all healthy, keeping the inUseBy the
// previous status had (the real agent reads it from the leases).
func mockStatus(previous []apiv1.Device) apiv1.GpuNodeStatusStatus {
	var st apiv1.GpuNodeStatusStatus
	for i := int32(0); i < 8; i++ {
		d := apiv1.Device{ID: i, Health: apiv1.Healthy, Island: "nvlink-group-0", BandwidthGBps: 600}
		if i >= 4 {
			d.Island, d.BandwidthGBps = "nvlink-group-1", 64
		}
		for _, p := range previous {
			if p.ID == i {
				d.InUseBy = p.InUseBy
			}
		}
		st.Devices = append(st.Devices, d)
	}
	st.Total, st.Healthy, st.Free = 8, 8, 8
	st.LastHeartbeatTime = metav1.Now()
	return st
}

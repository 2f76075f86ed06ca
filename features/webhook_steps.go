package features

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cucumber/godog"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/fieldpath"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/webhook"
)

// Steps about the admission webhook: the visible-devices variables and the allocation guard.
func registerWebhookSteps(sc *godog.ScenarioContext) {
	sc.Step(`^pod "([^"]*)" with containers "([^"]*)" claims (\d+) GPUs?$`, podWithContainers)
	sc.Step(`^pod "([^"]*)" with init container "([^"]*)" and containers "([^"]*)" claims (\d+) GPUs?$`, podWithInitContainers)
	sc.Step(`^every container of pod "([^"]*)" sees CUDA_VISIBLE_DEVICES "([^"]*)"$`, containersSee)
	sc.Step(`^creating pod "([^"]*)" with annotation "([^"]*)" set to "([^"]*)" is refused:$`, createForgedRefused)
	sc.Step(`^user "([^"]*)" setting annotation "([^"]*)" of pod "([^"]*)" to "([^"]*)" is refused:$`, userPatchRefused)
	sc.Step(`^pod "([^"]*)" claims (\d+) GPUs? with schedulerName "([^"]*)"$`, podWithScheduler)
	sc.Step(`^pod "([^"]*)" has schedulerName "([^"]*)"$`, podHasScheduler)
}

// podWithScheduler creates a claim and a pod that names it but asks for another scheduler
// (empty: the field left unset, which the API server defaults to default-scheduler).
func podWithScheduler(ctx context.Context, name string, gpus int, scheduler string) error {
	st := state(ctx)
	if err := st.createClaim(ctx, name, countSpec(gpus)); err != nil {
		return err
	}
	pod := st.newPod(name, name, podOptions{})
	pod.Spec.SchedulerName = scheduler
	return st.createPod(ctx, pod)
}

// podHasScheduler reads the pod's spec.schedulerName as the API server stored it.
func podHasScheduler(ctx context.Context, name, want string) error {
	pod, err := state(ctx).getPod(ctx, name)
	if err != nil {
		return err
	}
	if pod.Spec.SchedulerName != want {
		return fmt.Errorf("pod %s has schedulerName %q, want %q", name, pod.Spec.SchedulerName, want)
	}
	return nil
}

func podWithContainers(ctx context.Context, name, containers string, gpus int) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(gpus), podOptions{containers: names(containers)})
}

func podWithInitContainers(ctx context.Context, name, inits, containers string, gpus int) error {
	return state(ctx).claimAndPod(ctx, name, countSpec(gpus), podOptions{initContainers: names(inits), containers: names(containers)})
}

// names splits "a, b" into its names.
func names(list string) []string {
	var out []string
	for _, c := range strings.Split(list, ",") {
		out = append(out, strings.TrimSpace(c))
	}
	return out
}

// containersSee resolves each container's CUDA_VISIBLE_DEVICES the way the kubelet does (a
// Downward API field of the bound pod) and compares it with the IDs the scheduler allocated
// and the IDs the step expects.
func containersSee(ctx context.Context, name, want string) error {
	st := state(ctx)
	a, err := st.waitBound(ctx, name)
	if err != nil {
		return err
	}
	if got := apiv1.FormatIDs(a.IDs); got != want {
		return fmt.Errorf("pod %s was allocated GPUs %s on node %s, the step expects %s", name, got, a.Node, want)
	}
	pod, err := st.getPod(ctx, name)
	if err != nil {
		return err
	}
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	var problems []string
	for _, c := range all {
		v, err := resolveEnv(pod, c, webhook.EnvCUDAVisibleDevices)
		if err != nil {
			problems = append(problems, fmt.Sprintf("container %s: %v", c.Name, err))
			continue
		}
		if v != want {
			problems = append(problems, fmt.Sprintf("container %s sees %s=%q, want %q", c.Name, webhook.EnvCUDAVisibleDevices, v, want))
		}
		if order, err := resolveEnv(pod, c, webhook.EnvCUDADeviceOrder); err != nil || order != webhook.CUDADeviceOrderPCIBus {
			problems = append(problems, fmt.Sprintf("container %s sees %s=%q (%v), want %q", c.Name, webhook.EnvCUDADeviceOrder, order, err, webhook.CUDADeviceOrderPCIBus))
		}
	}
	if len(problems) > 0 {
		env, _ := json.Marshal(pod.Spec.Containers)
		return fmt.Errorf("pod %s: %s\ncontainers: %s", name, strings.Join(problems, "; "), env)
	}
	return nil
}

// resolveEnv returns what a container's variable resolves to in the running pod: a value, or
// a Downward API field of the pod, as the kubelet resolves it.
func resolveEnv(pod *corev1.Pod, c corev1.Container, name string) (string, error) {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		switch {
		case e.ValueFrom == nil:
			return e.Value, nil
		case e.ValueFrom.FieldRef != nil:
			return fieldpath.ExtractFieldPathAsString(pod, e.ValueFrom.FieldRef.FieldPath)
		default:
			return "", fmt.Errorf("%s comes from a source other than the pod's fields: %+v", name, e.ValueFrom)
		}
	}
	return "", fmt.Errorf("%s is not set", name)
}

// createForgedRefused creates a pod that carries an allocation annotation of its own making,
// and expects the allocation guard to refuse it with the given message.
func createForgedRefused(ctx context.Context, name, key, value string, msg *godog.DocString) error {
	st := state(ctx)
	pod := st.newPod(name, name, podOptions{annotations: map[string]string{key: value}})
	_, err := st.suite.kube.CoreV1().Pods(st.ns).Create(ctx, pod, metav1.CreateOptions{})
	return refusedWith(err, fmt.Sprintf("creating pod %s with %s=%q", name, key, value), st.expand(strings.TrimSpace(msg.Content)))
}

// userPatchRefused has another user, allowed to edit pods in the namespace, change an
// allocation annotation of a pod, and expects the allocation guard to refuse it.
func userPatchRefused(ctx context.Context, user, key, name, value string, msg *godog.DocString) error {
	st := state(ctx)
	client, err := st.impersonate(ctx, user)
	if err != nil {
		return err
	}
	before, err := st.getPod(ctx, name)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(st.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err := refusedWith(err, fmt.Sprintf("user %s setting %s=%q on pod %s", user, key, value, name), st.expand(strings.TrimSpace(msg.Content))); err != nil {
		return err
	}
	after, err := st.getPod(ctx, name)
	if err != nil {
		return err
	}
	if after.Annotations[key] != before.Annotations[key] {
		return fmt.Errorf("the request was refused, yet pod %s's %s changed from %q to %q", name, key, before.Annotations[key], after.Annotations[key])
	}
	return nil
}

// refusedWith checks that a request was refused by admission with exactly the message want
// (the text after the apiserver's "admission webhook ... denied the request: ").
func refusedWith(err error, what, want string) error {
	if err == nil {
		return fmt.Errorf("%s was allowed; want it refused with %q", what, want)
	}
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
		return fmt.Errorf("%s failed, but not as an admission refusal: %w", what, err)
	}
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	_, reason, found := strings.Cut(msg, "denied the request: ")
	if !found || reason != want {
		return fmt.Errorf("%s was refused with\n  %q\nwant the webhook's message\n  %q", what, msg, want)
	}
	return nil
}

// impersonate returns a client acting as user, who may edit pods in the scenario's namespace
// (the "edit" role) but is not the scheduler.
func (st *scenario) impersonate(ctx context.Context, user string) (kubernetes.Interface, error) {
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "edit-" + user, Namespace: st.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := st.suite.kube.RbacV1().RoleBindings(st.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("letting user %s edit namespace %s: %w", user, st.ns, err)
	}
	cfg := rest.CopyConfig(st.suite.restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// RBAC bindings take effect through the apiserver's informers; wait until the user may patch pods.
	err = eventually(ctx, waitBound, "user "+user+" may patch pods in "+st.ns, func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods(st.ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	return client, err
}

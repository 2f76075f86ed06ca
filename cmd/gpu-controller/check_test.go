package main

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	gpufake "github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned/fake"
)

// check passes only when the Deployments are available and the pod comes back with the
// release's schedulerName (the webhook mutated it), and it deletes its claim either way.
func TestCheck(t *testing.T) {
	deploy := func(available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "r-gpu-scheduler", Namespace: "gpu"},
			Status: appsv1.DeploymentStatus{Replicas: 1, AvailableReplicas: available}}
	}
	for _, tc := range []struct {
		name      string
		available int32
		webhook   bool
		want      string
	}{
		{name: "working release", available: 1, webhook: true},
		{name: "webhook does not mutate", available: 1, webhook: false, want: `got schedulerName "", want "gpu-scheduler"`},
		{name: "scheduler not available", available: 0, webhook: true, want: "deployment gpu/r-gpu-scheduler not available (0 of 1 replicas available)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(deploy(tc.available))
			var dryRun bool
			kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				create := a.(k8stesting.CreateActionImpl)
				dryRun = len(create.CreateOptions.DryRun) == 1 && create.CreateOptions.DryRun[0] == metav1.DryRunAll
				pod := create.GetObject().(*corev1.Pod).DeepCopy()
				if tc.webhook {
					pod.Spec.SchedulerName = "gpu-scheduler"
				}
				return true, pod, nil
			})
			gpu := gpufake.NewSimpleClientset()
			// The fake clientset fills no generateName.
			gpu.PrependReactor("create", "gpuclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
				obj.SetName(obj.GetGenerateName() + "x")
				return false, nil, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := check(ctx, kube, gpu, checkOptions{namespace: "gpu", userNamespace: "default", schedulerName: "gpu-scheduler", deployments: []string{"r-gpu-scheduler"}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check: %v, want an error containing %q", err, tc.want)
			}
			if tc.available > 0 && !dryRun {
				t.Error("the pod was not created with dryRun=All")
			}
			claims, err := gpu.GpuV1().GpuClaims("default").List(context.Background(), metav1.ListOptions{})
			if err != nil || len(claims.Items) != 0 {
				t.Errorf("claims left behind: %v %v", claims, err)
			}
		})
	}
}

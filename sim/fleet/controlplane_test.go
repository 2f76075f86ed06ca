//go:build integration

package fleet_test

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpu-scheduler/gpu-scheduler/api/generated/clientset/versioned"
	"github.com/gpu-scheduler/gpu-scheduler/sim/cluster"
)

// controlPlane starts a kube-apiserver named name with the CRDs installed and the lease
// namespace gpu-scheduler made (where every agent renews its liveness lease), stopped when the
// test ends; its clients run at qps and burst (0: client-go's defaults).
func controlPlane(ctx context.Context, tb testing.TB, name string, qps float32, burst int) (kubernetes.Interface, versioned.Interface, *cluster.Cluster) {
	tb.Helper()
	c, err := cluster.Start(ctx, cluster.Config{Name: name})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("stopping the cluster: %v", err)
		}
	})
	if err := c.InstallCRDs(ctx, filepath.Join("..", "..", "charts", "gpu-scheduler", "crds")); err != nil {
		tb.Fatal(err)
	}
	cfg := c.RESTConfig()
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-scheduler"}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	return kube, versioned.NewForConfigOrDie(cfg), c
}

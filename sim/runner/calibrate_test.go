package runner

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

func TestPerObjectSubtractsTheBackground(t *testing.T) {
	spent := map[string]float64{"kube-apiserver": 2.5, "etcd": 0.4, "gpu-sim": 0.3}
	// Background rates: the apiserver 0.1 s of CPU a second, etcd 0.01.
	background := map[string]float64{"kube-apiserver": 0.1, "etcd": 0.01}
	got := perObject(spent, background, 2*time.Second, 1000)
	want := map[string]float64{
		"kube-apiserver": (2.5 - 0.2) / 1000, // 2 s busy carry 0.2 s of background
		"etcd":           (0.4 - 0.02) / 1000,
		"gpu-sim":        0.3 / 1000, // no background measured: all of it is the creates'
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-12 {
			t.Errorf("%s: got %g s per object, want %g", k, got[k], w)
		}
	}
}

func TestPerObjectNothingToDivide(t *testing.T) {
	if got := perObject(map[string]float64{"etcd": 1}, nil, time.Second, 0); got != nil {
		t.Errorf("no objects: got %v, want nil", got)
	}
}

func status(node string, devices int) *gpuv1.GpuNodeStatus {
	s := &gpuv1.GpuNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}
	for i := range devices {
		s.Status.Devices = append(s.Status.Devices, gpuv1.Device{ID: int32(i), Health: gpuv1.Healthy})
	}
	return s
}

// The clock waits for every node's first status write and for the fleet's writes to calm down.
func TestWaitFleetSettled(t *testing.T) {
	ctx := context.Background()
	rec := newRecorder(time.Now())
	for i := range 100 {
		rec.observeStatus(status(fmt.Sprintf("n%d", i), 0), false) // created, no status written yet
	}
	err := waitFleetSettled(ctx, rec, 100, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "0 of 100 statuses published") {
		t.Fatalf("nothing published: got %v, want the timeout naming 0 of 100", err)
	}

	for i := range 100 {
		rec.observeStatus(status(fmt.Sprintf("n%d", i), 8), false)
	}
	// Still writing: 50 status writes within the window, far above 2 % of 100 nodes.
	stop := make(chan struct{})
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				rec.observeStatus(status(fmt.Sprintf("n%d", i%100), 8), false)
			}
		}
	}()
	err = waitFleetSettled(ctx, rec, 100, time.Millisecond)
	close(stop)
	if err == nil || !strings.Contains(err.Error(), "100 of 100 statuses published") {
		t.Fatalf("a busy fleet: got %v, want the timeout with all published", err)
	}
	if err := waitFleetSettled(ctx, rec, 100, time.Minute); err != nil {
		t.Fatalf("a quiet, published fleet: %v", err)
	}
}

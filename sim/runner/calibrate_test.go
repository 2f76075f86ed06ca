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

// settleAfter is the window, counted from 1, at which waitQuiet's rule stops on these CPU
// seconds per window; 0 when it would not stop.
func settleAfter(windows []float64) int {
	rule := newQuietRule()
	for i, w := range windows {
		if rule.settled(w) {
			return i + 1
		}
	}
	return 0
}

func TestWaitQuietRule(t *testing.T) {
	for _, c := range []struct {
		name    string
		windows []float64
		want    int
	}{
		// A tail after the setup's last writes as sampled on steady-fill (all processes, CPU
		// seconds per 1 s window): a plateau of two windows, still falling, then flat.
		{"a tail with a plateau is waited out", []float64{1.2, 0.63, 0.56, 0.27, 0.08, 0.08, 0.09}, 7},
		{"a flat background stops at the third window", []float64{0.12, 0.12, 0.12}, 3},
		{"noise that rises is not falling", []float64{0.10, 0.13, 0.12}, 3},
		{"a dip of more than a tenth starts the count again", []float64{0.20, 0.20, 0.17, 0.17, 0.17}, 5},
		{"two windows are never enough", []float64{0.01, 0.01}, 0},
		{"hundredths of a core either way are noise", []float64{0.03, 0.01, 0.02}, 3},
	} {
		if got := settleAfter(c.windows); got != c.want {
			t.Errorf("%s: %v stops after window %d, want %d", c.name, c.windows, got, c.want)
		}
	}
}

func TestQuietestWindowSkipsABurst(t *testing.T) {
	quiet := func(apiserver float64) map[string]float64 {
		return map[string]float64{"kube-apiserver": apiserver, "etcd": 0.01, "kwok": 0}
	}
	// Five of eight windows caught kwok's node lease renewals: the apiserver, etcd and kwok busy.
	burst := func(apiserver float64) map[string]float64 {
		return map[string]float64{"kube-apiserver": apiserver, "etcd": 0.1, "kwok": 0.09}
	}
	got := quietestWindow([]map[string]float64{burst(0.29), burst(0.33), burst(0.41), burst(0.37), burst(0.35), quiet(0.05), quiet(0.02), quiet(0.04)})
	if got["kube-apiserver"] != 0.04 || got["kwok"] != 0 {
		t.Errorf("got %v, want the second quietest window (apiserver 0.04, kwok 0)", got)
	}
	if got := quietestWindow([]map[string]float64{quiet(0.03)}); got["kube-apiserver"] != 0.03 {
		t.Errorf("one window: got %v, want it", got)
	}
	if got := quietestWindow(nil); got != nil {
		t.Errorf("no windows: got %v, want nil", got)
	}
}

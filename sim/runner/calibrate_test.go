package runner

import (
	"math"
	"testing"
	"time"
)

func TestPerObjectSubtractsTheBackground(t *testing.T) {
	spent := map[string]float64{"kube-apiserver": 2.5, "etcd": 0.4, "gpu-sim": 0.3}
	// 3 s idle: the apiserver used 0.3 s of background, 0.1 s a second; etcd 0.03 s.
	background := map[string]float64{"kube-apiserver": 0.3, "etcd": 0.03}
	got := perObject(spent, background, 2*time.Second, 3*time.Second, 1000)
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
	if got := perObject(map[string]float64{"etcd": 1}, nil, time.Second, time.Second, 0); got != nil {
		t.Errorf("no objects: got %v, want nil", got)
	}
	if got := perObject(map[string]float64{"etcd": 1}, nil, time.Second, 0, 5); got != nil {
		t.Errorf("no idle window: got %v, want nil", got)
	}
}

package runner

import (
	"context"
	"errors"
	"math"
	"net/url"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpu-scheduler/gpu-scheduler/sim/scenario"
)

// until sums by process name, counts a process started in between from zero and drops one
// that is gone at the end.
func TestCPUMarkUntil(t *testing.T) {
	start := cpuMark{
		10: {"kube-apiserver", 100},
		11: {"gpu-scheduler", 5}, // killed in between
		12: {"gpu-sim", 3},
	}
	end := cpuMark{
		10: {"kube-apiserver", 160},
		12: {"gpu-sim", 4.5},
		13: {"gpu-scheduler", 7}, // restarted: counts from zero
		14: {"gpu-scheduler", 2}, // a racing second scheduler with the same name
	}
	got := start.until(end)
	want := map[string]float64{"kube-apiserver": 60, "gpu-sim": 1.5, "gpu-scheduler": 9}
	if len(got) != len(want) {
		t.Fatalf("until = %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %.2fs, want %.2fs", k, got[k], v)
		}
	}
}

// transient tells an overloaded apiserver from a refused request.
func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewServerTimeout(gr, "create", 1), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{apierrors.NewTooManyRequests("busy", 1), true},
		{apierrors.NewInternalError(errors.New("etcd")), true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{&url.Error{Op: "Post", URL: "https://127.0.0.1/x", Err: handshakeTimeout{}}, true},
		{apierrors.NewAlreadyExists(gr, "p"), false},
		{apierrors.NewBadRequest("no"), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), false},
		{apierrors.NewForbidden(gr, "p", errors.New("rbac")), false},
		{errors.New("admission webhook denied the request"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// handshakeTimeout is what net/http returns when a TLS handshake times out.
type handshakeTimeout struct{}

func (handshakeTimeout) Error() string   { return "net/http: TLS handshake timeout" }
func (handshakeTimeout) Timeout() bool   { return true }
func (handshakeTimeout) Temporary() bool { return true }

// retryTransient retries transient errors and stops at the first other one.
func TestRetryTransient(t *testing.T) {
	calls := 0
	err := retryTransient(context.Background(), func() error {
		calls++
		if calls < 3 {
			return apierrors.NewTooManyRequests("busy", 0)
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("retryTransient = %v after %d calls, want success on the 3rd", err, calls)
	}
	calls = 0
	err = retryTransient(context.Background(), func() error {
		calls++
		return apierrors.NewBadRequest("no")
	})
	if !apierrors.IsBadRequest(err) || calls != 1 {
		t.Fatalf("retryTransient = %v after %d calls, want the bad request after 1", err, calls)
	}
}

// Only GPU faults make the agents probe fast.
func TestFleetOptions(t *testing.T) {
	withFaults := func(types ...string) *scenario.Scenario {
		s := &scenario.Scenario{}
		for _, ty := range types {
			s.Spec.Faults = append(s.Spec.Faults, scenario.Fault{Type: ty})
		}
		return s
	}
	for _, c := range []struct {
		s    *scenario.Scenario
		fast bool
	}{
		{withFaults(), false},
		{withFaults(scenario.FaultNodeRemoved, scenario.FaultSchedulerRestart), false},
		{withFaults(scenario.FaultNodeRemoved, scenario.FaultGPUUnhealthy), true},
		{withFaults(scenario.FaultGPURecover), true},
	} {
		o := fleetOptions(c.s)
		if o.GPUFaults != c.fast {
			t.Errorf("faults %v: GPUFaults = %v, want %v", c.s.Spec.Faults, o.GPUFaults, c.fast)
		}
		if got := agentConfig(o).ProbeInterval; (got == 2*time.Second) != c.fast {
			t.Errorf("faults %v: probe interval %s", c.s.Spec.Faults, got)
		}
	}
}

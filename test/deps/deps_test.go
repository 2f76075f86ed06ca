package claims

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// schedulerFramework are the import path prefixes of the kube-scheduler framework. Only
// gpu-scheduler itself links them; every other binary shares what it needs through this
// package, and would otherwise carry a scheduler's worth of packages (and their init costs).
var schedulerFramework = []string{"k8s.io/kube-scheduler", "k8s.io/kubernetes/pkg/scheduler"}

// frameworkFree are the binaries that must link no scheduler framework package.
var frameworkFree = []string{"./cmd/gpu-webhook", "./cmd/gpu-controller", "./cmd/gpu-agent", "./cmd/kubectl-gpu", "./claims/..."}

func TestBinariesLinkNoSchedulerFramework(t *testing.T) {
	for _, pkg := range frameworkFree {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", pkg)
			cmd.Dir = ".."
			out, err := cmd.Output()
			if err != nil {
				var stderr string
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
			}
			var bad []string
			for _, dep := range strings.Fields(string(out)) {
				for _, prefix := range schedulerFramework {
					if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
						bad = append(bad, dep)
					}
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s links the scheduler framework (import what it needs from claims/ instead of scheduler/): %s", pkg, strings.Join(bad, ", "))
			}
		})
	}
}

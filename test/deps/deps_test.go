// Package deps keeps the import graph's rules: which binaries and packages may link what. Each
// rule is checked with `go list -deps`, as the linker would see it; make verify runs it.
package deps

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gpu-scheduler/gpu-scheduler"

// rule forbids the packages under some import paths in the dependencies of others.
type rule struct {
	name string
	// packages are `go list` patterns, relative to the module root.
	packages []string
	// forbidden are import paths; a package under one of them breaks the rule.
	forbidden []string
	why       string
}

var rules = []rule{
	{
		name: "framework-free",
		// Only gpu-scheduler links the kube-scheduler framework: the other binaries and the
		// claims layer share what they need (claims, claims/ledger) without it, and would
		// otherwise carry a scheduler's worth of packages and their init costs.
		packages:  []string{"./cmd/gpu-webhook", "./cmd/gpu-controller", "./cmd/gpu-agent", "./cmd/kubectl-gpu", "./claims/..."},
		forbidden: []string{"k8s.io/kube-scheduler", "k8s.io/kubernetes/pkg/scheduler"},
		why:       "links the scheduler framework; share the code through claims/ or claims/ledger",
	},
	{
		name: "no-harness",
		// The simulator's parts (the agent fleet, the DRA baseline, the runner) are linked by
		// gpu-sim and the tests, never by a binary a release ships; agent/fleet and agent/dra are
		// where two of them lived before.
		packages:  []string{"./cmd/gpu-agent", "./cmd/gpu-scheduler", "./cmd/gpu-controller", "./cmd/gpu-webhook", "./cmd/kubectl-gpu"},
		forbidden: []string{module + "/sim", module + "/agent/fleet", module + "/agent/dra"},
		why:       "links simulator code; run it from gpu-sim instead",
	},
}

func TestImportRules(t *testing.T) {
	for _, r := range rules {
		for _, pkg := range r.packages {
			t.Run(r.name+"/"+strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
				cmd := exec.Command("go", "list", "-deps", pkg)
				cmd.Dir = "../.."
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
					for _, prefix := range r.forbidden {
						if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
							bad = append(bad, dep)
						}
					}
				}
				if len(bad) > 0 {
					t.Errorf("%s %s: %s", pkg, r.why, strings.Join(bad, ", "))
				}
			})
		}
	}
}

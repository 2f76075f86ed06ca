// Package sim_test keeps the simulation harness out of the product: the packages under sim/
// (the agent fleet, the DRA baseline, the runner) are linked by gpu-sim and the tests, never by
// a binary a release ships.
package sim_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gpu-scheduler/gpu-scheduler"

// harness are the import paths no product binary may link: everything under sim/, and where
// the agent fleet and the DRA baseline lived before they moved there.
var harness = []string{module + "/sim", module + "/agent/fleet", module + "/agent/dra"}

// products are the binaries a release ships (the chart's images and the kubectl plugin).
var products = []string{"./cmd/gpu-agent", "./cmd/gpu-scheduler", "./cmd/gpu-controller", "./cmd/gpu-webhook", "./cmd/kubectl-gpu"}

func TestProductBinariesLinkNoHarness(t *testing.T) {
	for _, pkg := range products {
		t.Run(strings.TrimPrefix(pkg, "./cmd/"), func(t *testing.T) {
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
				for _, prefix := range harness {
					if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
						bad = append(bad, dep)
					}
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s links simulator code (run it from gpu-sim instead): %s", pkg, strings.Join(bad, ", "))
			}
		})
	}
}

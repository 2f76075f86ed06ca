//go:build acceptance

package features

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cucumber/godog"
	"k8s.io/klog/v2"

	"github.com/gpu-scheduler/gpu-scheduler/sim/launch"
)

var (
	tags   = flag.String("godog.tags", "", "run only the scenarios matching this tag expression, such as @lease or ~@slow")
	format = flag.String("godog.format", "pretty", "godog output format for the console: pretty or progress")
	keep   = flag.Bool("keep-workdir", false, "keep the control plane's logs after the run")
)

// TestAcceptance runs every scenario in features/*.feature against one control plane with the
// production gpu-scheduler, gpu-webhook and node agent, and writes a JUnit report to
// reports/acceptance.xml.
func TestAcceptance(t *testing.T) {
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reports := filepath.Join(root, "reports")
	if err := os.MkdirAll(reports, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 25*time.Minute)
	defer cancel()

	began := time.Now()
	s, err := Start(ctx, Options{Out: os.Stdout, KeepWorkDir: *keep})
	if err != nil {
		t.Fatalf("starting the acceptance control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the acceptance control plane: %v", err)
		}
	})

	suite := godog.TestSuite{
		Name:                "gpu-scheduler",
		ScenarioInitializer: s.InitializeScenario,
		Options: &godog.Options{
			Format:         *format + ",junit:" + filepath.Join(reports, "acceptance.xml"),
			Paths:          []string{"."},
			Tags:           suiteTags(*tags),
			Strict:         true,
			NoColors:       !terminal(os.Stdout),
			Concurrency:    1,
			TestingT:       t,
			DefaultContext: ctx,
		},
	}
	if code := suite.Run(); code != 0 {
		t.Errorf("acceptance scenarios failed (exit status %d); see the descriptions above and reports/acceptance.xml", code)
	}
	t.Logf("acceptance suite took %s", time.Since(began).Round(time.Second))
}

// suiteTags leaves out @node: node.feature runs the kubelet's device manager in a private mount
// namespace and is played by go test ./agent/deviceplugin (TestNodeFeature), not against this
// suite's control plane.
func suiteTags(user string) string {
	if user == "" {
		return "~@node"
	}
	return user + " && ~@node"
}

// terminal reports whether f is a terminal; CI logs get no colour codes.
func terminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

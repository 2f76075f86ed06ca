package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// releaseName and releaseNamespace are what docs/install.md tells users to run.
	releaseName      = "gpu-scheduler"
	releaseNamespace = "gpu-scheduler"
	// kubeVersion is the server version helm template pretends to talk to.
	kubeVersion = "1.36.3"
	// requireHelmEnv makes a missing helm binary a failure instead of a skip (make test-chart sets it).
	requireHelmEnv = "GPU_SCHEDULER_REQUIRE_HELM"
)

// repoRoot is the directory holding go.mod, found from this package's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// chartDir is charts/gpu-scheduler.
func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "gpu-scheduler") }

// helmBinary is $HELM (absolute, relative to the repository root, or a name on $PATH) or the helm that `make tools` builds into _output/bin. Without one the
// test is skipped, unless GPU_SCHEDULER_REQUIRE_HELM=1 (make test-chart), where it fails.
func helmBinary(t testing.TB) string {
	t.Helper()
	path := os.Getenv("HELM")
	switch {
	case path == "":
		path = filepath.Join(repoRoot(t), "_output", "bin", "helm")
	case !filepath.IsAbs(path) && strings.Contains(path, "/"):
		// Relative to the repository root, where make runs, not to this package.
		path = filepath.Join(repoRoot(t), path)
	}
	if !strings.Contains(path, "/") {
		if found, err := exec.LookPath(path); err == nil {
			path = found
		}
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv(requireHelmEnv) == "1" {
			t.Fatalf("helm not found at %s: run \"make tools\"", path)
		}
		t.Skipf("helm not found at %s (run \"make tools\", or make test-chart)", path)
	}
	return path
}

// hookCompletes lets the chart's hook pods (the CRD-upgrade Job's, helm test's) finish on kwok,
// which runs no container: the harness's pod-complete stage ends a pod with this annotation
// after its duration. Tests that check what a hook does run its command themselves (runHook).
var hookCompletes = []string{
	"--set-json", `crds.podAnnotations={"sim.gpu.scheduling/duration":"1s"}`,
	"--set-json", `tests.podAnnotations={"sim.gpu.scheduling/duration":"1s"}`,
}

// runHelm runs helm with args in a private HELM_* home and returns stdout, or an error carrying stderr.
func runHelm(t testing.TB, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// template renders the chart with the given extra helm arguments (-f, --set, --namespace...).
func template(t testing.TB, args ...string) (string, error) {
	t.Helper()
	base := []string{"template", releaseName, chartDir(t), "--namespace", releaseNamespace, "--kube-version", kubeVersion}
	// A later --namespace wins, so callers may override it.
	return runHelm(t, nil, append(base, args...)...)
}

// mustTemplate is template that fails the test on error.
func mustTemplate(t testing.TB, args ...string) string {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// parseObjects splits a YAML stream into objects, skipping empty documents.
func parseObjects(t testing.TB, stream string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := decodeObjects(stream)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func decodeObjects(stream string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("decode %q: %w", doc, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the one object of kind and name, failing the test when there is none.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q among the rendered objects", kind, name)
	return nil
}

// into converts an unstructured object into a typed one, strictly.
func into(t testing.TB, obj *unstructured.Unstructured, out any) {
	t.Helper()
	data, err := yaml.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

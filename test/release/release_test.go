//go:build release

// Package release runs make release's script (hack/release/release.sh) and checks what it
// publishes: the chart package, the kubectl-gpu archives, SHA256SUMS, the krew manifest and the
// release notes. make test-release runs it without the images (RELEASE_IMAGES=0; make
// test-images covers their build).
package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const version = "9.8.7-rc.1"

var platforms = []struct{ os, arch string }{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func helm(t *testing.T) string {
	t.Helper()
	h := filepath.Join(root(t), "_output", "bin", "helm")
	if _, err := os.Stat(h); err != nil {
		t.Fatalf("no helm at %s (make tools builds it): %v", h, err)
	}
	return h
}

// krewManifest is the part of a krew Plugin the release fills in.
type krewManifest struct {
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func TestRelease(t *testing.T) {
	out := filepath.Join(t.TempDir(), "release")
	cmd := exec.Command("bash", "hack/release/release.sh")
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "VERSION="+version, "OUT="+out, "RELEASE_IMAGES=0", "HELM="+helm(t),
		"RELEASE_URL=https://example.invalid/releases/download")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release VERSION=%s: %v\n%s", version, err, b)
	}

	sums := readSums(t, filepath.Join(out, "SHA256SUMS"))
	chart := "gpu-scheduler-" + version + ".tgz"
	want := []string{chart}
	for _, p := range platforms {
		want = append(want, "kubectl-gpu_"+p.os+"_"+p.arch+".tar.gz")
	}
	t.Run("SHA256SUMS matches every artefact", func(t *testing.T) {
		if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("SHA256SUMS lists %v, want %v", got, want)
		}
		for name, sum := range sums {
			if got := fileSum(t, filepath.Join(out, name)); got != sum {
				t.Errorf("%s: sha256 %s, SHA256SUMS says %s", name, got, sum)
			}
		}
	})

	t.Run("kubectl-gpu archives", func(t *testing.T) {
		for _, p := range platforms {
			name := "kubectl-gpu_" + p.os + "_" + p.arch + ".tar.gz"
			bin := extract(t, filepath.Join(out, name), "kubectl-gpu")
			checkBinary(t, name, bin, p.os, p.arch)
			if p.os == runtime.GOOS && p.arch == runtime.GOARCH {
				c := exec.Command(bin, "--help")
				if b, err := c.CombinedOutput(); err != nil || !strings.Contains(string(b), "gpu") {
					t.Errorf("%s: kubectl-gpu --help: %v\n%s", name, err, b)
				}
			}
		}
	})

	t.Run("krew manifest carries the archives' sums", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(out, "krew", "gpu.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var m krewManifest
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatalf("krew/gpu.yaml: %v", err)
		}
		if m.Spec.Version != "v"+version {
			t.Errorf("krew version %q, want v%s", m.Spec.Version, version)
		}
		if len(m.Spec.Platforms) != len(platforms) {
			t.Errorf("krew manifest has %d platforms, want %d", len(m.Spec.Platforms), len(platforms))
		}
		for _, p := range m.Spec.Platforms {
			file := "kubectl-gpu_" + p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"] + ".tar.gz"
			if wantURI := "https://example.invalid/releases/download/v" + version + "/" + file; p.URI != wantURI {
				t.Errorf("platform %v: uri %q, want %q", p.Selector.MatchLabels, p.URI, wantURI)
			}
			if sum, ok := sums[file]; !ok || p.SHA256 != sum {
				t.Errorf("platform %v: sha256 %q, the archive's is %q", p.Selector.MatchLabels, p.SHA256, sum)
			}
			if p.Bin != "kubectl-gpu" {
				t.Errorf("platform %v: bin %q", p.Selector.MatchLabels, p.Bin)
			}
		}
	})

	t.Run("chart package lints and renders as this version", func(t *testing.T) {
		pkg := filepath.Join(out, chart)
		if b, err := exec.Command(helm(t), "lint", pkg).CombinedOutput(); err != nil {
			t.Errorf("helm lint %s: %v\n%s", chart, err, b)
		}
		b, err := exec.Command(helm(t), "show", "chart", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Version, AppVersion string }
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != version || meta.AppVersion != version {
			t.Errorf("packaged chart version %q appVersion %q, want %s", meta.Version, meta.AppVersion, version)
		}
		// What helm install would create, with the version's images.
		b, err = exec.Command(helm(t), "template", "gpu-scheduler", pkg, "-n", "gpu-scheduler").CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %s: %v\n%s", chart, err, b)
		}
		if !strings.Contains(string(b), "gpu-webhook:"+version) {
			t.Errorf("the packaged chart does not run the %s images:\n%.2000s", version, b)
		}
		// The CRDs travel in the package (the GpuWorkload CRD is the large one).
		b, err = exec.Command(helm(t), "show", "crds", pkg).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, crd := range []string{"gpuclaims.gpu.scheduling", "gpuclaimtemplates.gpu.scheduling", "gpunodestatuses.gpu.scheduling", "gpuworkloads.gpu.scheduling"} {
			if !strings.Contains(string(b), "name: "+crd) {
				t.Errorf("the chart package lacks the CRD %s", crd)
			}
		}
	})

	t.Run("release notes name the version", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(out, "release-notes.md"))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		if first != "# gpu-scheduler v"+version {
			t.Errorf("release notes begin %q, want the heading of v%s", first, version)
		}
		if strings.Contains(string(b), "## Unreleased") {
			t.Error("release notes still hold the Unreleased heading")
		}
	})
}

// A version that is not x.y.z is refused before anything is built, naming the variable.
func TestReleaseRefusesBadVersion(t *testing.T) {
	for _, v := range []string{"", "v1.2.3", "1.2", "1.2.3 ; rm"} {
		cmd := exec.Command("bash", "hack/release/release.sh")
		cmd.Dir = root(t)
		cmd.Env = append(os.Environ(), "VERSION="+v, "OUT="+t.TempDir(), "RELEASE_IMAGES=0", "HELM="+helm(t))
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "is not a semantic version") {
			t.Errorf("VERSION=%q: %v\n%s", v, err, b)
		}
	}
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %q is not sha256sum's format", sc.Text())
		}
		sums[strings.TrimPrefix(name, "*")] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sums
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// extract writes the archive's member name to a temporary file and returns its path.
func extract(t *testing.T, archive, name string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s holds no %s", archive, name)
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if filepath.Clean(h.Name) != name {
			continue
		}
		if h.FileInfo().Mode()&0o111 == 0 {
			t.Errorf("%s: %s is not executable (%v)", archive, name, h.FileInfo().Mode())
		}
		out := filepath.Join(t.TempDir(), name)
		w, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// checkBinary checks that bin is an executable for goos/goarch.
func checkBinary(t *testing.T, what, bin, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.Open(bin)
		if err != nil {
			t.Errorf("%s: not an ELF executable: %v", what, err)
			return
		}
		defer f.Close()
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != want {
			t.Errorf("%s: ELF machine %v, want %v", what, f.Machine, want)
		}
	case "darwin":
		f, err := macho.Open(bin)
		if err != nil {
			t.Errorf("%s: not a Mach-O executable: %v", what, err)
			return
		}
		defer f.Close()
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want {
			t.Errorf("%s: Mach-O CPU %v, want %v", what, f.Cpu, want)
		}
	}
}

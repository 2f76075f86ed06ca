package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type platform = v1.Platform

const (
	nonRoot = 65532
	// The pause image's user, as in registry.k8s.io/pause.
	pauseUser = 65535
)

// debianPackages are the packages debian.lock pins, for every platform.
var debianPackages = []string{"busybox-static", "libc6", "libgcc-s1"}

// imageSpec says what goes into one image.
type imageSpec struct {
	name        string
	refs        []string // the first is the main one
	description string
	// binary: built from pkg (a Go package path relative to dir) into /<name>.
	dir, pkg string
	cgo      bool
	ldflags  string
	// debs whose files make the layer under the binary.
	debs       []string
	busybox    bool
	user       string
	entrypoint []string
	cmd        []string
	ports      []string
	// component images are the chart's, pushed with -push; the others exist for the node tests.
	component bool
}

func imageSpecs(registry string, m sourceMeta, only string) ([]imageSpec, error) {
	registry = strings.TrimSuffix(registry, "/")
	user := fmt.Sprintf("%d:%d", nonRoot, nonRoot)
	minor := strings.Split(strings.TrimPrefix(m.k8sVersion, "v"), ".")
	if len(minor) < 2 {
		return nil, fmt.Errorf("k8s.io/kubernetes version %q has no minor version", m.k8sVersion)
	}
	static := "-s -w"
	all := []imageSpec{
		{
			name: "gpu-scheduler", description: "kube-scheduler with the GpuClaimPlugin",
			dir: ".", pkg: "./cmd/gpu-scheduler", user: user, component: true,
			// kube-scheduler reports the component-base version (metrics, user agent); the
			// plugin is built against that Kubernetes release.
			ldflags: fmt.Sprintf("%s -X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=%s -X k8s.io/component-base/version.gitMinor=%s",
				static, m.k8sVersion, minor[0], minor[1]),
		},
		{
			name: "gpu-webhook", description: "gpu-scheduler's admission webhook",
			dir: ".", pkg: "./cmd/gpu-webhook", ldflags: static, user: user, ports: []string{"8443/tcp"}, component: true,
		},
		{
			name: "gpu-controller", description: "gpu-scheduler's GpuWorkload controller",
			dir: ".", pkg: "./cmd/gpu-controller", ldflags: static, user: user, ports: []string{"8080/tcp", "8081/tcp"}, component: true,
		},
		{
			// cgo against glibc: go-nvml dlopens libnvidia-ml.so.1 from the driver at run time.
			// Lazy binding keeps the NVML symbols unresolved until then (docs/install.md#nvml).
			// The image's user is nonroot; the chart runs it as root where the kubelet's
			// device-plugin directory or the host's /dev needs it.
			name: "gpu-agent", description: "gpu-scheduler's NVML node agent and device plugin",
			dir: ".", pkg: "./cmd/gpu-agent", cgo: true, ldflags: static + " -extldflags=-Wl,-z,lazy",
			debs: []string{"libc6", "libgcc-s1"}, user: user, component: true,
		},
		{
			name: "pause", description: "pod sandbox for the node tests: sleeps until SIGTERM or SIGINT, reaps orphans",
			refs: []string{"gpu-scheduler.local/pause:3.10", "registry.k8s.io/pause:3.10"},
			dir:  "hack/images", pkg: "./pause", ldflags: static, user: fmt.Sprintf("%d:%d", pauseUser, pauseUser),
		},
		{
			name: "testbox", description: "busybox shell and tools for the node tests",
			refs:    []string{"gpu-scheduler.local/testbox:dev"},
			busybox: true, debs: []string{"busybox-static"}, user: "0:0", cmd: []string{"/bin/sh"},
		},
	}
	var want map[string]bool
	if only != "" {
		want = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			want[strings.TrimSpace(n)] = true
		}
	}
	var specs []imageSpec
	for _, s := range all {
		if want != nil && !want[s.name] {
			continue
		}
		delete(want, s.name)
		if s.refs == nil {
			s.refs = []string{registry + "/" + s.name + ":" + m.version}
		}
		if s.pkg != "" && s.entrypoint == nil {
			s.entrypoint = []string{"/" + s.name}
		}
		for _, r := range s.refs {
			if _, err := name.NewTag(r, name.StrictValidation); err != nil {
				return nil, fmt.Errorf("image reference %q (from -registry and -tag): %w", r, err)
			}
		}
		specs = append(specs, s)
	}
	for n := range want {
		return nil, fmt.Errorf("-images: no image %q (gpu-scheduler, gpu-webhook, gpu-controller, gpu-agent, pause, testbox)", n)
	}
	return specs, nil
}

type builder struct {
	root      string
	out       string
	apt       apt
	pkgs      []debPackage
	meta      sourceMeta
	platforms []platform
}

type result struct {
	spec     imageSpec
	index    v1.ImageIndex
	digest   v1.Hash
	archive  string
	archSize int64
	// Compressed size of each platform's image (config and layers).
	sizes map[string]int64
}

func (b *builder) buildAll(ctx context.Context, specs []imageSpec) ([]result, error) {
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	base, err := buildLayer(baseEntries())
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	var results []result
	for _, s := range specs {
		r := result{spec: s, sizes: map[string]int64{}}
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range b.platforms {
			img, err := b.image(ctx, s, p, base)
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", s.name, p.String(), err)
			}
			sz, err := imageSize(img)
			if err != nil {
				return nil, err
			}
			r.sizes[p.String()] = sz
			pl := p
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
		}
		idx = mutate.Annotations(idx, b.labels(s)).(v1.ImageIndex)
		r.index = idx
		if r.digest, err = idx.Digest(); err != nil {
			return nil, fmt.Errorf("%s: index digest: %w", s.name, err)
		}
		r.archive = filepath.Join(b.out, s.name+".oci.tar")
		if r.archSize, err = writeArchive(r.archive, idx, s.refs); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, fmt.Errorf("manifest: %w", err)
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// labels go into every image config and onto the index.
func (b *builder) labels(s imageSpec) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       s.name,
		"org.opencontainers.image.description": s.description,
		"org.opencontainers.image.source":      sourceURL,
		"org.opencontainers.image.url":         sourceURL,
		"org.opencontainers.image.revision":    b.meta.revision,
		"org.opencontainers.image.version":     b.meta.version,
		"org.opencontainers.image.created":     b.meta.created.Format("2006-01-02T15:04:05Z"),
		"org.opencontainers.image.licenses":    "MIT",
	}
}

func (b *builder) image(ctx context.Context, s imageSpec, p platform, base v1.Layer) (v1.Image, error) {
	layers := []v1.Layer{base}
	comments := []string{"base: /etc/passwd, /etc/group, /tmp"}
	if len(s.debs) > 0 {
		var entries []entry
		var names []string
		for _, d := range s.debs {
			pkg, err := findPackage(b.pkgs, d, p.Architecture)
			if err != nil {
				return nil, err
			}
			deb, err := fetchDeb(b.apt, pkg)
			if err != nil {
				return nil, err
			}
			var keep func(string) bool
			if d == "busybox-static" {
				keep = func(p string) bool { return p == "bin/busybox" }
			}
			es, err := debEntries(deb, keep)
			if err != nil {
				return nil, err
			}
			entries = append(entries, es...)
			names = append(names, pkg.Name+"="+pkg.Version)
		}
		if s.busybox {
			entries = append(entries, busyboxLinks()...)
		}
		l, err := buildLayer(entries)
		if err != nil {
			return nil, fmt.Errorf("building the Debian layer: %w", err)
		}
		layers = append(layers, l)
		comments = append(comments, "debian: "+strings.Join(names, " "))
	}
	if s.pkg != "" {
		bin, err := b.goBuild(ctx, s, p)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("reading the binary: %w", err)
		}
		l, err := buildLayer([]entry{file(s.name, 0o755, data)})
		if err != nil {
			return nil, fmt.Errorf("binary layer: %w", err)
		}
		layers = append(layers, l)
		comments = append(comments, "go build "+s.pkg)
	}

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: b.meta.created}, CreatedBy: "hack/images", Comment: comments[i]},
		})
		if err != nil {
			return nil, fmt.Errorf("appending layer: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = p.Architecture, p.OS, p.Variant
	cf.Created = v1.Time{Time: b.meta.created}
	cf.Config = v1.Config{
		User:       s.user,
		Entrypoint: s.entrypoint,
		Cmd:        s.cmd,
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     b.labels(s),
	}
	if len(s.ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, port := range s.ports {
			cf.Config.ExposedPorts[port] = struct{}{}
		}
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return mutate.Annotations(img, b.labels(s)).(v1.Image), nil
}

// goBuild builds s's binary for p into _output/images/bin/<os>_<arch>/ and returns its path.
func (b *builder) goBuild(ctx context.Context, s imageSpec, p platform) (string, error) {
	out := filepath.Join(b.out, "bin", p.OS+"_"+p.Architecture, s.name)
	cgo := "0"
	env := append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS=-trimpath -buildvcs=false")
	if s.cgo {
		cgo = "1"
		if p.Architecture != runtime.GOARCH {
			cc, err := crossCompiler(ctx, p.Architecture)
			if err != nil {
				return "", err
			}
			env = append(env, "CC="+cc)
		}
	}
	env = append(env, "CGO_ENABLED="+cgo)
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", s.ldflags, "-o", out, s.pkg)
	cmd.Dir = filepath.Join(b.root, s.dir)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	fmt.Fprintf(os.Stderr, "go build %s (%s, CGO_ENABLED=%s)\n", s.pkg, p.String(), cgo)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %w", s.pkg, p.String(), err)
	}
	return out, nil
}

// crossCompiler returns Debian's C cross compiler for arch, installing it (with the target's
// glibc headers) when it is missing and this is root on Debian.
func crossCompiler(ctx context.Context, arch string) (string, error) {
	triplets := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
	t, ok := triplets[arch]
	if !ok {
		return "", fmt.Errorf("no C cross compiler known for %s", arch)
	}
	cc := t + "-gcc"
	if _, err := exec.LookPath(cc); err == nil {
		return cc, nil
	}
	// Debian's package names spell the triplet with hyphens only.
	pkgs := []string{"gcc-" + strings.ReplaceAll(t, "_", "-"), "libc6-dev-" + arch + "-cross"}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("the %s agent needs cgo and %s is missing: run as root, or apt-get install %s, or build one platform (-platforms linux/%s)",
			arch, cc, strings.Join(pkgs, " "), runtime.GOARCH)
	}
	fmt.Fprintf(os.Stderr, "installing %s for the %s agent's cgo build\n", strings.Join(pkgs, " "), arch)
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("apt-get install %s: %w", strings.Join(pkgs, " "), err)
	}
	return cc, nil
}

// baseEntries is the layer under every image: the users the images run as and a /tmp.
func baseEntries() []entry {
	return []entry{
		file("etc/passwd", 0o644, []byte(fmt.Sprintf(
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\npause:x:%d:%d:pause:/:/sbin/nologin\n",
			nonRoot, nonRoot, pauseUser, pauseUser))),
		file("etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\npause:x:%d:\n", nonRoot, pauseUser))),
		file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
		dir("root", 0o700),
		{Path: "home/nonroot", Type: tar.TypeDir, Mode: 0o700, UID: nonRoot, GID: nonRoot},
		dir("tmp", 0o1777),
	}
}

// busyboxApplets get a symbolic link each in the test image, so that `kubectl exec ... -- ls`
// works as well as `sh -c`.
var busyboxApplets = []string{
	"[", "[[", "ash", "awk", "basename", "cat", "chmod", "chown", "cp", "cut", "date", "dd", "df",
	"dirname", "du", "echo", "env", "expr", "false", "find", "free", "grep", "head", "hexdump",
	"hostname", "id", "ip", "kill", "ln", "ls", "mkdir", "mknod", "mount", "mv", "nc", "nslookup",
	"od", "ping", "printenv", "printf", "ps", "pwd", "readlink", "realpath", "rm", "rmdir", "sed",
	"seq", "sh", "sleep", "sort", "stat", "tail", "tee", "test", "timeout", "top", "touch", "tr",
	"true", "umount", "uname", "uniq", "vi", "wc", "wget", "which", "whoami", "xargs",
}

func busyboxLinks() []entry {
	var es []entry
	for _, a := range busyboxApplets {
		es = append(es, symlink("bin/"+a, "busybox"))
	}
	return es
}

// writeArchive writes idx as an OCI image layout tarball, one index.json entry per reference
// (io.containerd.image.name for containerd, org.opencontainers.image.ref.name for the rest),
// itself built like a layer so that its bytes too depend only on the images.
func writeArchive(dest string, idx v1.ImageIndex, refs []string) (int64, error) {
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".layout-")
	if err != nil {
		return 0, fmt.Errorf("layout directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return 0, fmt.Errorf("OCI layout: %w", err)
	}
	for _, r := range refs {
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          r,
			"org.opencontainers.image.ref.name": r,
		})); err != nil {
			return 0, fmt.Errorf("OCI layout: %w", err)
		}
	}
	var entries []entry
	err = filepath.Walk(tmp, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		if rel == "." {
			return nil
		}
		if fi.IsDir() {
			entries = append(entries, dir(filepath.ToSlash(rel), 0o755))
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		entries = append(entries, file(filepath.ToSlash(rel), 0o644, data))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("reading the OCI layout: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(dest), ".archive-")
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	defer os.Remove(f.Name())
	if err := writeTar(f, entries); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	if err := os.Rename(f.Name(), dest); err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	fi, err := os.Stat(dest)
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	return fi.Size(), nil
}

func push(ctx context.Context, r result, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	for _, ref := range r.spec.refs {
		tag, err := name.NewTag(ref, opts...)
		if err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Fprintf(os.Stderr, "pushing %s\n", tag)
		if err := remote.WriteIndex(tag, r.index, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}

func writeSummary(file string, results []result) error {
	var b strings.Builder
	b.WriteString("# reference index-digest archive archive-bytes platform=compressed-bytes...\n")
	for _, r := range results {
		var sizes []string
		for p, n := range r.sizes {
			sizes = append(sizes, fmt.Sprintf("%s=%d", p, n))
		}
		sort.Strings(sizes)
		for _, ref := range r.spec.refs {
			fmt.Fprintf(&b, "%s %s %s %d %s\n", ref, r.digest, filepath.Base(r.archive), r.archSize, strings.Join(sizes, " "))
		}
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}

func printSummary(w io.Writer, results []result, out string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tARCHIVE\tCOMPRESSED PER PLATFORM")
	for _, r := range results {
		var sizes []string
		for p, n := range r.sizes {
			sizes = append(sizes, fmt.Sprintf("%s %.1f MiB", p, float64(n)/(1<<20)))
		}
		sort.Strings(sizes)
		for _, ref := range r.spec.refs {
			fmt.Fprintf(tw, "%s\t%s\t%s (%.1f MiB)\t%s\n", ref, r.digest, filepath.Base(r.archive), float64(r.archSize)/(1<<20), strings.Join(sizes, ", "))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "load into containerd (the kubelet's namespace): for f in %s/*.oci.tar; do ctr -n k8s.io images import --all-platforms \"$f\"; done\n", out)
}

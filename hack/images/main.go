// Command images builds gpu-scheduler's container images without a container engine: the four
// components (gpu-scheduler, gpu-webhook, gpu-controller, gpu-agent) and, for the real-node
// test harness, a pause (pod sandbox) image and a test image with a shell. Every image is an
// OCI image index for linux/amd64 and linux/arm64, written as an OCI layout tarball that
// `ctr images import` (containerd 1.6 and 2.x) loads, and pushed to a registry with -push.
//
// The same source gives the same digests: binaries are built with -trimpath, every file in
// every layer has the same time and numeric owner, layers are sorted, and the dates in the
// configs and labels are SOURCE_DATE_EPOCH or the commit's time. The glibc that the agent needs
// for NVML's dlopen and the test image's busybox come from Debian packages pinned by version
// and SHA-256 in debian.lock, read with dpkg-deb (no registry, no root).
//
// It is a module of its own so that go-containerregistry and its dependencies never move the
// versions the product's binaries are built with.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

type options struct {
	root      string
	out       string
	cache     string
	registry  string
	tag       string
	platforms string
	only      string
	push      bool
	insecure  bool
	lock      string
	commit    string
	updateDeb bool
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", "", "The gpu-scheduler repository; empty: the nearest directory above the working directory that holds charts/gpu-scheduler.")
	flag.StringVar(&o.out, "out", "_output/images", "Where the OCI archives and images.txt go (relative to -root).")
	flag.StringVar(&o.cache, "cache", "_output/cache/images", "Debian packages and apt lists (relative to -root).")
	flag.StringVar(&o.registry, "registry", "ghcr.io/gpu-scheduler", "Repository prefix of the component images; the chart's default is ghcr.io/gpu-scheduler.")
	flag.StringVar(&o.tag, "tag", "", "Tag of the component images; empty: the chart's appVersion, which the chart uses when image.tag is empty.")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "Platforms of every image.")
	flag.StringVar(&o.only, "images", "", "Comma-separated image names to build (gpu-scheduler,gpu-webhook,gpu-controller,gpu-agent,pause,testbox); empty: all.")
	flag.BoolVar(&o.push, "push", false, "Also push the component images to -registry (credentials from the Docker config, as docker login writes them).")
	flag.BoolVar(&o.insecure, "insecure", false, "With -push: the registry speaks plain HTTP.")
	flag.StringVar(&o.lock, "debian-lock", "hack/images/debian.lock", "The Debian packages' pins (relative to -root).")
	flag.StringVar(&o.commit, "commit", "", "Build from this commit (git archive into the cache directory) instead of the working tree.")
	flag.BoolVar(&o.updateDeb, "update-debian-lock", false, "Pin the newest Debian packages the machine's apt sources offer, rewrite -debian-lock and exit.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := repoRoot(o.root)
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	platforms, err := parsePlatforms(o.platforms)
	if err != nil {
		return err
	}
	var archs []string
	for _, p := range platforms {
		archs = append(archs, p.Architecture)
	}
	a := apt{dir: abs(o.cache), archs: archs}
	if o.updateDeb {
		return updateLock(a, abs(o.lock), debianPackages, archs)
	}
	src := root
	if o.commit != "" {
		src = filepath.Join(abs(o.cache), "src")
		if err := exportCommit(ctx, root, o.commit, src); err != nil {
			return err
		}
	}
	meta, err := readSource(ctx, root, src, o.commit, o.tag)
	if err != nil {
		return err
	}
	lock := o.lock
	if !filepath.IsAbs(lock) {
		lock = filepath.Join(src, lock) // the pins of the tree being built
	}
	pkgs, err := readLock(lock)
	if err != nil {
		return err
	}
	specs, err := imageSpecs(o.registry, meta, o.only)
	if err != nil {
		return err
	}
	b := &builder{
		root:      src,
		out:       abs(o.out),
		apt:       a,
		pkgs:      pkgs,
		meta:      meta,
		platforms: platforms,
	}
	results, err := b.buildAll(ctx, specs)
	if err != nil {
		return err
	}
	if err := writeSummary(filepath.Join(b.out, "images.txt"), results); err != nil {
		return err
	}
	printSummary(os.Stdout, results, b.out)
	if o.push {
		for _, r := range results {
			if !r.spec.component {
				continue
			}
			if err := push(ctx, r, o.insecure); err != nil {
				return err
			}
		}
	}
	return nil
}

func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "linux/amd64":
			out = append(out, platform{OS: "linux", Architecture: "amd64"})
		case "linux/arm64", "linux/arm64/v8":
			out = append(out, platform{OS: "linux", Architecture: "arm64", Variant: "v8"})
		default:
			return nil, fmt.Errorf("-platforms: %q is not one of linux/amd64, linux/arm64", p)
		}
	}
	return out, nil
}

func repoRoot(flagValue string) (string, error) {
	if flagValue != "" {
		root, err := filepath.Abs(flagValue)
		if err != nil {
			return "", fmt.Errorf("-root: %w", err)
		}
		return root, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "charts", "gpu-scheduler", "Chart.yaml")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no charts/gpu-scheduler above %s: run from the repository or pass -root", wd)
		}
	}
}

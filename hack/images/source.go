package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sourceMeta is what the images say about the source they were built from.
type sourceMeta struct {
	revision   string    // commit, with "-dirty" when tracked files differ from it
	created    time.Time // SOURCE_DATE_EPOCH, else the commit's time
	version    string    // the component images' tag
	k8sVersion string    // k8s.io/kubernetes in go.mod: kube-scheduler's reported version
}

const sourceURL = "https://github.com/gpu-scheduler/gpu-scheduler"

// readSource describes the working tree of root, or commit when it is given; src is the tree
// the images are built from (root, or the commit's export).
func readSource(ctx context.Context, root, src, commit, tag string) (sourceMeta, error) {
	var m sourceMeta
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	at := "HEAD"
	if commit != "" {
		at = commit
	}
	rev, revErr := git("rev-parse", "--verify", at+"^{commit}")
	if revErr == nil {
		m.revision = rev
		if _, err := git("diff", "--quiet", "HEAD", "--"); commit == "" && err != nil {
			m.revision += "-dirty"
		}
	} else if commit != "" {
		return m, fmt.Errorf("-commit %q: not a commit of %s: %w", commit, root, revErr)
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return m, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds: %w", s, err)
		}
		m.created = time.Unix(sec, 0).UTC()
	} else {
		if revErr != nil {
			return m, fmt.Errorf("no git commit to date the images by (set SOURCE_DATE_EPOCH): %w", revErr)
		}
		ct, err := git("log", "-1", "--format=%ct", rev)
		if err != nil {
			return m, fmt.Errorf("git log: %w", err)
		}
		sec, err := strconv.ParseInt(ct, 10, 64)
		if err != nil {
			return m, fmt.Errorf("commit time %q: %w", ct, err)
		}
		m.created = time.Unix(sec, 0).UTC()
	}
	if m.revision == "" {
		m.revision = "unknown"
	}

	m.version = tag
	if m.version == "" {
		v, err := chartAppVersion(filepath.Join(src, "charts", "gpu-scheduler", "Chart.yaml"))
		if err != nil {
			return m, err
		}
		m.version = v
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`).MatchString(m.version) {
		return m, fmt.Errorf("tag %q is not a valid image tag (letters, digits, _ . -; at most 128)", m.version)
	}
	k, err := goModVersion(filepath.Join(src, "go.mod"), "k8s.io/kubernetes")
	if err != nil {
		return m, err
	}
	m.k8sVersion = k
	return m, nil
}

// chartAppVersion reads appVersion from Chart.yaml: the tag the chart's image helper falls back
// to, so that images tagged with it are the ones `helm install` asks for.
func chartAppVersion(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the chart's appVersion: %w", err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*["']?([^"'\s#]+)["']?`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s has no appVersion", file)
	}
	return string(m[1]), nil
}

func goModVersion(file, module string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading go.mod: %w", err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s does not require %s", file, module)
	}
	return string(m[1]), nil
}

// exportCommit writes commit's tree into dir (git archive), so that the images are built from
// exactly that commit whatever the working tree holds.
func exportCommit(ctx context.Context, root, commit, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clearing %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export directory: %w", err)
	}
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return fmt.Errorf("git archive: %w", err)
	}
	untar.Stdin = pipe
	var stderr strings.Builder
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %w: %s", commit, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("unpacking git archive %s: %w: %s", commit, err, stderr.String())
	}
	return nil
}

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// debPackage is one line of debian.lock: a Debian package of one architecture, pinned to a
// version and the SHA-256 of its .deb, so that the base layers built from it are the same on
// every machine and every day.
type debPackage struct {
	Name, Arch, Version, SHA256 string
}

func (p debPackage) String() string { return p.Name + ":" + p.Arch + "=" + p.Version }

// readLock parses debian.lock: "name arch version sha256" per line, # comments.
func readLock(file string) ([]debPackage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the Debian package lock: %w", err)
	}
	var pkgs []debPackage
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("%s:%d: want \"name arch version sha256\", got %q", file, i+1, line)
		}
		pkgs = append(pkgs, debPackage{Name: f[0], Arch: f[1], Version: f[2], SHA256: f[3]})
	}
	return pkgs, nil
}

func findPackage(pkgs []debPackage, name, arch string) (debPackage, error) {
	for _, p := range pkgs {
		if p.Name == name && p.Arch == arch {
			return p, nil
		}
	}
	return debPackage{}, fmt.Errorf("debian.lock has no %s for %s: run with -update-debian-lock", name, arch)
}

// apt runs apt-get on a private state and cache directory under cacheDir, with the machine's
// own sources, for both architectures: the machine's apt configuration and package lists are
// left as they are (no dpkg --add-architecture), and no root is needed.
type apt struct {
	dir   string
	archs []string
}

func (a apt) args(cmd ...string) []string {
	args := []string{
		"-q",
		"-o", "Dir::State=" + filepath.Join(a.dir, "state"),
		"-o", "Dir::State::status=" + filepath.Join(a.dir, "state", "status"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
		"-o", "Debug::NoLocking=1",
		"-o", "APT::Sandbox::User=" + currentUser(),
	}
	for _, arch := range a.archs {
		args = append(args, "-o", "APT::Architectures::="+arch)
	}
	return append(args, cmd...)
}

func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "nobody"
}

func (a apt) run(workdir string, cmd ...string) error {
	for _, d := range []string{"state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return fmt.Errorf("apt directory: %w", err)
		}
	}
	status := filepath.Join(a.dir, "state", "status")
	if _, err := os.Stat(status); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(status, nil, 0o644); err != nil {
			return fmt.Errorf("apt status file: %w", err)
		}
	}
	c := exec.Command("apt-get", a.args(cmd...)...)
	c.Dir = workdir
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(cmd, " "), err, out.String())
	}
	return nil
}

func (a apt) update() error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("the agent's glibc layer and the test image are built from Debian packages, and apt-get is not here (copy the .deb files named in hack/images/debian.lock into %s by hand): %w", a.dir, err)
	}
	if matches, _ := filepath.Glob(filepath.Join(a.dir, "state", "lists", "*Packages*")); len(matches) > 0 {
		return nil
	}
	return a.run(a.dir, "update")
}

// download fetches spec (name:arch or name:arch=version) into a fresh directory and returns the
// .deb's path.
func (a apt) download(spec string) (string, error) {
	tmp, err := os.MkdirTemp(a.dir, "download-")
	if err != nil {
		return "", fmt.Errorf("download directory: %w", err)
	}
	if err := a.run(tmp, "download", spec); err != nil {
		// The lists may be older than the mirror: refresh them once.
		if err := a.run(a.dir, "update"); err != nil {
			return "", err
		}
		if err := a.run(tmp, "download", spec); err != nil {
			return "", err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d .deb files in %s", spec, len(debs), tmp)
	}
	return debs[0], nil
}

func sha256File(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("hashing: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (a apt) cachePath(p debPackage) string {
	return filepath.Join(a.dir, "debs", p.Name+"_"+p.Arch+"_"+p.SHA256+".deb")
}

// fetchDeb returns the path of p's .deb in cacheDir, downloading it when it is not there yet,
// and refuses a file whose SHA-256 is not the lock's.
func fetchDeb(a apt, p debPackage) (string, error) {
	cached := a.cachePath(p)
	if sum, err := sha256File(cached); err == nil && sum == p.SHA256 {
		return cached, nil
	}
	if err := a.update(); err != nil {
		return "", err
	}
	got, err := a.download(p.String())
	if err != nil {
		return "", fmt.Errorf("%s is pinned in hack/images/debian.lock; when the mirror no longer has it, run with -update-debian-lock: %w", p, err)
	}
	defer os.RemoveAll(filepath.Dir(got))
	sum, err := sha256File(got)
	if err != nil {
		return "", err
	}
	if sum != p.SHA256 {
		return "", fmt.Errorf("%s: the downloaded .deb has SHA-256 %s, debian.lock says %s", p, sum, p.SHA256)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", fmt.Errorf("deb cache: %w", err)
	}
	if err := os.Rename(got, cached); err != nil {
		return "", fmt.Errorf("deb cache: %w", err)
	}
	return cached, nil
}

// updateLock downloads the newest version of every name for every arch and writes the lock.
func updateLock(a apt, file string, names, archs []string) error {
	if err := a.run(a.dir, "update"); err != nil {
		return err
	}
	var lines []string
	for _, name := range names {
		for _, arch := range archs {
			got, err := a.download(name + ":" + arch)
			if err != nil {
				return err
			}
			sum, err := sha256File(got)
			if err != nil {
				return err
			}
			out, err := exec.Command("dpkg-deb", "--field", got, "Version").Output()
			if err != nil {
				return fmt.Errorf("dpkg-deb --field %s Version: %w", got, err)
			}
			p := debPackage{Name: name, Arch: arch, Version: strings.TrimSpace(string(out)), SHA256: sum}
			lines = append(lines, fmt.Sprintf("%s %s %s %s", p.Name, p.Arch, p.Version, p.SHA256))
			// Keep it: the build that follows takes it from the cache.
			if err := os.MkdirAll(filepath.Dir(a.cachePath(p)), 0o755); err != nil {
				return fmt.Errorf("deb cache: %w", err)
			}
			if err := os.Rename(got, a.cachePath(p)); err != nil {
				return fmt.Errorf("deb cache: %w", err)
			}
			os.RemoveAll(filepath.Dir(got))
		}
	}
	sort.Strings(lines)
	header := "# Debian packages the image builder takes files from (hack/images): name arch version sha256.\n" +
		"# Rewritten by `go -C hack/images run . -update-debian-lock`; the images' digests change with it.\n"
	if err := os.WriteFile(file, []byte(header+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}

// debEntries reads the files of a .deb (dpkg-deb --fsys-tarfile, so no unpacking and no root)
// as layer entries owned by root, leaving out documentation, manual pages and translations
// that nothing in a container reads. keep, when set, picks the paths to take.
func debEntries(deb string, keep func(string) bool) ([]entry, error) {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dpkg-deb (install dpkg): %w", err)
	}
	var entries []entry
	tr := tar.NewReader(bufio.NewReader(stdout))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = cmd.Wait()
			return nil, fmt.Errorf("reading %s: %w", deb, err)
		}
		p, err := cleanPath(h.Name)
		if err != nil {
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s: %w", deb, err)
		}
		if p == "" || skipDocs(p) || (keep != nil && h.Typeflag != tar.TypeDir && !keep(p)) {
			continue
		}
		e := entry{Path: p, Mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = tar.TypeDir
		case tar.TypeSymlink:
			e.Type, e.Linkname, e.Mode = tar.TypeSymlink, h.Linkname, 0o777
		case tar.TypeReg:
			e.Type = tar.TypeReg
			if e.Data, err = io.ReadAll(tr); err != nil {
				_ = cmd.Wait()
				return nil, fmt.Errorf("reading %s from %s: %w", p, deb, err)
			}
		default:
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s: %s has tar type %q, which the builder does not copy", deb, p, h.Typeflag)
		}
		entries = append(entries, e)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	return pruneEmptyDirs(entries), nil
}

func skipDocs(p string) bool {
	for _, prefix := range []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian", "usr/share/locale", "usr/share/bug"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
}

// pruneEmptyDirs drops directories that hold nothing after filtering, so a package's layer has
// only the directories its kept files need.
func pruneEmptyDirs(entries []entry) []entry {
	used := map[string]bool{}
	for _, e := range entries {
		if e.Type != tar.TypeDir {
			for d := filepath.Dir(e.Path); d != "." && d != "/"; d = filepath.Dir(d) {
				used[d] = true
			}
		}
	}
	var out []entry
	for _, e := range entries {
		if e.Type != tar.TypeDir || used[e.Path] {
			out = append(out, e)
		}
	}
	return out
}

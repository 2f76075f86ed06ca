package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func sampleEntries() []entry {
	return []entry{
		file("usr/bin/tool", 0o755, []byte("#!/bin/sh\necho tool\n")),
		{Path: "home/nonroot", Type: tar.TypeDir, Mode: 0o700, UID: nonRoot, GID: nonRoot},
		{Path: "home/nonroot/.profile", Type: tar.TypeReg, Mode: 0o600, UID: nonRoot, GID: nonRoot, Data: []byte("x")},
		symlink("bin", "usr/bin"),
		file("./etc/passwd", 0o644, []byte("root:x:0:0::/:/sbin/nologin\n")),
		dir("tmp", 0o1777),
		file("/etc/group", 0o644, []byte("root:x:0:\n")),
	}
}

func tarBytes(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeTar(&buf, entries); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The bytes of a layer depend only on what it holds, not on the order it was given in.
func TestWriteTarIgnoresOrder(t *testing.T) {
	a := sampleEntries()
	b := slices.Clone(a)
	slices.Reverse(b)
	c := append(slices.Clone(a[3:]), a[:3]...)
	want := tarBytes(t, a)
	for i, es := range [][]entry{b, c} {
		if got := tarBytes(t, es); !bytes.Equal(got, want) {
			t.Errorf("order %d: tar differs (sha256 %x, want %x)", i, sha256.Sum256(got), sha256.Sum256(want))
		}
	}
	l1, err := buildLayer(a)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := buildLayer(b)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := l1.Digest()
	d2, _ := l2.Digest()
	if d1 != d2 {
		t.Errorf("layer digests differ: %s, %s", d1, d2)
	}
}

// Every header carries the fixed time, numeric owners only and the caller's mode; parents come
// before their children, and the directories nobody named are added as root's 0755.
func TestWriteTarHeaders(t *testing.T) {
	tr := tar.NewReader(bytes.NewReader(tarBytes(t, sampleEntries())))
	type hdr struct {
		name     string
		mode     int64
		uid, gid int
	}
	var got []hdr
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: mtime %v, want the Unix epoch", h.Name, h.ModTime)
		}
		if !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: access or change time set (%v, %v)", h.Name, h.AccessTime, h.ChangeTime)
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner names %q:%q, want numeric owners only", h.Name, h.Uname, h.Gname)
		}
		if len(h.PAXRecords) != 0 {
			t.Errorf("%s: PAX records %v", h.Name, h.PAXRecords)
		}
		got = append(got, hdr{h.Name, h.Mode, h.Uid, h.Gid})
	}
	want := []hdr{
		{"bin", 0o777, 0, 0},
		{"etc/", 0o755, 0, 0},
		{"etc/group", 0o644, 0, 0},
		{"etc/passwd", 0o644, 0, 0},
		{"home/", 0o755, 0, 0},
		{"home/nonroot/", 0o700, nonRoot, nonRoot},
		{"home/nonroot/.profile", 0o600, nonRoot, nonRoot},
		{"tmp/", 0o1777, 0, 0},
		{"usr/", 0o755, 0, 0},
		{"usr/bin/", 0o755, 0, 0},
		{"usr/bin/tool", 0o755, 0, 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("headers:\n got %v\nwant %v", got, want)
	}
}

func TestWriteTarRejects(t *testing.T) {
	for name, es := range map[string][]entry{
		"two files at one path":    {file("a", 0o644, []byte("1")), file("a", 0o644, []byte("2"))},
		"two modes of a directory": {dir("a", 0o755), dir("a", 0o700)},
		"dot-dot":                  {file("a/../../etc/passwd", 0o644, nil)},
		"file under a file":        {file("a", 0o644, nil), file("a/b", 0o644, nil)},
		"hard link":                {{Path: "a", Type: tar.TypeLink, Linkname: "b"}},
	} {
		if err := writeTar(io.Discard, es); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Two Debian packages that both ship a directory are fine.
	if err := writeTar(io.Discard, []entry{dir("usr", 0o755), dir("usr", 0o755)}); err != nil {
		t.Errorf("a directory given twice alike: %v", err)
	}
}

// An image, its index and its OCI archive built twice from the same input are the same bytes,
// and the image's dates are the source's, not the build's.
func TestImageAndArchiveReproducible(t *testing.T) {
	created := time.Date(2025, 5, 20, 12, 0, 0, 0, time.UTC)
	b := &builder{meta: sourceMeta{revision: "abc", created: created, version: "0.1.0"}}
	s := imageSpec{name: "testbox", refs: []string{"gpu-scheduler.local/testbox:dev"}, user: "0:0", cmd: []string{"/bin/sh"}}
	build := func() (v1.ImageIndex, []byte) {
		base, err := buildLayer(baseEntries())
		if err != nil {
			t.Fatal(err)
		}
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		for _, p := range []platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
			img, err := b.image(context.Background(), s, p, base)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !cf.Created.Equal(created) || cf.Config.Labels["org.opencontainers.image.created"] != "2025-05-20T12:00:00Z" {
				t.Errorf("%s: created %v, label %q; want the source's date", p.Architecture, cf.Created, cf.Config.Labels["org.opencontainers.image.created"])
			}
			if cf.Architecture != p.Architecture || cf.Config.User != "0:0" {
				t.Errorf("config: architecture %q user %q", cf.Architecture, cf.Config.User)
			}
			pl := p
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
		}
		dir := t.TempDir()
		if _, err := writeArchive(filepath.Join(dir, "x.oci.tar"), idx, s.refs); err != nil {
			t.Fatal(err)
		}
		archive, err := os.ReadFile(filepath.Join(dir, "x.oci.tar"))
		if err != nil {
			t.Fatal(err)
		}
		return idx, archive
	}
	idx1, a1 := build()
	time.Sleep(1100 * time.Millisecond) // a clock that leaked into the bytes would show
	idx2, a2 := build()
	d1, _ := idx1.Digest()
	d2, _ := idx2.Digest()
	if d1 != d2 {
		t.Errorf("index digests differ: %s, %s", d1, d2)
	}
	if !bytes.Equal(a1, a2) {
		t.Errorf("archives differ: sha256 %x, %x", sha256.Sum256(a1), sha256.Sum256(a2))
	}
	// The archive is an OCI layout whose index names the image for containerd.
	tr := tar.NewReader(bytes.NewReader(a1))
	var names []string
	var index []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "index.json" {
			index, _ = io.ReadAll(tr)
		}
	}
	var im v1.IndexManifest
	if err := json.Unmarshal(index, &im); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if !slices.Contains(names, "oci-layout") || len(im.Manifests) != 1 ||
		im.Manifests[0].Annotations["io.containerd.image.name"] != "gpu-scheduler.local/testbox:dev" || im.Manifests[0].Digest != d1 {
		t.Errorf("archive: files %v, index.json %s", names, index)
	}
}

// debEntries takes a package's files as root's, without its documentation, and with keep only
// the files asked for.
func TestDebEntries(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed; the builder needs it for the agent's glibc layer")
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "pkg")
	for p, body := range map[string]string{
		"bin/busybox":                   "elf",
		"usr/share/doc/x/copyright":     "doc",
		"usr/lib/x86_64-linux-gnu/lib1": "lib",
	} {
		if err := os.MkdirAll(filepath.Join(tree, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("x86_64-linux-gnu/lib1", filepath.Join(tree, "usr/lib/lib1")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tree, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: x\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@example.com>\nDescription: x\n"
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, "x.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", tree, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}

	es, err := debEntries(deb, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		if e.UID != 0 || e.GID != 0 {
			t.Errorf("%s owned by %d:%d", e.Path, e.UID, e.GID)
		}
		got = append(got, e.Path)
	}
	slices.Sort(got)
	want := []string{"bin", "bin/busybox", "usr", "usr/lib", "usr/lib/lib1", "usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu/lib1"}
	if !slices.Equal(got, want) {
		t.Errorf("entries:\n got %v\nwant %v", got, want)
	}

	es, err = debEntries(deb, func(p string) bool { return p == "bin/busybox" })
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, e := range es {
		got = append(got, e.Path)
	}
	slices.Sort(got)
	if want := []string{"bin", "bin/busybox"}; !slices.Equal(got, want) {
		t.Errorf("with keep:\n got %v\nwant %v", got, want)
	}
}

// The compressed layer has no name and no time in its gzip header.
func TestBuildLayerGzipHeader(t *testing.T) {
	l, err := buildLayer(sampleEntries())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header: name %q mtime %v", zr.Name, zr.ModTime)
	}
}

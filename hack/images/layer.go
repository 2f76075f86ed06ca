package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is every file's modification time in every layer. A layer's digest then depends only on
// what it holds: a commit that leaves a binary unchanged leaves its layer unchanged, and the
// base layers stay shared between builds and images.
var epoch = time.Unix(0, 0).UTC()

// entry is one file, directory or symbolic link of a layer.
type entry struct {
	// Path inside the image, without a leading slash ("usr/bin/x").
	Path     string
	Type     byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode     int64
	UID, GID int
	Linkname string // symbolic links
	Data     []byte // regular files
}

func file(p string, mode int64, data []byte) entry {
	return entry{Path: p, Type: tar.TypeReg, Mode: mode, Data: data}
}

func dir(p string, mode int64) entry {
	return entry{Path: p, Type: tar.TypeDir, Mode: mode}
}

func symlink(p, target string) entry {
	return entry{Path: p, Type: tar.TypeSymlink, Mode: 0o777, Linkname: target}
}

// cleanPath turns a tar or image path into the form entries use: relative, no "./".
func cleanPath(p string) (string, error) {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q: \"..\" is not allowed in an image path", p)
		}
	}
	return strings.TrimPrefix(path.Clean("/"+p), "/"), nil
}

// writeTar writes entries as an uncompressed tar stream that depends only on their contents:
// entries sorted by path, every missing parent directory added (0755, root), the same
// modification time everywhere, numeric owners only, no access or change times. Two entries
// for one path are an error unless both are directories with the same mode and owner (two
// Debian packages that ship /usr).
func writeTar(w io.Writer, entries []entry) error {
	byPath := map[string]entry{}
	for _, e := range entries {
		p, err := cleanPath(e.Path)
		if err != nil {
			return err
		}
		if p == "" {
			continue // the root is the image's own
		}
		e.Path = p
		switch e.Type {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			return fmt.Errorf("%s: unsupported tar type %q", p, e.Type)
		}
		if old, ok := byPath[p]; ok {
			if old.Type == tar.TypeDir && e.Type == tar.TypeDir && old.Mode == e.Mode && old.UID == e.UID && old.GID == e.GID {
				continue
			}
			return fmt.Errorf("%s: given twice", p)
		}
		byPath[p] = e
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parent, ok := byPath[d]
			if !ok {
				byPath[d] = dir(d, 0o755)
				continue
			}
			if parent.Type != tar.TypeDir {
				return fmt.Errorf("%s: parent %s is not a directory", p, d)
			}
		}
	}
	paths = paths[:0]
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	tw := tar.NewWriter(w)
	for _, p := range paths {
		e := byPath[p]
		h := &tar.Header{
			Typeflag: e.Type,
			Name:     p,
			Mode:     e.Mode,
			Uid:      e.UID,
			Gid:      e.GID,
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		switch e.Type {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.Linkname
		case tar.TypeReg:
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar header of %s: %w", p, err)
		}
		if e.Type == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("tar data of %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing tar: %w", err)
	}
	return nil
}

// buildLayer is writeTar gzip-compressed into an image layer. The gzip stream has no name and
// no time, so its bytes depend only on the tar and on the Go release's compressor.
func buildLayer(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if err := writeTar(zw, entries); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return l, nil
}

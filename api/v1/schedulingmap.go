package v1

import (
	"fmt"
	"strconv"
	"strings"
)

// maxMapLines bounds a scheduling map; an annotation is at most 256 KiB anyway, this keeps
// errors and parsing cheap on nonsense input.
const maxMapLines = 4096

// ParseSchedulingMap parses the value of AnnotationSchedulingMap: one "<pod-index>=<node>:<gpu-ids>"
// entry per line (e.g. "0=node-a:0,1"). Blank lines and lines starting with '#' are skipped.
// Errors name the line (1-based) and what is wrong with it.
func ParseSchedulingMap(s string) (map[int]Allocation, error) {
	lines := strings.Split(s, "\n")
	if len(lines) > maxMapLines {
		return nil, fmt.Errorf("scheduling map has %d lines; at most %d are allowed", len(lines), maxMapLines)
	}
	out := map[int]Allocation{}
	for i, line := range lines {
		n := i + 1
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		idx, alloc, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("scheduling map line %d %q: no '='; want <pod-index>=<node>:<gpu-ids> like 0=node-a:0,1", n, truncate(line))
		}
		idx = strings.TrimSpace(idx)
		if idx == "" || len(idx) > 6 || strings.TrimLeft(idx, "0123456789") != "" || (len(idx) > 1 && idx[0] == '0') {
			return nil, fmt.Errorf("scheduling map line %d %q: pod index %q is not a non-negative integer", n, truncate(line), truncate(idx))
		}
		index, _ := strconv.Atoi(idx) // at most 6 digits: cannot fail
		a, err := ParseAllocation(strings.TrimSpace(alloc))
		if err != nil {
			return nil, fmt.Errorf("scheduling map line %d: %w", n, err)
		}
		if prev, dup := out[index]; dup {
			return nil, fmt.Errorf("scheduling map line %d: pod index %d appears twice (already %s)", n, index, prev)
		}
		out[index] = a
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("scheduling map has no entries; want one <pod-index>=<node>:<gpu-ids> per line")
	}
	return out, nil
}

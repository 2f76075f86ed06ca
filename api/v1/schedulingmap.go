package v1

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		index, ok := parseIndex(idx)
		if !ok {
			return nil, fmt.Errorf("scheduling map line %d %q: pod index %q is not a non-negative integer", n, truncate(line), truncate(idx))
		}
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

// Labels and annotations the pod controllers set, from which a pod's index in a scheduling map
// is read.
const (
	// AnnotationJobCompletionIndex is set by the Job controller on the pods of an indexed Job.
	AnnotationJobCompletionIndex = "batch.kubernetes.io/job-completion-index"
	// LabelPodIndex is set by the StatefulSet controller: the pod's ordinal.
	LabelPodIndex = "apps.kubernetes.io/pod-index"
)

// PodIndex is a pod's index in a scheduling map: an indexed Job's completion index, else a
// StatefulSet's ordinal (its pod-index label), else the trailing number of a name the pod was
// given whole ("worker-3"). A name made from generateName (a plain Job's or a Deployment's pod)
// does not count: its random suffix can be all digits. ok is false when the pod has no index.
func PodIndex(pod metav1.Object) (index int, ok bool) {
	if v, found := pod.GetAnnotations()[AnnotationJobCompletionIndex]; found {
		return parseIndex(v)
	}
	if v, found := pod.GetLabels()[LabelPodIndex]; found {
		return parseIndex(v)
	}
	if pod.GetGenerateName() != "" {
		return 0, false
	}
	name := pod.GetName()
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, false
	}
	return parseIndex(name[i+1:])
}

// parseIndex reads a non-negative decimal index of at most 6 digits (a map's indices are
// bounded the same way), without a sign or leading zeros.
func parseIndex(s string) (int, bool) {
	if s == "" || len(s) > 6 || strings.TrimLeft(s, "0123456789") != "" || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

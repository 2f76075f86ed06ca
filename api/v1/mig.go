package v1

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MIGDeviceRef names one MIG device of a node: the GPU it is on and its slot (MigDevice.Slot).
type MIGDeviceRef struct {
	GPU  int
	Slot int
}

// String formats the reference as "<gpu>:<slot>".
func (r MIGDeviceRef) String() string { return strconv.Itoa(r.GPU) + ":" + strconv.Itoa(r.Slot) }

// MIGLeaseName is the name of the Lease that locks MIG device slot of GPU id on node:
// gpu-{node}-{id}-mig{slot}. It ends in "mig{digits}", never in "-{digits}" as a whole GPU's
// lease (LeaseName) does, nor in "-agent" or "-scheduler", so no two kinds collide whatever
// the node names.
func MIGLeaseName(node string, id, slot int) (string, error) {
	base, err := LeaseName(node, id)
	if err != nil {
		return "", err
	}
	if slot < 0 || slot > MaxMIGSlot {
		return "", fmt.Errorf("MIG lease name for node %q GPU %d: slot %d is out of range 0-%d", node, id, slot, MaxMIGSlot)
	}
	name := base + "-mig" + strconv.Itoa(slot)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("MIG lease name %q is not a valid object name: %s", name, strings.Join(errs, "; "))
	}
	return name, nil
}

// ParseMIGLeaseName reads a name of the form MIGLeaseName makes; ok is false for every other.
func ParseMIGLeaseName(name string) (node string, ref MIGDeviceRef, ok bool) {
	i := strings.LastIndex(name, "-mig")
	if i < 0 {
		return "", MIGDeviceRef{}, false
	}
	digits := name[i+len("-mig"):]
	slot, err := strconv.Atoi(digits)
	if err != nil || digits != strconv.Itoa(slot) || slot < 0 || slot > MaxMIGSlot {
		return "", MIGDeviceRef{}, false
	}
	node, id, ok := ParseLeaseName(name[:i])
	if !ok {
		return "", MIGDeviceRef{}, false
	}
	return node, MIGDeviceRef{GPU: id, Slot: slot}, true
}

// FormatMIGDevices formats MIG device references as "3:0,3:4", the value of
// AnnotationMIGDevices and of GpuClaimStatus.MigDevices joined.
func FormatMIGDevices(refs []MIGDeviceRef) string {
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// ParseMIGDevices parses "3:0,3:4": at least one reference, none repeated, GPU IDs in
// 0-MaxGPUID and slots in 0-MaxMIGSlot. The result is sorted by GPU, then slot.
func ParseMIGDevices(s string) ([]MIGDeviceRef, error) {
	if s == "" {
		return nil, fmt.Errorf("MIG device list is empty; want comma-separated <gpu>:<slot> like 3:0,3:4")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxGPUsPerNode*MaxMIGDevicesPerGPU {
		return nil, fmt.Errorf("MIG device list %q has %d devices; at most %d are allowed", truncate(s), len(parts), MaxGPUsPerNode*MaxMIGDevicesPerGPU)
	}
	seen := map[MIGDeviceRef]bool{}
	out := make([]MIGDeviceRef, 0, len(parts))
	for _, p := range parts {
		g, sl, found := strings.Cut(p, ":")
		if !found {
			return nil, fmt.Errorf("MIG device list %q: %q is not <gpu>:<slot>", truncate(s), truncate(p))
		}
		ids, err := ParseIDs(g)
		if err != nil || len(ids) != 1 {
			return nil, fmt.Errorf("MIG device list %q: %q does not start with one GPU ID", truncate(s), truncate(p))
		}
		slot, err := strconv.Atoi(sl)
		if err != nil || sl != strconv.Itoa(slot) || slot < 0 || slot > MaxMIGSlot {
			return nil, fmt.Errorf("MIG device list %q: slot %q is not in 0-%d", truncate(s), truncate(sl), MaxMIGSlot)
		}
		r := MIGDeviceRef{GPU: ids[0], Slot: slot}
		if seen[r] {
			return nil, fmt.Errorf("MIG device list %q: %s appears twice", truncate(s), r)
		}
		seen[r] = true
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU < out[j].GPU
		}
		return out[i].Slot < out[j].Slot
	})
	return out, nil
}

// ResolvedShare is a Shared pod's share of each of its GPUs, with a memory percentage resolved
// to MiB against the GPU: what AnnotationShare and AnnotationLeaseShares carry. Zero fields
// were not stated.
type ResolvedShare struct {
	MemoryMiB      int64
	ComputePercent int32
}

// FormatShare formats a share as "memoryMiB=<n>,computePercent=<n>", leaving out parts that
// are zero; the value of AnnotationShare.
func FormatShare(s ResolvedShare) string {
	var parts []string
	if s.MemoryMiB > 0 {
		parts = append(parts, "memoryMiB="+strconv.FormatInt(s.MemoryMiB, 10))
	}
	if s.ComputePercent > 0 {
		parts = append(parts, "computePercent="+strconv.Itoa(int(s.ComputePercent)))
	}
	return strings.Join(parts, ",")
}

// ParseShare parses FormatShare's value.
func ParseShare(v string) (ResolvedShare, error) {
	var out ResolvedShare
	if v == "" {
		return out, nil
	}
	for _, p := range strings.Split(v, ",") {
		k, val, found := strings.Cut(p, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if !found || err != nil || n < 0 {
			return ResolvedShare{}, fmt.Errorf("share %q: %q is not <key>=<non-negative integer>", truncate(v), truncate(p))
		}
		switch k {
		case "memoryMiB":
			out.MemoryMiB = n
		case "computePercent":
			if n > 100 {
				return ResolvedShare{}, fmt.Errorf("share %q: computePercent %d is above 100", truncate(v), n)
			}
			out.ComputePercent = int32(n)
		default:
			return ResolvedShare{}, fmt.Errorf("share %q: unknown key %q; known keys are memoryMiB, computePercent", truncate(v), truncate(k))
		}
	}
	return out, nil
}

// FormatLeaseShares formats each holder's share as "<uid>=<memory MiB>/<compute percent>",
// comma-separated in the order given: the value of AnnotationLeaseShares.
func FormatLeaseShares(holders []string, shares map[string]ResolvedShare) string {
	parts := make([]string, 0, len(holders))
	for _, h := range holders {
		s := shares[h]
		parts = append(parts, h+"="+strconv.FormatInt(s.MemoryMiB, 10)+"/"+strconv.Itoa(int(s.ComputePercent)))
	}
	return strings.Join(parts, ",")
}

// ParseLeaseShares parses FormatLeaseShares's value. Entries that do not parse are skipped and
// reported in err (the rest are still returned): a bad annotation must not hide the holders'
// shares that are readable.
func ParseLeaseShares(v string) (map[string]ResolvedShare, error) {
	out := map[string]ResolvedShare{}
	var bad []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		uid, rest, ok1 := strings.Cut(p, "=")
		mem, comp, ok2 := strings.Cut(rest, "/")
		m, err1 := strconv.ParseInt(mem, 10, 64)
		c, err2 := strconv.Atoi(comp)
		if !ok1 || !ok2 || uid == "" || err1 != nil || err2 != nil || m < 0 || c < 0 || c > 100 {
			bad = append(bad, truncate(p))
			continue
		}
		out[uid] = ResolvedShare{MemoryMiB: m, ComputePercent: int32(c)}
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("lease shares %q: unreadable entries %s; want <uid>=<MiB>/<percent>", truncate(v), strings.Join(bad, ", "))
	}
	return out, nil
}

package metrics

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// RequestKey is one series of the apiserver's apiserver_request_total, without the response code.
type RequestKey struct {
	Verb        string `json:"verb"`
	Group       string `json:"group"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
}

func (k RequestKey) String() string {
	r := k.Resource
	if k.Group != "" {
		r += "." + k.Group
	}
	if k.Subresource != "" {
		r += "/" + k.Subresource
	}
	return k.Verb + " " + r
}

// RequestCounts are request totals by key.
type RequestCounts map[RequestKey]float64

// ParseRequestTotals reads apiserver_request_total from the apiserver's /metrics text.
func ParseRequestTotals(text string) (RequestCounts, error) {
	out := RequestCounts{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const name = "apiserver_request_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("malformed metric line %q", line)
		}
		labels, err := parseLabels(line[len(name):end])
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		fields := strings.Fields(line[end+1:])
		if len(fields) == 0 {
			return nil, fmt.Errorf("metric line %q has no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[RequestKey{Verb: labels["verb"], Group: labels["group"], Resource: labels["resource"], Subresource: labels["subresource"]}] += v
	}
	return out, sc.Err()
}

// parseLabels reads a="x",b="y" with Prometheus escapes.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, fmt.Errorf("bad label list near %q", s)
		}
		key := strings.TrimSpace(s[:eq])
		var b strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("unterminated label value for %s", key)
		}
		out[key] = b.String()
		s = strings.TrimPrefix(s[i+1:], ",")
	}
	return out, nil
}

// Sub returns after - before, dropping series that did not change.
func (after RequestCounts) Sub(before RequestCounts) RequestCounts {
	out := RequestCounts{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// IsWrite reports whether verb changes state.
func IsWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		return true
	}
	return false
}

// WriteRow is one write series of a run.
type WriteRow struct {
	Key   RequestKey `json:"key"`
	Count float64    `json:"count"`
	// Scheduling is true for the writes that placing a pod costs (see SchedulingWrite).
	Scheduling bool `json:"scheduling"`
}

// LivenessWrites are the node agents' liveness lease writes (package agent/liveness), counted
// by the agents themselves: in the apiserver's apiserver_request_total they are lease POSTs and
// PUTs like GPU lease creates (scheduling writes) and kwok's node lease renewals.
type LivenessWrites struct {
	Creates, Renewals float64
}

// Sub is w - before.
func (w LivenessWrites) Sub(before LivenessWrites) LivenessWrites {
	return LivenessWrites{Creates: w.Creates - before.Creates, Renewals: w.Renewals - before.Renewals}
}

// livenessSubresource names the report's row of liveness lease writes: not an apiserver
// subresource, a series of its own carved out of the lease writes.
const livenessSubresource = "(agent liveness)"

// SchedulingWrite says whether a write series is part of placing pods: bindings, GPU lease
// creates (conflicts included), claim writes and pod patches; for DRA, every ResourceClaim
// write but the delete (kube-controller-manager makes a claim per pod from its template, names
// it in the pod's status and takes the pod out of it when the pod ends; the scheduler writes
// the allocation and the claim's finalizer). A GpuClaim create in the workload is one too: it is
// gpu-controller making a pod's claim from its GpuClaimTemplate, one more write per pod that
// pre-made claims (created before the clock) do not show. It leaves out
// lease and ResourceClaim deletes (releases), events, the workload's own pod and pre-made GpuClaim
// creates, kwok's pod status updates and node heartbeats (lease PUTs), and the agent's
// GpuNodeStatus, ResourceSlice and liveness lease writes, which the report lists apart.
func SchedulingWrite(k RequestKey) bool {
	switch {
	case k.Resource == "pods" && k.Subresource == "binding" && k.Verb == "POST":
		return true
	case k.Resource == "pods" && k.Subresource == "" && (k.Verb == "PATCH" || k.Verb == "PUT"):
		return true
	case k.Resource == "leases" && k.Verb == "POST" && k.Subresource == "":
		return true
	case k.Resource == "gpuclaims":
		return true
	case k.Resource == "resourceclaims" && k.Verb != "DELETE" && k.Verb != "DELETECOLLECTION":
		return true
	case k.Resource == "pods" && k.Subresource == "status" && k.Verb == "APPLY":
		// kube-controller-manager records in the pod which ResourceClaim it made for it
		// (status.resourceClaimStatuses, server-side apply); kwok's status writes are PATCHes.
		return true
	}
	return false
}

// Writes summarises the write series of a diff, largest first. agent counts the agents'
// GpuNodeStatus and ResourceSlice writes. The agents' liveness lease writes are taken out of
// the lease POST and PUT series into rows of their own (subresource "(agent liveness)"): agent
// writes, never scheduling writes, and left out of agent so that it keeps meaning what it
// meant in earlier reports (the caller has them apart, in liveness).
func Writes(diff RequestCounts, liveness LivenessWrites) (rows []WriteRow, scheduling, agent, total float64) {
	diff = carveLiveness(diff, liveness)
	for k, v := range diff {
		if !IsWrite(k.Verb) {
			continue
		}
		row := WriteRow{Key: k, Count: v, Scheduling: SchedulingWrite(k)}
		rows = append(rows, row)
		total += v
		if row.Scheduling {
			scheduling += v
		}
		if k.Resource == "gpunodestatuses" || k.Resource == "resourceslices" {
			agent += v
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Count != rows[j].Count {
			return rows[i].Count > rows[j].Count
		}
		return rows[i].Key.String() < rows[j].Key.String()
	})
	return rows, scheduling, agent, total
}

// carveLiveness moves the liveness lease writes out of the lease series they hide in (never
// below zero: the agents count the requests they sent, the apiserver those it answered).
func carveLiveness(diff RequestCounts, l LivenessWrites) RequestCounts {
	if l.Creates <= 0 && l.Renewals <= 0 {
		return diff
	}
	out := make(RequestCounts, len(diff)+2)
	for k, v := range diff {
		out[k] = v
	}
	for verb, n := range map[string]float64{"POST": l.Creates, "PUT": l.Renewals} {
		if n <= 0 {
			continue
		}
		k := RequestKey{Verb: verb, Group: "coordination.k8s.io", Resource: "leases"}
		moved := min(n, out[k])
		if out[k] -= moved; out[k] <= 0 {
			delete(out, k)
		}
		if moved > 0 {
			lk := k
			lk.Subresource = livenessSubresource
			out[lk] = moved
		}
	}
	return out
}

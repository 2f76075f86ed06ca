package scenario

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// TraceFile replays a pod list (and optionally a node list) kept in a CSV or JSON-lines file,
// such as a public GPU cluster trace. Its pods become the workload's trace entries and its
// nodes become node pools, so the rest of the run treats them like an inline trace.
type TraceFile struct {
	// Pods is the pod list, relative to the scenario file: .csv (a header row names the
	// columns) or .jsonl/.json (one object per line).
	Pods string `json:"pods"`
	// Nodes is the optional node list; nodes with the same GPU model, GPU count, CPU and memory
	// form one pool. Without it the scenario's nodePools are the cluster.
	Nodes string `json:"nodes,omitempty"`
	// Preset names a known trace format's columns: "openb" (Alibaba cluster-trace-gpu-v2023,
	// openb_pod_list_*.csv and openb_node_list_*.csv). Columns and NodeColumns override it.
	Preset string `json:"preset,omitempty"`
	// Columns maps the pod fields to the file's column (or JSON key) names.
	Columns TraceColumns `json:"columns,omitzero"`
	// NodeColumns maps the node fields to the node file's column names.
	NodeColumns TraceNodeColumns `json:"nodeColumns,omitzero"`
	// TimeUnit is what a plain number in the time columns counts (default 1s); a value with a
	// unit ("90s") is read as a duration.
	TimeUnit Duration `json:"timeUnit,omitzero"`
	// Speed compresses time: "100x" plays 100 seconds of trace in one (default "1x").
	Speed string `json:"speed,omitempty"`
	// From and To keep the pods created in [From, To) of trace time; To 0 keeps all after From.
	// Arrivals are offset so that From is the start of the workload.
	From Duration `json:"from,omitzero"`
	To   Duration `json:"to,omitzero"`
	// MaxPods keeps only the first MaxPods GPU pods of the window (0: all).
	MaxPods int `json:"maxPods,omitempty"`
	// Fill: pods arrive in trace order and never leave (deletion times and durations are
	// ignored); the run stops once a pod could not be placed and no pod has bound for
	// QuietPeriod, and reports the GPU allocation rate as arrivals grow.
	Fill bool `json:"fill,omitempty"`
	// Inflate (a fill run only) replays the trace in the method of the fragmentation studies
	// (FGD, Weng et al., USENIX ATC '23): pods are drawn from the trace's GPU pods at random
	// with replacement (seeded by spec.seed), one every InflateEvery, until the GPUs they ask
	// for reach the cluster's GPUs; trace times are ignored.
	Inflate bool `json:"inflate,omitempty"`
	// InflateEvery is the gap between inflated arrivals (default 50ms).
	InflateEvery Duration `json:"inflateEvery,omitzero"`
	// FleetPercent keeps this share of each node pool (rounded; pools that round to none go),
	// to run a large node list at a fraction of its size with the same mix (default 100).
	FleetPercent int `json:"fleetPercent,omitempty"`
	// QuietPeriod of a fill run (default 20s).
	QuietPeriod Duration `json:"quietPeriod,omitzero"`
	// Topologies picks a node's mock topology by its GPU model, or by its GPU count written
	// as a string ("8"); Topology is the fallback. The topology must have the node's GPU count.
	Topologies map[string]string `json:"topologies,omitempty"`
	Topology   string            `json:"topology,omitempty"`
	// SkipUnmappedNodes leaves out the nodes no topology fits (counted in Loaded) instead of
	// failing on them: a public node list has GPU counts the mock topologies may not cover.
	SkipUnmappedNodes bool `json:"skipUnmappedNodes,omitempty"`
	// Loaded is filled in by Load: what was read and what was left out.
	Loaded *TraceLoaded `json:"loaded,omitempty"`
}

// TraceColumns names the columns of a pod list. Times are offsets or timestamps in TimeUnit,
// CPU in millicores, memory in MiB; "-" says the file has no such column.
type TraceColumns struct {
	Name     string `json:"name,omitempty"`
	Created  string `json:"created,omitempty"`
	Deleted  string `json:"deleted,omitempty"`
	Duration string `json:"duration,omitempty"`
	GPUs     string `json:"gpus,omitempty"`
	// GPUMilli is the part of one GPU a one-GPU pod asks for, in milli-GPU (1..1000); below
	// 1000 the pod gets a Shared claim with that compute share. Optional.
	GPUMilli string `json:"gpuMilli,omitempty"`
	Model    string `json:"model,omitempty"`
	CPU      string `json:"cpu,omitempty"`
	Memory   string `json:"memory,omitempty"`
}

// TraceNodeColumns names the columns of a node list (CPU in millicores, memory in MiB); "-"
// says the file has no such column.
type TraceNodeColumns struct {
	Name   string `json:"name,omitempty"`
	GPUs   string `json:"gpus,omitempty"`
	Model  string `json:"model,omitempty"`
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
}

// TraceLoaded says what a trace file gave.
type TraceLoaded struct {
	Rows int `json:"rows"`
	Pods int `json:"pods"`
	// Inflated is the pods drawn by inflation; CapacityGPUs the cluster's GPUs they fill.
	Inflated     int `json:"inflated,omitempty"`
	CapacityGPUs int `json:"capacityGPUs,omitempty"`
	// SharedPods are the pods that asked for a part of one GPU (a Shared claim with a share).
	SharedPods int            `json:"sharedPods,omitempty"`
	Nodes      int            `json:"nodes,omitempty"`
	Skipped    map[string]int `json:"skipped,omitempty"`
}

// Trace presets and defaults.
const (
	PresetOpenB        = "openb"
	DefaultQuietPeriod = 20 * time.Second
	// LabelGPUModel carries a trace node's GPU model; a pod asking for a model selects it.
	LabelGPUModel = "sim.gpu.scheduling/gpu-model"
)

// ourColumns are the names of our own format (scenarios/traces/README in docs/simulator.md).
var ourColumns = TraceColumns{Name: "name", Created: "created", Deleted: "deleted", Duration: "duration", GPUs: "gpus", GPUMilli: "gpuMilli", Model: "model", CPU: "cpu", Memory: "memory"}
var ourNodeColumns = TraceNodeColumns{Name: "name", GPUs: "gpus", Model: "model", CPU: "cpu", Memory: "memory"}

// presets: column names of known public traces.
var presets = map[string]struct {
	pods  TraceColumns
	nodes TraceNodeColumns
}{
	// Alibaba cluster-trace-gpu-v2023: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,
	// qos,pod_phase,creation_time,deletion_time,scheduled_time and sn,cpu_milli,memory_mib,gpu,model.
	PresetOpenB: {
		pods:  TraceColumns{Name: "name", Created: "creation_time", Deleted: "deletion_time", GPUs: "num_gpu", GPUMilli: "gpu_milli", Model: "gpu_spec", CPU: "cpu_milli", Memory: "memory_mib"},
		nodes: TraceNodeColumns{Name: "sn", GPUs: "gpu", Model: "model", CPU: "cpu_milli", Memory: "memory_mib"},
	},
}

// QuietPeriodOrDefault of a fill run.
func (t *TraceFile) QuietPeriodOrDefault() time.Duration {
	if t.QuietPeriod.Duration > 0 {
		return t.QuietPeriod.Duration
	}
	return DefaultQuietPeriod
}

// IsFill reports whether the workload is a fill run.
func (w *Workload) IsFill() bool { return w.TraceFile != nil && w.TraceFile.Fill }

// parseSpeed reads "100x" (or "100").
func parseSpeed(s string) (float64, error) {
	if s == "" {
		return 1, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "x"), 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a speed; write it like \"100x\" (trace seconds per simulated second)", s)
	}
	return v, nil
}

// record is one row of a trace file: its fields by column name and its line.
type record struct {
	line   int
	fields map[string]string
}

// readRecords reads a CSV file with a header row or a JSON-lines file.
func readRecords(path string) ([]record, *Error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Errs: []FieldError{{Msg: "cannot read the trace file: " + errors.Unwrap(err).Error()}}}
	}
	fail := func(line int, format string, args ...any) *Error {
		return &Error{File: path, Errs: []FieldError{{Line: line, Msg: fmt.Sprintf(format, args...)}}}
	}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".csv":
		r := csv.NewReader(bytes.NewReader(data))
		r.ReuseRecord = false
		header, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil, fail(0, "the file is empty; it needs a header row naming the columns")
		}
		if err != nil {
			return nil, csvError(path, err)
		}
		for i := range header {
			header[i] = strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff"))
		}
		var out []record
		for {
			row, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, csvError(path, err)
			}
			line, _ := r.FieldPos(0)
			rec := record{line: line, fields: make(map[string]string, len(header))}
			for i, h := range header {
				rec.fields[h] = strings.TrimSpace(row[i])
			}
			out = append(out, rec)
		}
		return out, nil
	case ".jsonl", ".json", ".ndjson":
		var out []record
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(text), &obj); err != nil {
				return nil, fail(line, "not a JSON object: %v", err)
			}
			rec := record{line: line, fields: make(map[string]string, len(obj))}
			for k, v := range obj {
				switch v := v.(type) {
				case nil:
				case string:
					rec.fields[k] = v
				case float64:
					rec.fields[k] = strconv.FormatFloat(v, 'f', -1, 64)
				default:
					return nil, fail(line, "key %q: want a number or a string, got %s", k, string(mustJSON(v)))
				}
			}
			out = append(out, rec)
		}
		if err := sc.Err(); err != nil {
			return nil, fail(0, "reading: %v", err)
		}
		return out, nil
	default:
		return nil, fail(0, "unknown trace file type %q; use .csv (with a header row) or .jsonl (one JSON object per line)", ext)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func csvError(path string, err error) *Error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &Error{File: path, Errs: []FieldError{{Line: pe.Line, Msg: "not valid CSV: " + pe.Err.Error()}}}
	}
	return &Error{File: path, Errs: []FieldError{{Msg: "not valid CSV: " + err.Error()}}}
}

// rowErrors collects the problems of a trace file's rows, at most maxRowErrors.
type rowErrors struct {
	file string
	errs []FieldError
	more int
}

const maxRowErrors = 20

func (e *rowErrors) add(line int, format string, args ...any) {
	if len(e.errs) >= maxRowErrors {
		e.more++
		return
	}
	e.errs = append(e.errs, FieldError{Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (e *rowErrors) err() *Error {
	if len(e.errs) == 0 {
		return nil
	}
	sort.SliceStable(e.errs, func(i, j int) bool { return e.errs[i].Line < e.errs[j].Line })
	if e.more > 0 {
		e.errs = append(e.errs, FieldError{Msg: fmt.Sprintf("and %d more problems", e.more)})
	}
	return &Error{File: e.file, Errs: e.errs}
}

// number reads a column as a number; ok false when the column is unmapped or empty.
func (e *rowErrors) number(r record, col string) (float64, bool) {
	if col == "" {
		return 0, false
	}
	s := r.fields[col]
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		e.add(r.line, "column %s: %q is not a number >= 0", col, s)
		return 0, false
	}
	return v, true
}

// wholeNumber reads a column as a whole number >= 0.
func (e *rowErrors) wholeNumber(r record, col string) (int, bool) {
	v, ok := e.number(r, col)
	if !ok {
		return 0, false
	}
	if v != math.Trunc(v) || v > 1<<30 {
		e.add(r.line, "column %s: %q is not a whole number", col, r.fields[col])
		return 0, false
	}
	return int(v), true
}

// time reads a time column: a plain number counts unit, a value with a unit is a duration.
func (e *rowErrors) time(r record, col string, unit time.Duration) (time.Duration, bool) {
	if col == "" || r.fields[col] == "" {
		return 0, false
	}
	s := r.fields[col]
	if d, err := time.ParseDuration(s); err == nil && strings.IndexFunc(s, func(c rune) bool { return c >= 'a' && c <= 'z' }) >= 0 {
		if d < 0 {
			e.add(r.line, "column %s: %q is negative", col, s)
			return 0, false
		}
		return d, true
	}
	v, ok := e.number(r, col)
	if !ok {
		return 0, false
	}
	return time.Duration(v * float64(unit)), true
}

// checkColumns returns the required columns a CSV file lacks ("created (for created)") and
// unmaps the optional ones it lacks, so that they read as absent. A JSON-lines file may leave
// keys out of any line, so there only each row's values are checked.
func checkColumns(path string, recs []record, cols map[string]*string, required map[string]bool) []string {
	if len(recs) == 0 || !strings.EqualFold(filepath.Ext(path), ".csv") {
		return nil
	}
	var out []string
	for field, col := range cols {
		if *col == "" {
			continue
		}
		if _, ok := recs[0].fields[*col]; ok {
			continue
		}
		if required[field] {
			out = append(out, fmt.Sprintf("%s (for %s)", *col, field))
		} else {
			*col = ""
		}
	}
	sort.Strings(out)
	return out
}

func headerLine(path string, recs []record) int {
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		return 1
	}
	return recs[0].line
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsName turns s into a DNS label (lower case, '-' for anything else, at most 63 characters).
func dnsName(s string) string {
	s = strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 63 {
		s = strings.Trim(s[:63], "-")
	}
	return s
}

// loadTrace reads the workload's trace files (paths relative to the scenario file) into
// s.Spec.Workload.Trace and, with a node list, s.Spec.NodePools. Problems in the scenario's
// traceFile fields are added to c; problems in a trace file are returned with its lines.
func (c *checker) loadTrace(file string, s *Scenario) *Error {
	t := s.Spec.Workload.TraceFile
	p := "spec.workload.traceFile"
	n := len(c.errs)
	cols, ncols := ourColumns, ourNodeColumns
	if t.Preset != "" {
		if pr, ok := presets[t.Preset]; ok {
			cols, ncols = pr.pods, pr.nodes
		} else {
			c.add(p+".preset", "%q is unknown; use %s or leave it out for our own column names", t.Preset, PresetOpenB)
		}
	}
	override(&cols.Name, t.Columns.Name)
	override(&cols.Created, t.Columns.Created)
	override(&cols.Deleted, t.Columns.Deleted)
	override(&cols.Duration, t.Columns.Duration)
	override(&cols.GPUs, t.Columns.GPUs)
	override(&cols.GPUMilli, t.Columns.GPUMilli)
	override(&cols.Model, t.Columns.Model)
	override(&cols.CPU, t.Columns.CPU)
	override(&cols.Memory, t.Columns.Memory)
	override(&ncols.Name, t.NodeColumns.Name)
	override(&ncols.GPUs, t.NodeColumns.GPUs)
	override(&ncols.Model, t.NodeColumns.Model)
	override(&ncols.CPU, t.NodeColumns.CPU)
	override(&ncols.Memory, t.NodeColumns.Memory)
	if t.Pods == "" {
		c.add(p+".pods", "name the pod list file (.csv or .jsonl), relative to the scenario")
	}
	speed, err := parseSpeed(t.Speed)
	if err != nil {
		c.add(p+".speed", "%v", err)
	}
	unit := t.TimeUnit.Duration
	if unit == 0 {
		unit = time.Second
	}
	if t.TimeUnit.Duration < 0 || t.From.Duration < 0 || t.To.Duration < 0 || t.QuietPeriod.Duration < 0 {
		c.add(p, "timeUnit, from, to and quietPeriod must not be negative")
	}
	if t.To.Duration > 0 && t.To.Duration <= t.From.Duration {
		c.add(p+".to", "%s is not after from (%s); the window would be empty", t.To.Duration, t.From.Duration)
	}
	if t.MaxPods < 0 {
		c.add(p+".maxPods", "must not be negative, got %d", t.MaxPods)
	}
	if t.Inflate && !t.Fill {
		c.add(p+".inflate", "inflation is a fill run's: set fill: true")
	}
	if t.InflateEvery.Duration < 0 {
		c.add(p+".inflateEvery", "must not be negative, got %s", t.InflateEvery.Duration)
	}
	if t.FleetPercent < 0 || t.FleetPercent > 100 {
		c.add(p+".fleetPercent", "%d is not a percentage of the fleet (1..100)", t.FleetPercent)
	}
	if cols.Created == "" || cols.GPUs == "" {
		c.add(p+".columns", "the created and gpus columns are needed; name them (columns: {created: ..., gpus: ...})")
	}
	if len(s.Spec.Workload.Trace) > 0 {
		c.add(p, "give the trace inline (trace:) or in a file (traceFile:), not both")
	}
	for model, topo := range t.Topologies {
		if _, ok := topologyGPUs(topo); !ok {
			c.add(fmt.Sprintf("%s.topologies[%q]", p, model), "topology %q is unknown; known: %s", topo, oneOf(mock.Names()...))
		}
	}
	if t.Topology != "" {
		if _, ok := topologyGPUs(t.Topology); !ok {
			c.add(p+".topology", "topology %q is unknown; known: %s", t.Topology, oneOf(mock.Names()...))
		}
	}
	if len(c.errs) > n {
		return nil
	}
	dir := filepath.Dir(file)
	loaded := &TraceLoaded{Skipped: map[string]int{}}
	models := map[string]bool{}
	if t.Nodes != "" {
		pools, err := loadTraceNodes(relativeTo(dir, t.Nodes), t, ncols, loaded)
		if err != nil {
			return err
		}
		for _, pool := range pools {
			models[pool.Labels[LabelGPUModel]] = true // dnsName of the model
		}
		s.Spec.NodePools = append(s.Spec.NodePools, pools...)
	}
	if t.FleetPercent > 0 && t.FleetPercent < 100 {
		kept := s.Spec.NodePools[:0]
		for _, pool := range s.Spec.NodePools {
			pool.Count = int(math.Round(float64(pool.Count*t.FleetPercent) / 100))
			if pool.Count > 0 {
				kept = append(kept, pool)
			}
		}
		s.Spec.NodePools = kept
	}
	path := relativeTo(dir, t.Pods)
	recs, rerr := readRecords(path)
	if rerr != nil {
		return rerr
	}
	re := &rowErrors{file: path}
	given := t.Columns
	if miss := checkColumns(path, recs, map[string]*string{"name": &cols.Name, "created": &cols.Created, "deleted": &cols.Deleted, "duration": &cols.Duration, "gpus": &cols.GPUs, "gpuMilli": &cols.GPUMilli, "model": &cols.Model, "cpu": &cols.CPU, "memory": &cols.Memory},
		map[string]bool{"created": true, "gpus": true, "gpuMilli": given.GPUMilli != "", "name": given.Name != "", "deleted": given.Deleted != "", "duration": given.Duration != "", "model": given.Model != "", "cpu": given.CPU != "", "memory": given.Memory != ""}); len(miss) > 0 {
		re.add(headerLine(path, recs), "no column %s; map the file's columns in %s.columns", strings.Join(miss, ", "), p)
		return re.err()
	}
	type row struct {
		rec     record
		created time.Duration
	}
	var rows []row
	for _, r := range recs {
		loaded.Rows++
		created, ok := re.time(r, cols.Created, unit)
		if !ok {
			if r.fields[cols.Created] == "" {
				re.add(r.line, "column %s: no creation time", cols.Created)
			}
			continue
		}
		if created < t.From.Duration || (t.To.Duration > 0 && created >= t.To.Duration) {
			loaded.Skipped["outside the window"]++
			continue
		}
		rows = append(rows, row{r, created})
	}
	// Trace order: by creation time, file order among equals.
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].created < rows[j].created })
	names := map[string]int{}
	for i, rw := range rows {
		r := rw.rec
		gpus, ok := re.wholeNumber(r, cols.GPUs)
		if !ok && r.fields[cols.GPUs] != "" {
			continue
		}
		if gpus == 0 {
			loaded.Skipped["no GPUs asked"]++
			continue
		}
		if t.MaxPods > 0 && loaded.Pods >= t.MaxPods {
			loaded.Skipped["beyond maxPods"]++
			continue
		}
		claim := &ClaimSpec{Count: gpus}
		if cols.GPUMilli != "" && r.fields[cols.GPUMilli] != "" {
			milli, ok := re.wholeNumber(r, cols.GPUMilli)
			if !ok {
				continue
			}
			switch {
			case milli < 1 || milli > 1000:
				re.add(r.line, "column %s: %d is not a part of one GPU in milli-GPU (1..1000)", cols.GPUMilli, milli)
				continue
			case milli < 1000 && gpus > 1:
				re.add(r.line, "column %s: %d milli-GPU of each of %d GPUs; a part of a GPU is for one-GPU pods only", cols.GPUMilli, milli, gpus)
				continue
			case milli < 1000:
				// A part of one GPU: a Shared claim capped at that compute share (rounded up
				// to a whole percent, the claim's unit). The openb trace gives no GPU memory
				// per pod, so the share states compute only.
				claim.Exclusivity = string(gpuv1.Shared)
				claim.Share = &ShareSpec{ComputePercent: (milli + 9) / 10}
			}
		}
		if m := r.fields[cols.Model]; cols.Model != "" && m != "" && !strings.Contains(m, "|") {
			// A single model asked for. Alternatives ("V100M16|V100M32") take any GPU.
			if t.Nodes != "" && !models[dnsName(m)] {
				loaded.Skipped["GPU model not in the node list"]++
				continue
			}
			if t.Nodes != "" {
				claim.Selector = map[string]string{LabelGPUModel: dnsName(m)}
			}
		}
		e := TraceEntry{At: D(time.Duration(float64(rw.created-t.From.Duration) / speed).Round(time.Millisecond)), Claim: claim}
		if cols.Name != "" {
			e.Name = dnsName(r.fields[cols.Name])
		}
		if e.Name == "" {
			e.Name = fmt.Sprintf("trace-%d", i)
		}
		if prev, dup := names[e.Name]; dup {
			re.add(r.line, "pod %q appears twice (first on line %d)", e.Name, prev)
			continue
		}
		names[e.Name] = r.line
		if cpu, ok := re.wholeNumber(r, cols.CPU); ok {
			e.CPUMilli = cpu
		}
		if mem, ok := re.wholeNumber(r, cols.Memory); ok {
			e.MemoryMiB = mem
		}
		if !t.Fill {
			if del, ok := re.time(r, cols.Deleted, unit); ok && del > rw.created {
				d := D(time.Duration(float64(del-t.From.Duration) / speed).Round(time.Millisecond))
				e.DeleteAt = &d
			}
			if d, ok := re.time(r, cols.Duration, unit); ok && d > 0 {
				e.Duration = D(max(time.Duration(float64(d)/speed).Round(time.Millisecond), time.Millisecond))
			}
		}
		s.Spec.Workload.Trace = append(s.Spec.Workload.Trace, e)
		loaded.Pods++
		if claim.Share != nil {
			loaded.SharedPods++
		}
	}
	if err := re.err(); err != nil {
		return err
	}
	if loaded.Pods == 0 {
		return &Error{File: path, Errs: []FieldError{{Msg: fmt.Sprintf("no GPU pod in the window (%d rows read, left out: %v); check from/to and the gpus column", loaded.Rows, loaded.Skipped)}}}
	}
	if t.Inflate {
		if err := inflate(s, t, loaded); err != nil {
			return &Error{File: path, Errs: []FieldError{{Msg: err.Error()}}}
		}
	}
	if len(loaded.Skipped) == 0 {
		loaded.Skipped = nil
	}
	t.Loaded = loaded
	return nil
}

// inflate replaces the trace's pods with draws from them, with replacement, until the GPUs the
// draws ask for (a shared pod's part counted as that part of a GPU) reach the cluster's GPUs.
func inflate(s *Scenario, t *TraceFile, loaded *TraceLoaded) error {
	capacity := 0
	for _, pool := range s.Spec.NodePools {
		gpus := pool.GPUsPerNode
		if gpus == 0 {
			gpus, _ = topologyGPUs(pool.Topology)
		}
		capacity += pool.Count * gpus
	}
	if capacity == 0 {
		return fmt.Errorf("inflation needs the cluster's GPU count: the node pools have no GPUs")
	}
	every := t.InflateEvery.Duration
	if every == 0 {
		every = 50 * time.Millisecond
	}
	src := s.Spec.Workload.Trace
	rng := rand.New(rand.NewPCG(uint64(s.Spec.Seed), 34))
	var out []TraceEntry
	for demand := 0.0; demand < float64(capacity); {
		e := src[rng.IntN(len(src))]
		e.Name = fmt.Sprintf("%s-i%d", e.Name, len(out))
		e.At = D(time.Duration(len(out)) * every)
		demand += EntryGPUs(e)
		out = append(out, e)
	}
	s.Spec.Workload.Trace = out
	loaded.Inflated, loaded.CapacityGPUs = len(out), capacity
	return nil
}

// EntryGPUs is the GPUs a trace entry asks for: a shared pod's compute share as that part of one
// GPU (openb's gpu_milli), a pod of whole GPUs their count.
func EntryGPUs(e TraceEntry) float64 {
	n := e.GPUs
	if e.Claim != nil {
		n = e.Claim.Count
		if sh := e.Claim.Share; sh != nil && sh.ComputePercent > 0 {
			return float64(n*sh.ComputePercent) / 100
		}
	}
	return float64(n)
}

// override sets a column name; "-" says the file has no such column.
func override(dst *string, v string) {
	switch v {
	case "":
	case "-":
		*dst = ""
	default:
		*dst = v
	}
}

// loadTraceNodes reads a node list into pools: nodes with the same model, GPU count, CPU and
// memory form one pool, named after the model and GPU count, in the order they first appear.
func loadTraceNodes(path string, t *TraceFile, cols TraceNodeColumns, loaded *TraceLoaded) ([]NodePool, *Error) {
	recs, rerr := readRecords(path)
	if rerr != nil {
		return nil, rerr
	}
	re := &rowErrors{file: path}
	given := t.NodeColumns
	if miss := checkColumns(path, recs, map[string]*string{"name": &cols.Name, "gpus": &cols.GPUs, "model": &cols.Model, "cpu": &cols.CPU, "memory": &cols.Memory},
		map[string]bool{"gpus": true, "name": given.Name != "", "model": given.Model != "", "cpu": given.CPU != "", "memory": given.Memory != ""}); len(miss) > 0 {
		re.add(headerLine(path, recs), "no column %s; map the file's columns in spec.workload.traceFile.nodeColumns", strings.Join(miss, ", "))
		return nil, re.err()
	}
	if cols.GPUs == "" {
		re.add(0, "the gpus column is needed; name it in spec.workload.traceFile.nodeColumns.gpus")
		return nil, re.err()
	}
	type key struct {
		model       string
		gpus        int
		cpu, memory int
	}
	var order []key
	count := map[key]int{}
	for _, r := range recs {
		gpus, ok := re.wholeNumber(r, cols.GPUs)
		if !ok {
			if r.fields[cols.GPUs] == "" {
				re.add(r.line, "column %s: no GPU count", cols.GPUs)
			}
			continue
		}
		if gpus == 0 {
			continue // a CPU-only node: no GPU pod can use it
		}
		k := key{model: r.fields[cols.Model], gpus: gpus}
		k.cpu, _ = re.wholeNumber(r, cols.CPU)
		k.memory, _ = re.wholeNumber(r, cols.Memory)
		topo := t.Topology
		if v, ok := t.Topologies[k.model]; ok && k.model != "" {
			topo = v
		} else if v, ok := t.Topologies[strconv.Itoa(gpus)]; ok {
			topo = v
		}
		if n, _ := topologyGPUs(topo); t.SkipUnmappedNodes && (topo == "" || n != gpus) {
			loaded.Skipped[fmt.Sprintf("nodes with %d GPUs and no topology of that size", gpus)]++
			continue
		}
		if topo == "" {
			re.add(r.line, "node %s: no topology for model %q with %d GPUs; map it in spec.workload.traceFile.topologies or set topology", r.fields[cols.Name], k.model, gpus)
			continue
		}
		if n, _ := topologyGPUs(topo); n != gpus {
			re.add(r.line, "node %s has %d GPUs but topology %s has %d; map model %q or %q to a topology with %d GPUs in spec.workload.traceFile.topologies", r.fields[cols.Name], gpus, topo, n, k.model, strconv.Itoa(gpus), gpus)
			continue
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	if err := re.err(); err != nil {
		return nil, err
	}
	var pools []NodePool
	used := map[string]int{}
	for _, k := range order {
		topo := t.Topology
		if v, ok := t.Topologies[k.model]; ok && k.model != "" {
			topo = v
		} else if v, ok := t.Topologies[strconv.Itoa(k.gpus)]; ok {
			topo = v
		}
		base := dnsName(k.model)
		if base == "" {
			base = "gpu"
		}
		base = fmt.Sprintf("%s-%dg", base, k.gpus)
		if len(base) > 40 {
			base = base[:40]
		}
		name := base
		if used[base]++; used[base] > 1 {
			name = fmt.Sprintf("%s-%d", base, used[base])
		}
		pool := NodePool{Name: name, Count: count[k], Topology: topo, GPUsPerNode: k.gpus, CPUMilli: k.cpu, MemoryMiB: k.memory}
		if k.model != "" {
			pool.Labels = map[string]string{LabelGPUModel: dnsName(k.model)}
		}
		pools = append(pools, pool)
		loaded.Nodes += count[k]
	}
	if len(pools) == 0 {
		return nil, &Error{File: path, Errs: []FieldError{{Msg: "no GPU node in the node list"}}}
	}
	return pools, nil
}

// relativeTo is path as written in a scenario in dir: itself when absolute, else under dir
// (as hardwareFile is read).
func relativeTo(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

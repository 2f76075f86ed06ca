package scenario

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenPod is a PodPlan with readable durations.
type goldenPod struct {
	Name     string    `json:"name"`
	At       string    `json:"at"`
	Kind     string    `json:"kind"`
	Claim    ClaimSpec `json:"claim"`
	Duration string    `json:"duration,omitempty"`
	DeleteAt string    `json:"deleteAt,omitempty"`
	Gang     string    `json:"gang,omitempty"`
	GangSize int       `json:"gangSize,omitempty"`
	// Controller and Template: the pod is a slot of a Job or Deployment naming that template.
	Controller string `json:"controller,omitempty"`
	Template   string `json:"template,omitempty"`
}

type golden struct {
	Scenario *Scenario      `json:"scenario"`
	Pods     int            `json:"pods"`
	GPUs     int            `json:"gpus"`
	ByKind   map[string]int `json:"byKind"`
	Span     string         `json:"span"`
	First    []goldenPod    `json:"first"`
}

func str(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func render(t *testing.T, s *Scenario) []byte {
	t.Helper()
	plan := Expand(s)
	sum := Summarize(plan)
	g := golden{Scenario: s, Pods: sum.Pods, GPUs: sum.GPUs, ByKind: sum.ByKind, Span: sum.Span.String()}
	for _, p := range plan[:min(8, len(plan))] {
		g.First = append(g.First, goldenPod{Name: p.Name, At: p.At.String(), Kind: p.Kind, Claim: p.Claim, Duration: str(p.Duration), DeleteAt: str(p.DeleteAt), Gang: p.Gang, GangSize: p.GangSize, Controller: p.Controller, Template: p.Template})
	}
	out, err := yaml.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test ./sim/scenario -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; run with -update if the change is intended):\n%s", path, diff)
	}
}

// TestGolden: testdata/*.input.yaml decode, default and expand to *.output.yaml.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.yaml")
		t.Run(name, func(t *testing.T) {
			s, err := LoadFile(in)
			if err != nil {
				t.Fatalf("LoadFile: %v", err)
			}
			compareGolden(t, strings.TrimSuffix(in, ".input.yaml")+".output.yaml", render(t, s))
		})
	}
}

// TestBadFiles: every file in testdata/bad fails with exactly the errors in its .err file.
func TestBadFiles(t *testing.T) {
	inputs, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no bad files: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, err := LoadFile(in)
			if err == nil {
				t.Fatalf("LoadFile(%s) succeeded; want an error", in)
			}
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".err", []byte(err.Error()+"\n"))
		})
	}
}

// TestShippedScenarios: every scenario in scenarios/ loads and expands to its pod count.
func TestShippedScenarios(t *testing.T) {
	files, err := filepath.Glob("../../scenarios/*.yaml")
	if err != nil || len(files) < 6 {
		t.Fatalf("want at least 6 shipped scenarios, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if s.Metadata.Name+".yaml" != filepath.Base(f) {
				t.Errorf("metadata.name %q does not match the file name %s", s.Metadata.Name, filepath.Base(f))
			}
			if n := len(Expand(s)); n == 0 {
				t.Errorf("workload is empty")
			}
		})
	}
}

// TestExpandDeterministic: the same seed gives the same plan, another seed another one.
func TestExpandDeterministic(t *testing.T) {
	s, err := LoadFile("../../scenarios/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := Expand(s), Expand(s)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two expansions differ:\n%s", diff)
	}
	s.Spec.Seed++
	if cmp.Equal(a, Expand(s)) {
		t.Fatalf("seed %d and %d gave the same plan", s.Spec.Seed-1, s.Spec.Seed)
	}
	for i := 1; i < len(a); i++ {
		if a[i].At < a[i-1].At {
			t.Fatalf("plan not ordered by arrival at %d: %s after %s", i, a[i].At, a[i-1].At)
		}
	}
}

// TestPoissonRate: the generated arrivals keep the mean rate.
func TestPoissonRate(t *testing.T) {
	s := &Scenario{Spec: Spec{Seed: 1, Workload: Workload{Pods: 5000, Arrival: &Arrival{Process: ArrivalPoisson, Rate: 100},
		Mix: []MixEntry{{Name: "one", Weight: 1, Claim: ClaimSpec{Count: 1}}}}}}
	plan := Expand(s)
	span := plan[len(plan)-1].At.Seconds()
	if rate := float64(len(plan)) / span; rate < 90 || rate > 110 {
		t.Fatalf("mean rate %.1f pods/s, want about 100", rate)
	}
}

// TestExpandGangs: a gang mix entry makes each arrival a group of pods created together, with
// one gangRef and the group's size; other entries stay single pods.
func TestExpandGangs(t *testing.T) {
	s := &Scenario{Spec: Spec{Seed: 7, Workload: Workload{
		Bursts: []Burst{{At: D(0), Pods: 3}, {At: D(5 * time.Second), Pods: 3}},
		Mix: []MixEntry{
			{Name: "workers", Weight: 1, Gang: 4, Claim: ClaimSpec{Count: 8}, Duration: DurationRange{Min: D(time.Second), Max: D(9 * time.Second)}},
			{Name: "solo", Weight: 1, Claim: ClaimSpec{Count: 1}},
		},
	}}}
	plan := Expand(s)
	gangs := map[string][]PodPlan{}
	solo := 0
	for _, p := range plan {
		if p.Gang == "" {
			solo++
			if p.Kind != "solo" || p.GangSize != 0 {
				t.Errorf("pod %s outside a gang: kind %s, gangSize %d", p.Name, p.Kind, p.GangSize)
			}
			continue
		}
		gangs[p.Gang] = append(gangs[p.Gang], p)
	}
	if solo+4*len(gangs) != len(plan) || len(gangs)+solo != 6 || len(gangs) == 0 || solo == 0 {
		t.Fatalf("%d pods: %d gangs and %d single pods from 6 arrivals", len(plan), len(gangs), solo)
	}
	for g, members := range gangs {
		if len(members) != 4 {
			t.Errorf("gang %s has %d members, want 4", g, len(members))
		}
		for _, m := range members {
			if m.GangSize != 4 || m.At != members[0].At || m.Duration != members[0].Duration || m.Kind != "workers" {
				t.Errorf("gang %s member %s: size %d at %s for %s, first member at %s for %s", g, m.Name, m.GangSize, m.At, m.Duration, members[0].At, members[0].Duration)
			}
		}
	}
	if again := Expand(s); !reflect.DeepEqual(again, plan) {
		t.Error("the same seed expanded to another plan")
	}
}

// TestBadHardwareFiles: every file in testdata/bad-hardware fails with exactly the errors in
// its .err file (line, field path, message).
func TestBadHardwareFiles(t *testing.T) {
	inputs, err := filepath.Glob("testdata/bad-hardware/*.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no bad hardware files: %v", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		t.Run(name, func(t *testing.T) {
			_, err := LoadHardwareFile(in)
			if err == nil {
				t.Fatalf("LoadHardwareFile(%s) succeeded; want an error", in)
			}
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".err", []byte(err.Error()+"\n"))
		})
	}
}

// TestShippedHardware: every preset file loads through the line-aware loader too, and the
// mock NVML knows it by its name.
func TestShippedHardware(t *testing.T) {
	files, err := filepath.Glob("../../scenarios/hardware/*.yaml")
	if err != nil || len(files) < 15 {
		t.Fatalf("want at least 15 hardware presets, found %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			h, err := LoadHardwareFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if h.Metadata.Name+".yaml" != filepath.Base(f) {
				t.Errorf("metadata.name %q does not match the file name", h.Metadata.Name)
			}
			if _, ok := mock.Lookup(h.Metadata.Name); !ok {
				t.Errorf("mock NVML does not know preset %s", h.Metadata.Name)
			}
		})
	}
}

// TestTraceFileAbsolutePaths: a trace's pod and node lists given as absolute paths are read
// from there, not under the scenario's directory (as hardwareFile is), with the same result.
func TestTraceFileAbsolutePaths(t *testing.T) {
	in := "testdata/tracefile.input.yaml"
	rel, err := LoadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("testdata/traces")
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.ReplaceAll(string(data), "traces/", abs+"/")
	file := filepath.Join(t.TempDir(), "tracefile.yaml")
	if err := os.WriteFile(file, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadFile(file)
	if err != nil {
		t.Fatalf("absolute trace paths: %v", err)
	}
	if diff := cmp.Diff(string(render(t, rel)), strings.ReplaceAll(string(render(t, got)), abs+"/", "traces/")); diff != "" {
		t.Errorf("absolute trace paths load differently (-relative +absolute):\n%s", diff)
	}
}

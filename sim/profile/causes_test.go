package profile

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
)

// writeProfile writes a CPU profile whose samples have the given stacks (leaf first) and
// CPU nanoseconds.
func writeProfile(t *testing.T, stacks [][]string, ns []int64) string {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	funcs := map[string]*profile.Location{}
	for i, st := range stacks {
		var locs []*profile.Location
		for _, name := range st {
			loc := funcs[name]
			if loc == nil {
				fn := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name}
				p.Function = append(p.Function, fn)
				loc = &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn}}}
				p.Location = append(p.Location, loc)
				funcs[name] = loc
			}
			locs = append(locs, loc)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{ns[i] / 10_000_000, ns[i]}})
	}
	path := filepath.Join(t.TempDir(), "p.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBreakdownsSplitsMeasuredCPUByFirstMatchingRule(t *testing.T) {
	const webhook = "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating.(*mutatingDispatcher).Dispatch"
	const create = "k8s.io/apiserver/pkg/endpoints/handlers.createHandler.func1"
	const binding = "k8s.io/kubernetes/pkg/registry/core/pod/storage.(*BindingREST).Create"
	path := writeProfile(t, [][]string{
		{"encoding/json.Marshal", webhook, create},                     // the webhook inside a pod create
		{"k8s.io/apiserver/pkg/storage/etcd3.(*store).Create", create}, // a lease create
		{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate", binding, create},
		{"runtime.memmove"}, // nothing known
	}, []int64{30e6, 50e6, 10e6, 10e6})

	got, err := Breakdowns(map[string][]string{"kube-apiserver": {path}, "etcd": {path}},
		map[string]float64{"kube-apiserver": 20}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Process != "kube-apiserver" {
		t.Fatalf("want one breakdown, of kube-apiserver (etcd has no rules), got %+v", got)
	}
	b := got[0]
	if math.Abs(b.ProfiledSeconds-0.1) > 1e-9 || b.MsPerPod != 20 {
		t.Errorf("profiled %v s, %v ms per pod; want 0.1 s and 20 ms", b.ProfiledSeconds, b.MsPerPod)
	}
	want := map[string]float64{ // ms per pod: the measured 20 s split 30/50/10/10
		"admission webhooks (HTTPS call)": 6,
		"creates (Leases, Events, Pods)":  10,
		"pod bindings (pods/binding)":     2,
		Other:                             2,
	}
	if len(b.Shares) != len(want) {
		t.Fatalf("shares %+v, want causes %v", b.Shares, want)
	}
	for _, s := range b.Shares {
		if w, ok := want[s.Cause]; !ok || math.Abs(s.MsPerPod-w) > 1e-9 {
			t.Errorf("cause %q: %v ms per pod, want %v", s.Cause, s.MsPerPod, w)
		}
	}
	if b.Shares[0].Cause != "creates (Leases, Events, Pods)" {
		t.Errorf("shares not largest first: %+v", b.Shares)
	}
}

func TestSchedulerRulesTellPluginPointsApart(t *testing.T) {
	path := writeProfile(t, [][]string{
		{"github.com/gpu-scheduler/gpu-scheduler/scheduler/gpuclaim.(*Plugin).Filter", "k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).RunFilterPlugins"},
		{"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources.(*Fit).Filter", "k8s.io/kubernetes/pkg/scheduler/framework/runtime.(*frameworkImpl).RunFilterPlugins"},
	}, []int64{10e6, 30e6})
	for proc, want := range map[string]map[string]float64{
		"gpu-scheduler":  {"GpuClaimPlugin Filter": 0.25, "other plugins' Filter": 0.75},
		"kube-scheduler": {"other plugins' Filter": 1},
	} {
		by, total, err := Split([]string{path}, Rules[proc])
		if err != nil {
			t.Fatal(err)
		}
		if len(by) != len(want) {
			t.Errorf("%s: causes %v, want %v", proc, by, want)
		}
		for c, w := range want {
			if math.Abs(by[c]/total-w) > 1e-9 {
				t.Errorf("%s: %q is %v of the CPU, want %v", proc, c, by[c]/total, w)
			}
		}
	}
}

// The webhook's match conditions and the CRDs' CEL rules are causes of their own: on steady-fill
// the match conditions cost the API server as much CPU as the webhook's HTTPS call, and the
// rules run on every GpuClaim status write.
func TestAPIServerRulesTellMatchConditionsAndCRDRulesApart(t *testing.T) {
	const (
		dispatch = "k8s.io/apiserver/pkg/admission/plugin/webhook/validating.(*validatingDispatcher).Dispatch"
		match    = "k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions.(*matcher).Match"
		cel      = "k8s.io/apiserver/pkg/admission/plugin/cel.(*condition).ForInput"
		status   = "k8s.io/apiextensions-apiserver/pkg/registry/customresource.(*StatusREST).Update"
		crdRule  = "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel.(*Validator).Validate"
	)
	path := writeProfile(t, [][]string{
		{"k8s.io/apimachinery/pkg/runtime.structToUnstructured", cel, match, dispatch}, // a match condition
		{"net/http.(*Client).Do", dispatch},                                            // the call
		{crdRule, status},                                                              // a GpuClaim's rules
		{"k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate", status},       // the rest of its write
	}, []int64{20e6, 30e6, 10e6, 40e6})
	by, total, err := Split([]string{path}, Rules["kube-apiserver"])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"admission webhooks: match conditions (CEL)":       0.2,
		"admission webhooks (HTTPS call)":                  0.3,
		"custom-resource writes: CEL validation rules":     0.1,
		"custom-resource writes (GpuClaim, GpuNodeStatus)": 0.4,
	}
	if len(by) != len(want) {
		t.Errorf("causes %v, want %v", by, want)
	}
	for c, w := range want {
		if math.Abs(by[c]/total-w) > 1e-9 {
			t.Errorf("%q is %v of the CPU, want %v", c, by[c]/total, w)
		}
	}
}

package profile

import (
	"fmt"
	"os"
	"regexp"
	"sort"

	"github.com/google/pprof/profile"
)

// Rule names a cause by the functions whose presence anywhere on a sample's stack marks it.
type Rule struct {
	Cause string
	Funcs *regexp.Regexp
}

func rule(cause, funcs string) Rule { return Rule{Cause: cause, Funcs: regexp.MustCompile(funcs)} }

// Other is the cause of samples no rule matched.
const Other = "other"

// Rules are the causes of each process's CPU, tried in order: a sample counts for the first
// rule that any frame of its stack matches, so the specific causes (an admission webhook call
// inside a create) come before the general ones (the create). Processes not listed here get
// only their CPU total.
var Rules = map[string][]Rule{
	"kube-apiserver": {
		// A webhook's match conditions are CEL over the request: each evaluation converts the
		// object, the old object and the request to unstructured, so on a pod write they can
		// cost as much as the webhook's HTTPS call. Told apart from the call for that reason.
		rule("admission webhooks: match conditions (CEL)", `k8s\.io/apiserver/pkg/admission/plugin/webhook/matchconditions`),
		rule("admission webhooks (HTTPS call)", `k8s\.io/apiserver/pkg/admission/plugin/webhook/`),
		rule("admission policies (CEL)", `k8s\.io/apiserver/pkg/admission/plugin/policy/|k8s\.io/apiserver/pkg/admission/plugin/cel`),
		rule("watches (fan-out to watchers)", `storage/cacher\.\(\*cacheWatcher\)|storage/cacher\.\(\*Cacher\)\.dispatch|handlers\.\(\*WatchServer\)|handlers/watch|serveWatch`),
		rule("watch cache (ingesting etcd events)", `storage/cacher\.\(\*watchCache\)|storage/cacher\.\(\*Cacher\)\.processEvent|storage/etcd3\.\(\*watchChan\)|storage/cacher\.\(\*Cacher\)\.startCaching`),
		rule("pod bindings (pods/binding)", `registry/core/pod/storage\.\(\*BindingREST\)`),
		rule("gets and lists", `apiserver/pkg/endpoints/handlers\.(GetResource|ListResource|getResourceHandler)`),
		// The CRDs' x-kubernetes-validations run on every write of the object, status writes
		// included.
		rule("custom-resource writes: CEL validation rules", `apiextensions-apiserver/pkg/apiserver/schema/cel`),
		rule("custom-resource writes (GpuClaim, GpuNodeStatus)", `apiextensions-apiserver/pkg/apiserver\.\(\*crdHandler\)|apiextensions-apiserver/pkg/registry/customresource`),
		rule("pod status updates (kwok, scheduler conditions)", `registry/core/pod/storage\.\(\*StatusREST\)`),
		rule("creates (Leases, Events, Pods)", `apiserver/pkg/endpoints/handlers\.(CreateResource|CreateNamedResource|createHandler)`),
		rule("updates and patches (node heartbeats, pod patches)", `apiserver/pkg/endpoints/handlers\.(UpdateResource|PatchResource|\(\*patcher\))`),
		rule("deletes", `apiserver/pkg/endpoints/handlers\.(DeleteResource|DeleteCollection|deleteHandler)`),
		rule("metrics scrapes", `promhttp|prometheus\.\(\*Registry\)\.Gather`),
		rule("Go garbage collector", `^runtime\.gcBgMarkWorker|^runtime\.bgsweep|^runtime\.bgscavenge`),
		rule("authentication (client certificate chain verified per request)", `authentication/request/x509\.\(\*Authenticator\)`),
		rule("HTTP/2, TLS, filters (per request)", `net/http|golang\.org/x/net/http2|crypto/tls|apiserver/pkg/endpoints/filters|apiserver/pkg/server/filters`),
	},
	"gpu-scheduler":  schedulerRules(true),
	"kube-scheduler": schedulerRules(false),
	SelfProcess: {
		rule("agent fleet: mock NVML", `gpu-scheduler/agent/mock`),
		rule("agent fleet: GpuNodeStatus writes", `gpu-scheduler/agent.*(?i)(publish|write|update)`),
		rule("agent fleet: other", `gpu-scheduler/agent|sim/runner\..*[Ff]leet`),
		rule("recorder (watching pods, GpuNodeStatus)", `sim/runner\.\(\*recorder\)|client-go/tools/cache`),
		rule("workload (pod creates)", `sim/runner\.\(\*player\)`),
		rule("Go garbage collector", `^runtime\.gcBgMarkWorker|^runtime\.bgsweep|^runtime\.bgscavenge`),
		rule("client (HTTP, TLS, decoding)", `net/http|golang\.org/x/net/http2|crypto/tls|k8s\.io/client-go/rest|k8s\.io/apimachinery`),
	},
}

func schedulerRules(ours bool) []Rule {
	var r []Rule
	if ours {
		r = append(r,
			rule("GpuClaimPlugin PreFilter (claim, candidate nodes)", `gpuclaim\.\(\*Plugin\)\.PreFilter`),
			rule("GpuClaimPlugin Filter", `gpuclaim\.\(\*Plugin\)\.Filter`),
			rule("GpuClaimPlugin PreScore/Score", `gpuclaim\.\(\*Plugin\)\.(PreScore|Score|NormalizeScore)`),
			rule("GpuClaimPlugin Reserve..Bind (leases, binding, claim status)", `gpuclaim\.\(\*Plugin\)\.(Reserve|Unreserve|Permit|PreBind|Bind|PostBind)`),
			rule("GpuClaimPlugin informers and releases (leases, claims, GpuNodeStatus)", `scheduler/gpuclaim\.`),
		)
	}
	return append(r,
		rule("other plugins' Filter", `framework/runtime\.\(\*frameworkImpl\)\.(RunFilterPlugins|RunPreFilterPlugins)|findNodesThatPassFilters`),
		rule("other plugins' Score", `framework/runtime\.\(\*frameworkImpl\)\.(RunScorePlugins|RunPreScorePlugins)|prioritizeNodes`),
		rule("events (recorder)", `k8s\.io/client-go/tools/(events|record)`),
		rule("binding (DefaultBinder)", `defaultbinder|RunBindPlugins`),
		rule("snapshot of the node cache", `\(\*cacheImpl\)\.UpdateSnapshot|internal/cache\.`),
		rule("scheduling queue and event handlers", `internal/queue|eventhandlers|client-go/tools/cache`),
		rule("status patches, events (API client)", `k8s\.io/client-go|k8s\.io/apimachinery|net/http|golang\.org/x/net/http2|crypto/tls`),
		rule("metrics", `prometheus|component-base/metrics`),
		rule("Go garbage collector", `^runtime\.gcBgMarkWorker|^runtime\.bgsweep|^runtime\.bgscavenge`),
	)
}

// Share is one cause's part of a process's CPU.
type Share struct {
	Cause string `json:"cause"`
	// Fraction of the process's profiled CPU.
	Fraction float64 `json:"fraction"`
	// Seconds is Fraction of the process's measured CPU time.
	Seconds float64 `json:"seconds"`
	// MsPerPod is Seconds per bound pod, in milliseconds.
	MsPerPod float64 `json:"msPerPod"`
}

// Breakdown is one process's CPU split by cause.
type Breakdown struct {
	Process string `json:"process"`
	// Seconds is the process's CPU time during the workload (from /proc), ProfiledSeconds the
	// CPU its profiles sampled.
	Seconds         float64 `json:"seconds"`
	ProfiledSeconds float64 `json:"profiledSeconds"`
	MsPerPod        float64 `json:"msPerPod"`
	Shares          []Share `json:"shares"`
}

// Split classifies the samples of a process's profiles by rules and returns the CPU
// nanoseconds by cause and their total.
func Split(files []string, rules []Rule) (map[string]float64, float64, error) {
	by := map[string]float64{}
	var total float64
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return nil, 0, err
		}
		p, err := profile.Parse(f)
		_ = f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("profile %s: %w", path, err)
		}
		idx := len(p.SampleType) - 1 // cpu nanoseconds, after the sample count
		for _, s := range p.Sample {
			v := float64(s.Value[idx])
			by[Classify(s, rules)] += v
			total += v
		}
	}
	return by, total, nil
}

// Classify returns the cause of one sample.
func Classify(s *profile.Sample, rules []Rule) string {
	for _, r := range rules {
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil && r.Funcs.MatchString(l.Function.Name) {
					return r.Cause
				}
			}
		}
	}
	return Other
}

// Breakdowns splits each profiled process's measured CPU seconds (cpu, by process) by cause,
// per bound pod as well. Processes without profiles or rules are left out.
func Breakdowns(files map[string][]string, cpu map[string]float64, bound int) ([]Breakdown, error) {
	var out []Breakdown
	procs := make([]string, 0, len(files))
	for p := range files {
		procs = append(procs, p)
	}
	sort.Strings(procs)
	for _, proc := range procs {
		rules, ok := Rules[proc]
		if !ok || len(files[proc]) == 0 {
			continue
		}
		by, total, err := Split(files[proc], rules)
		if err != nil {
			return out, fmt.Errorf("CPU breakdown of %s: %w", proc, err)
		}
		if total == 0 {
			continue
		}
		b := Breakdown{Process: proc, Seconds: cpu[proc], ProfiledSeconds: total / 1e9}
		if bound > 0 {
			b.MsPerPod = 1000 * b.Seconds / float64(bound)
		}
		for cause, v := range by {
			sh := Share{Cause: cause, Fraction: v / total}
			sh.Seconds = sh.Fraction * b.Seconds
			if bound > 0 {
				sh.MsPerPod = 1000 * sh.Seconds / float64(bound)
			}
			b.Shares = append(b.Shares, sh)
		}
		sort.Slice(b.Shares, func(i, j int) bool { return b.Shares[i].Fraction > b.Shares[j].Fraction })
		out = append(out, b)
	}
	return out, nil
}

package scenario

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpu-scheduler/gpu-scheduler/agent/mock"
	gpuv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
)

// Limits on what one run on one machine can do.
const (
	// MaxNodes over all pools.
	MaxNodes = 20000
	// MaxPods in one workload.
	MaxPods = 100000
	// MaxGangSize is the most pods one gang may have (the GpuClaim's gangSize limit).
	MaxGangSize = 1024
	// MaxRate is the fastest arrival rate: the control plane creates ~1,000 pods/s on 2 cores,
	// and a faster rate is a burst anyway.
	MaxRate = 2000.0
	// DefaultTimeout bounds the workload phase of a run.
	DefaultTimeout = 10 * time.Minute
	// DefaultNamespace holds the workload.
	DefaultNamespace = "sim"
	// DefaultSchedulerDown is how long SchedulerRestart keeps the scheduler killed.
	DefaultSchedulerDown = 5 * time.Second
	// DefaultFault is what GPUUnhealthy injects.
	DefaultFault = "xid79"
)

// topologyGPUs returns how many GPUs a mock topology has, from the agent's own mock NVML.
func topologyGPUs(name string) (int, bool) {
	s, err := mock.New(name)
	if err != nil {
		return 0, false
	}
	return s.NumDevices(), true
}

// Default fills in every default, in place. Load calls it; it is idempotent.
func (s *Scenario) Default() {
	for i := range s.Spec.NodePools {
		p := &s.Spec.NodePools[i]
		if p.GPUsPerNode == 0 {
			if n, ok := topologyGPUs(p.Topology); ok {
				p.GPUsPerNode = n
			}
			if p.Hardware != nil {
				p.GPUsPerNode = p.Hardware.Spec.GPUs.Count
			}
		}
	}
	w := &s.Spec.Workload
	if w.Namespace == "" {
		w.Namespace = DefaultNamespace
	}
	if w.Arrival != nil && w.Arrival.Process == "" {
		w.Arrival.Process = ArrivalPoisson
	}
	for i := range w.Mix {
		m := &w.Mix[i]
		defaultClaim(&m.Claim)
		if m.Name == "" {
			m.Name = fmt.Sprintf("%dgpu-%s", m.Claim.Count, m.Claim.Policy)
		}
		if m.Duration.Max.Duration == 0 {
			m.Duration.Max = m.Duration.Min
		}
	}
	for i := range w.Trace {
		e := &w.Trace[i]
		if e.Name == "" {
			e.Name = "trace-" + strconv.Itoa(i)
		}
		if e.Claim == nil && e.GPUs > 0 {
			e.Claim = &ClaimSpec{Count: e.GPUs}
			e.GPUs = 0
		}
		if e.Claim != nil {
			defaultClaim(e.Claim)
		}
	}
	for i := range w.ClaimTemplates {
		defaultClaim(&w.ClaimTemplates[i].Claim)
	}
	for i := range s.Spec.Faults {
		f := &s.Spec.Faults[i]
		if f.Type == FaultGPUUnhealthy && f.Fault == "" {
			f.Fault = DefaultFault
		}
		if f.Type == FaultSchedulerRestart && f.Down.Duration == 0 {
			f.Down = D(DefaultSchedulerDown)
		}
	}
	e := &s.Spec.Expectations
	zero := func(p **int) {
		if *p == nil {
			v := 0
			*p = &v
		}
	}
	zero(&e.MaxDoubleBookedGPUs)
	zero(&e.MaxUnhealthyAllocations)
	zero(&e.MaxLeasesLeft)
	zero(&e.MaxOvercommittedGPUs)
	if len(w.Controllers) > 0 {
		zero(&e.MaxClaimsLeft)
		zero(&e.MaxPodsLeft)
	}
	if s.Spec.Timeout.Duration == 0 {
		s.Spec.Timeout = D(DefaultTimeout)
	}
}

func defaultClaim(c *ClaimSpec) {
	if c.Policy == "" {
		c.Policy = string(gpuv1.PolicyContiguous)
	}
	if c.Exclusivity == "" {
		c.Exclusivity = string(gpuv1.Exclusive)
	}
	if t := c.GangTopology; t != nil && t.Mode == "" {
		t.Mode = string(gpuv1.TopologyPreferred)
	}
}

func oneOf(vals ...string) string { return strings.Join(vals, ", ") }

// validate checks a defaulted scenario.
func (c *checker) validate(s *Scenario) {
	if s.APIVersion != APIVersion {
		c.add("apiVersion", "must be %s, got %q", APIVersion, s.APIVersion)
	}
	if s.Kind != Kind {
		c.add("kind", "must be %s, got %q", Kind, s.Kind)
	}
	if msgs := validation.IsDNS1123Label(s.Metadata.Name); len(msgs) > 0 {
		c.add("metadata.name", "%q is not a valid name (%s); use lower-case letters, digits and '-'", s.Metadata.Name, strings.Join(msgs, "; "))
	}
	pools := c.validatePools(s.Spec.NodePools)
	sp := s.Spec.Scheduler
	if sp.NodeStrategy != "" && !gpuv1.IsNodeStrategy(sp.NodeStrategy) {
		names := make([]string, len(gpuv1.NodeStrategies))
		for i, n := range gpuv1.NodeStrategies {
			names[i] = string(n)
		}
		c.add("spec.scheduler.nodeStrategy", "%q is unknown; use one of %s", sp.NodeStrategy, oneOf(names...))
	}
	if sp.QPS < 0 {
		c.add("spec.scheduler.qps", "must not be negative, got %d; leave it out for the default 1000", sp.QPS)
	}
	c.validateWorkload(&s.Spec.Workload, s.Spec.NodePools)
	c.validateFaults(s.Spec.Faults, pools)
	e := s.Spec.Expectations
	for path, v := range map[string]*int{
		"spec.expectations.maxDoubleBookedGPUs":     e.MaxDoubleBookedGPUs,
		"spec.expectations.maxUnhealthyAllocations": e.MaxUnhealthyAllocations,
		"spec.expectations.maxLeasesLeft":           e.MaxLeasesLeft,
		"spec.expectations.maxOvercommittedGPUs":    e.MaxOvercommittedGPUs,
		"spec.expectations.maxPartialGangs":         e.MaxPartialGangs,
		"spec.expectations.maxClaimsLeft":           e.MaxClaimsLeft,
		"spec.expectations.maxPodsLeft":             e.MaxPodsLeft,
	} {
		if v != nil && *v < 0 {
			c.add(path, "must not be negative, got %d", *v)
		}
	}
	if r := e.MinIslandLocalRatio; r != nil && (*r < 0 || *r > 1) {
		c.add("spec.expectations.minIslandLocalRatio", "must be a ratio between 0 and 1, got %g; write 0.95 for 95%%", *r)
	}
	if r := e.MinThroughputVsPremade; r != nil {
		switch {
		case *r <= 0:
			c.add("spec.expectations.minThroughputVsPremade", "must be positive, got %g; write 0.9 for 90%%", *r)
		case !s.Spec.Baseline.PremadeClaims:
			c.add("spec.expectations.minThroughputVsPremade", "needs the runs of bare pods with pre-made claims and with the claim templates; set spec.baseline.premadeClaims: true")
		}
	}
	if len(s.Spec.Workload.Controllers) == 0 {
		if e.MaxClaimsLeft != nil {
			c.add("spec.expectations.maxClaimsLeft", "is counted only for a workload of controllers (spec.workload.controllers); remove it")
		}
		if e.MaxPodsLeft != nil {
			c.add("spec.expectations.maxPodsLeft", "is counted only for a workload of controllers (spec.workload.controllers); remove it")
		}
	}
	if s.Spec.Baseline.GangPodAffinity && !s.Spec.Workload.HasGangTopology() {
		c.add("spec.baseline.gangPodAffinity", "gives the members of gangs with gangTopology a pod affinity on its level, but no gang states gangTopology; add it to a gang's claim or remove gangPodAffinity")
	}
	if s.Spec.Baseline.PremadeClaims && len(s.Spec.Workload.Controllers) == 0 {
		c.add("spec.baseline.premadeClaims", "compares claim templates with pre-made claims, so it needs spec.workload.controllers; remove it")
	}
	if v := e.MaxGangIdleGPUSeconds; v != nil && *v < 0 {
		c.add("spec.expectations.maxGangIdleGPUSeconds", "must not be negative, got %g", *v)
	}
	if d := e.AllScheduledWithin; d != nil && d.Duration <= 0 {
		c.add("spec.expectations.allScheduledWithin", "must be positive, got %s", d.Duration)
	}
	if s.Spec.Timeout.Duration < 0 {
		c.add("spec.timeout", "must be positive, got %s", s.Spec.Timeout.Duration)
	}
	if d := e.AllScheduledWithin; d != nil && d.Duration > s.Spec.Timeout.Duration {
		c.add("spec.expectations.allScheduledWithin", "%s is longer than spec.timeout %s, so it can never be checked; raise spec.timeout", d.Duration, s.Spec.Timeout.Duration)
	}
}

func (c *checker) validatePools(pools []NodePool) map[string]NodePool {
	byName := map[string]NodePool{}
	if len(pools) == 0 {
		c.add("spec.nodePools", "at least one node pool is required")
	}
	total := 0
	for i, p := range pools {
		path := fmt.Sprintf("spec.nodePools[%d]", i)
		if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 || len(p.Name) > 40 {
			c.add(path+".name", "%q is not a valid pool name; use at most 40 lower-case letters, digits and '-'", p.Name)
		}
		if _, dup := byName[p.Name]; dup {
			c.add(path+".name", "pool %q is defined twice; give each pool its own name", p.Name)
		}
		byName[p.Name] = p
		if p.Count < 1 {
			c.add(path+".count", "must be at least 1, got %d", p.Count)
		}
		total += max(p.Count, 0)
		if p.CPUMilli < 0 || p.MemoryMiB < 0 {
			c.add(path, "cpuMilli and memoryMiB must not be negative; leave them out for 128 cores and 1 TiB")
		}
		n, ok := topologyGPUs(p.Topology)
		if p.Hardware != nil {
			n, ok = p.Hardware.Spec.GPUs.Count, true
		}
		switch {
		case p.Topology == "" && (p.Hardware != nil || p.HardwareFile != ""):
			// resolveHardware reported what is wrong with the pool's hardware
		case p.Topology == "":
			c.add(path+".topology", "is required: name a preset (one of %s), or describe the node with hardware or hardwareFile", oneOf(mock.Names()...))
		case !ok:
			c.add(path+".topology", "%q is not a known topology; use one of %s", p.Topology, oneOf(mock.Names()...))
		case p.GPUsPerNode != n:
			c.add(path+".gpusPerNode", "topology %s has %d GPUs, not %d; leave gpusPerNode out", p.Topology, n, p.GPUsPerNode)
		}
		for k, v := range p.Labels {
			lp := fmt.Sprintf("%s.labels[%q]", path, k)
			if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
				c.add(lp, "%q is not a valid label key: %s", k, strings.Join(msgs, "; "))
			}
			if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
				c.add(lp, "%q is not a valid label value: %s", v, strings.Join(msgs, "; "))
			}
		}
		for j, t := range p.Taints {
			tp := fmt.Sprintf("%s.taints[%d]", path, j)
			if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
				c.add(tp+".key", "%q is not a valid taint key: %s", t.Key, strings.Join(msgs, "; "))
			}
			switch t.Effect {
			case "NoSchedule", "PreferNoSchedule", "NoExecute":
			default:
				c.add(tp+".effect", "%q is not a taint effect; use NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
			}
		}
	}
	if total > MaxNodes {
		c.add("spec.nodePools", "%d nodes in all; one machine runs at most %d", total, MaxNodes)
	}
	return byName
}

func (c *checker) validateWorkload(w *Workload, pools []NodePool) {
	const p = "spec.workload"
	if msgs := validation.IsDNS1123Label(w.Namespace); len(msgs) > 0 {
		c.add(p+".namespace", "%q is not a valid namespace name", w.Namespace)
	}
	if w.Namespace == "gpu-scheduler" || w.Namespace == "kube-system" {
		c.add(p+".namespace", "%q is reserved for the system (the webhook skips it); use another, e.g. sim", w.Namespace)
	}
	generated := w.Arrival != nil || len(w.Bursts) > 0 || w.Pods != 0
	if len(w.Trace) > 0 && generated {
		c.add(p+".trace", "a trace lists every pod itself; remove pods, arrival and bursts, or remove the trace")
	}
	if len(w.Controllers) > 0 && (generated || len(w.Trace) > 0 || len(w.Mix) > 0) {
		c.add(p+".controllers", "Jobs and Deployments make their own pods; remove pods, arrival, bursts, mix and trace, or remove controllers")
	}
	if len(w.Trace) == 0 && !generated && len(w.Controllers) == 0 {
		c.add(p, "no pods: give pods with an arrival rate, bursts, an explicit trace, or controllers")
	}
	c.validateControllers(w, pools)
	if w.Pods < 0 {
		c.add(p+".pods", "must not be negative, got %d", w.Pods)
	}
	if w.Pods > 0 && w.Arrival == nil {
		c.add(p+".arrival", "pods %d needs an arrival process to space them out, e.g. arrival: {rate: 50}", w.Pods)
	}
	if a := w.Arrival; a != nil {
		if w.Pods <= 0 {
			c.add(p+".pods", "an arrival process needs the number of pods it generates, e.g. pods: 500")
		}
		switch a.Process {
		case ArrivalPoisson, ArrivalUniform:
		default:
			c.add(p+".arrival.process", "%q is unknown; use %s or %s", a.Process, ArrivalPoisson, ArrivalUniform)
		}
		if a.Rate <= 0 {
			c.add(p+".arrival.rate", "must be positive (pods per second), got %g", a.Rate)
		} else if a.Rate > MaxRate {
			c.add(p+".arrival.rate", "%g pods/s is more than the control plane can create (at most %g); lower it or use bursts", a.Rate, MaxRate)
		}
		if a.Start.Duration < 0 {
			c.add(p+".arrival.start", "must not be negative, got %s", a.Start.Duration)
		}
	}
	total := max(w.Pods, 0)
	for i, b := range w.Bursts {
		bp := fmt.Sprintf("%s.bursts[%d]", p, i)
		if b.At.Duration < 0 {
			c.add(bp+".at", "must not be negative, got %s", b.At.Duration)
		}
		if b.Pods < 1 {
			c.add(bp+".pods", "must be at least 1, got %d", b.Pods)
		}
		total += max(b.Pods, 0)
	}
	biggest := 1
	for _, m := range w.Mix {
		biggest = max(biggest, min(m.Gang, MaxGangSize))
	}
	total = total*biggest + len(w.Trace)
	if total > MaxPods {
		c.add(p, "%d pods in all; one run plays at most %d", total, MaxPods)
	}
	if generated && len(w.Mix) == 0 {
		c.add(p+".mix", "generated pods need a mix of claims, e.g. - {weight: 1, claim: {count: 1}}")
	}
	if len(w.Trace) > 0 && len(w.Mix) > 0 {
		c.add(p+".mix", "a trace gives each pod its claim; remove the mix")
	}
	names := map[string]bool{}
	for i, m := range w.Mix {
		mp := fmt.Sprintf("%s.mix[%d]", p, i)
		if m.Weight < 1 {
			c.add(mp+".weight", "must be at least 1, got %d", m.Weight)
		}
		if names[m.Name] {
			c.add(mp+".name", "%q is used twice; give each mix entry its own name", m.Name)
		}
		names[m.Name] = true
		c.validateClaim(mp+".claim", &m.Claim, pools)
		if m.Duration.Min.Duration < 0 {
			c.add(mp+".duration.min", "must not be negative, got %s", m.Duration.Min.Duration)
		}
		if m.Duration.Max.Duration < m.Duration.Min.Duration {
			c.add(mp+".duration.max", "%s is shorter than min %s", m.Duration.Max.Duration, m.Duration.Min.Duration)
		}
		switch {
		case m.Gang < 0 || m.Gang > MaxGangSize:
			c.add(mp+".gang", "must be between 2 and %d pods, got %d", MaxGangSize, m.Gang)
		case m.Gang == 1:
			c.add(mp+".gang", "a gang of 1 is a single pod; remove gang or make it 2 or more")
		case m.Gang == 0 && m.Claim.GangTopology != nil:
			c.add(mp+".claim.gangTopology", "places the nodes of a gang; set gang: N (2 or more) or remove gangTopology")
		}
	}
	pods := map[string]bool{}
	gangs := map[string][]int{}
	for i, e := range w.Trace {
		tp := fmt.Sprintf("%s.trace[%d]", p, i)
		if msgs := validation.IsDNS1123Label(e.Name); len(msgs) > 0 {
			c.add(tp+".name", "%q is not a valid pod name; use lower-case letters, digits and '-'", e.Name)
		}
		if pods[e.Name] {
			c.add(tp+".name", "pod %q appears twice in the trace", e.Name)
		}
		pods[e.Name] = true
		if e.At.Duration < 0 {
			c.add(tp+".at", "must not be negative, got %s", e.At.Duration)
		}
		switch {
		case e.Claim == nil:
			c.add(tp+".gpus", "each trace entry needs gpus: N or a claim")
		case e.GPUs != 0:
			c.add(tp+".gpus", "give either gpus or claim, not both")
		default:
			c.validateClaim(tp+".claim", e.Claim, pools)
			if e.Claim.GangTopology != nil && e.Gang == "" {
				c.add(tp+".claim.gangTopology", "places the nodes of a gang; name the gang (gang: NAME) or remove gangTopology")
			}
		}
		if e.Duration.Duration < 0 {
			c.add(tp+".duration", "must not be negative, got %s", e.Duration.Duration)
		}
		if e.DeleteAt != nil && e.DeleteAt.Duration <= e.At.Duration {
			c.add(tp+".deleteAt", "%s is not after at %s; a pod is deleted after it is created", e.DeleteAt.Duration, e.At.Duration)
		}
		if e.Gang != "" {
			if msgs := validation.IsDNS1123Subdomain(e.Gang); len(msgs) > 0 {
				c.add(tp+".gang", "%q is not a valid gang name; use lower-case letters, digits, '-' and '.'", e.Gang)
			}
			gangs[e.Gang] = append(gangs[e.Gang], i)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(gangs)) {
		if idx := gangs[g]; len(idx) == 1 {
			c.add(fmt.Sprintf("%s.trace[%d].gang", p, idx[0]), "gang %q has only this pod; a gang needs 2 or more", g)
		} else if len(idx) > MaxGangSize {
			c.add(fmt.Sprintf("%s.trace[%d].gang", p, idx[0]), "gang %q has %d pods; at most %d", g, len(idx), MaxGangSize)
		}
	}
}

// validateControllers checks the claim templates and the Jobs and Deployments that name them.
func (c *checker) validateControllers(w *Workload, pools []NodePool) {
	const p = "spec.workload"
	templates := map[string]bool{}
	var known []string
	for i, t := range w.ClaimTemplates {
		tp := fmt.Sprintf("%s.claimTemplates[%d]", p, i)
		// The claim is named <pod>-<template>; a DNS label keeps it readable.
		if msgs := validation.IsDNS1123Label(t.Name); len(msgs) > 0 || len(t.Name) > 40 {
			c.add(tp+".name", "%q is not a valid template name; use at most 40 lower-case letters, digits and '-'", t.Name)
		}
		if templates[t.Name] {
			c.add(tp+".name", "template %q is defined twice; give each its own name", t.Name)
		}
		if !templates[t.Name] {
			known = append(known, t.Name)
		}
		templates[t.Name] = true
		c.validateClaim(tp+".claim", &w.ClaimTemplates[i].Claim, pools)
		if w.ClaimTemplates[i].Claim.GangTopology != nil {
			c.add(tp+".claim.gangTopology", "the simulator plays gang topology only for gangs of bare pods (mix gang: N or trace gang: NAME); remove it")
		}
	}
	if len(w.ClaimTemplates) > 0 && len(w.Controllers) == 0 {
		c.add(p+".claimTemplates", "no controller names a template; add controllers (Jobs or Deployments) or remove claimTemplates")
	}
	names := map[string]bool{}
	total := 0
	for i, ctl := range w.Controllers {
		cp := fmt.Sprintf("%s.controllers[%d]", p, i)
		// Pods are named <name>-<hash or index>-<5 characters>, and a Job's name is a label value.
		if msgs := validation.IsDNS1123Label(ctl.Name); len(msgs) > 0 || len(ctl.Name) > 40 {
			c.add(cp+".name", "%q is not a valid name; use at most 40 lower-case letters, digits and '-'", ctl.Name)
		}
		if names[ctl.Name] {
			c.add(cp+".name", "%q is used twice; give each Job and Deployment its own name", ctl.Name)
		}
		names[ctl.Name] = true
		switch ctl.Kind {
		case ControllerJob:
		case ControllerDeployment:
			if ctl.Indexed {
				c.add(cp+".indexed", "only a Job has completion indexes; remove it or use kind Job")
			}
			if ctl.Duration.Duration != 0 {
				c.add(cp+".duration", "a Deployment's pods run until the end (its ReplicaSet would replace a finished one); remove it or use kind Job")
			}
		default:
			c.add(cp+".kind", "%q is unknown; use %s or %s", ctl.Kind, ControllerJob, ControllerDeployment)
		}
		if ctl.Replicas < 1 {
			c.add(cp+".replicas", "must be at least 1, got %d", ctl.Replicas)
		}
		total += max(ctl.Replicas, 0)
		if ctl.At.Duration < 0 {
			c.add(cp+".at", "must not be negative, got %s", ctl.At.Duration)
		}
		if ctl.Duration.Duration < 0 {
			c.add(cp+".duration", "must not be negative, got %s", ctl.Duration.Duration)
		}
		switch {
		case ctl.ClaimTemplate == "":
			c.add(cp+".claimTemplate", "is required: name one of spec.workload.claimTemplates")
		case !templates[ctl.ClaimTemplate]:
			if len(known) == 0 {
				c.add(cp+".claimTemplate", "%q is not defined; add it to spec.workload.claimTemplates", ctl.ClaimTemplate)
			} else {
				c.add(cp+".claimTemplate", "%q is not in spec.workload.claimTemplates; use one of %s", ctl.ClaimTemplate, oneOf(known...))
			}
		}
	}
	if total > MaxPods {
		c.add(p+".controllers", "%d pods in all; one run plays at most %d", total, MaxPods)
	}
	if len(w.Controllers) > 0 && w.Deterministic {
		c.add(p+".deterministic", "controllers create their pods themselves, so they cannot be played one at a time; remove deterministic")
	}
}

func (c *checker) validateClaim(path string, cl *ClaimSpec, pools []NodePool) {
	if cl.Count < 1 || cl.Count > gpuv1.MaxGPUsPerClaim {
		c.add(path+".count", "must be between 1 and %d, got %d", gpuv1.MaxGPUsPerClaim, cl.Count)
	}
	switch gpuv1.Policy(cl.Policy) {
	case gpuv1.PolicyContiguous, gpuv1.PolicySpread:
		if len(cl.PreferIDs) > 0 {
			c.add(path+".preferIds", "is only used with policy preferIds; remove it or set policy: preferIds")
		}
	case gpuv1.PolicyPreferIDs:
		if len(cl.PreferIDs) == 0 {
			c.add(path+".preferIds", "policy preferIds needs the IDs it prefers, e.g. preferIds: [0, 1]")
		}
	default:
		c.add(path+".policy", "%q is unknown; use one of %s", cl.Policy, oneOf(string(gpuv1.PolicyContiguous), string(gpuv1.PolicySpread), string(gpuv1.PolicyPreferIDs)))
	}
	for i, id := range cl.PreferIDs {
		if id < 0 || id >= gpuv1.MaxGPUsPerClaim {
			c.add(fmt.Sprintf("%s.preferIds[%d]", path, i), "GPU ID %d is out of range 0..%d", id, gpuv1.MaxGPUsPerClaim-1)
		}
	}
	switch gpuv1.Exclusivity(cl.Exclusivity) {
	case gpuv1.Exclusive, gpuv1.Shared:
	case gpuv1.MIG:
		c.add(path+".exclusivity", "MIG is not implemented by the scheduler; use Exclusive or Shared")
	default:
		c.add(path+".exclusivity", "%q is unknown; use Exclusive or Shared", cl.Exclusivity)
	}
	if sh := cl.Share; sh != nil {
		if gpuv1.Exclusivity(cl.Exclusivity) != gpuv1.Shared {
			c.add(path+".share", "a share needs exclusivity Shared, not %q", cl.Exclusivity)
		}
		if sh.ComputePercent < 0 || sh.ComputePercent > 100 || sh.MemoryPercent < 0 || sh.MemoryPercent > 100 || sh.ComputePercent+sh.MemoryPercent == 0 {
			c.add(path+".share", "computePercent %d and memoryPercent %d: each must be 0..100 and one of them above 0", sh.ComputePercent, sh.MemoryPercent)
		}
	}
	if t := cl.GangTopology; t != nil {
		if msgs := validation.IsQualifiedName(t.Level); len(msgs) > 0 {
			c.add(path+".gangTopology.level", "%q is not a node label key (%s); e.g. nvidia.com/gpu.clique", t.Level, strings.Join(msgs, "; "))
		}
		switch gpuv1.TopologyMode(t.Mode) {
		case gpuv1.TopologyRequired, gpuv1.TopologyPreferred:
		default:
			c.add(path+".gangTopology.mode", "%q is unknown; use Required or Preferred", t.Mode)
		}
	}
	if t := cl.Topology; t != nil {
		switch gpuv1.TopologyMode(t.Mode) {
		case gpuv1.TopologyRequired, gpuv1.TopologyPreferred, gpuv1.TopologyIgnore, "":
		default:
			c.add(path+".topology.mode", "%q is unknown; use Required, Preferred or Ignore", t.Mode)
		}
		if t.MinBandwidthGBps < 0 {
			c.add(path+".topology.minBandwidthGBps", "must not be negative, got %d", t.MinBandwidthGBps)
		}
		if t.Mode == string(gpuv1.TopologyRequired) && cl.Policy == string(gpuv1.PolicySpread) {
			c.add(path+".topology.mode", "Required topology keeps GPUs in one island, which policy spread cannot do; use Preferred or policy contiguous")
		}
	}
	for k, v := range cl.Selector {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			c.add(fmt.Sprintf("%s.selector[%q]", path, k), "%q is not a valid label key", k)
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			c.add(fmt.Sprintf("%s.selector[%q]", path, k), "%q is not a valid label value", v)
		}
	}
	if cl.Count < 1 {
		return
	}
	// Some pool must be able to hold the claim at all, or every such pod waits forever.
	var fits []string
	largest := 0
	for _, p := range pools {
		if !selects(cl.Selector, p) {
			continue
		}
		largest = max(largest, p.GPUsPerNode)
		if p.GPUsPerNode >= cl.Count {
			fits = append(fits, p.Name)
		}
	}
	switch {
	case largest == 0 && len(cl.Selector) > 0:
		c.add(path+".selector", "selects no node pool; match the labels of a pool (node labels are the pool's labels plus gpu.scheduling/pool and gpu.scheduling/topology)")
	case len(fits) == 0 && largest > 0:
		c.add(path+".count", "%d GPUs do not fit on any selected node (the largest has %d); lower the count", cl.Count, largest)
	}
}

// selects reports whether selector matches the nodes of pool.
func selects(selector map[string]string, p NodePool) bool {
	for k, v := range selector {
		got, ok := p.Labels[k]
		switch k {
		case gpuv1.LabelPrefix + "pool":
			got, ok = p.Name, true
		case gpuv1.LabelTopology:
			got, ok = p.Topology, true
		}
		if !ok || got != v {
			return false
		}
	}
	return true
}

func (c *checker) validateFaults(faults []Fault, pools map[string]NodePool) {
	known := []string{FaultGPUUnhealthy, FaultGPURecover, FaultNodeRemoved, FaultSchedulerRestart, FaultRacingScheduler}
	racing := 0
	for i, f := range faults {
		fp := fmt.Sprintf("spec.faults[%d]", i)
		if f.At.Duration < 0 {
			c.add(fp+".at", "must not be negative, got %s", f.At.Duration)
		}
		needNode, needGPU := false, false
		switch f.Type {
		case FaultGPUUnhealthy, FaultGPURecover:
			needNode, needGPU = true, true
		case FaultNodeRemoved:
			needNode = true
		case FaultSchedulerRestart:
		case FaultRacingScheduler:
			racing++
			if racing == 2 {
				c.add(fp+".type", "only one racing scheduler is supported; remove this fault")
			}
		default:
			c.add(fp+".type", "%q is unknown; use one of %s", f.Type, oneOf(known...))
			continue
		}
		if needNode {
			pool, ok := pools[f.Pool]
			switch {
			case f.Pool == "":
				c.add(fp+".pool", "%s needs the pool of the node", f.Type)
			case !ok:
				names := make([]string, 0, len(pools))
				for n := range pools {
					names = append(names, n)
				}
				sort.Strings(names)
				c.add(fp+".pool", "%q is not a pool of this scenario; use one of %s", f.Pool, oneOf(names...))
			}
			switch {
			case f.Node == nil:
				c.add(fp+".node", "%s needs the node's index in its pool, e.g. node: 0", f.Type)
			case ok && (*f.Node < 0 || *f.Node >= pool.Count):
				c.add(fp+".node", "index %d is outside pool %s (0..%d)", *f.Node, f.Pool, pool.Count-1)
			}
			if needGPU {
				switch {
				case f.GPU == nil:
					c.add(fp+".gpu", "%s needs the GPU index, e.g. gpu: 0", f.Type)
				case ok && (*f.GPU < 0 || *f.GPU >= pool.GPUsPerNode):
					c.add(fp+".gpu", "GPU %d is outside the node's GPUs (0..%d)", *f.GPU, pool.GPUsPerNode-1)
				}
			} else if f.GPU != nil {
				c.add(fp+".gpu", "is only used by %s and %s; remove it", FaultGPUUnhealthy, FaultGPURecover)
			}
		} else {
			if f.Pool != "" {
				c.add(fp+".pool", "is not used by %s; remove it", f.Type)
			}
			if f.Node != nil {
				c.add(fp+".node", "is not used by %s; remove it", f.Type)
			}
			if f.GPU != nil {
				c.add(fp+".gpu", "is not used by %s; remove it", f.Type)
			}
		}
		if f.Type == FaultGPUUnhealthy {
			mf, err := mock.ParseFault(f.Fault)
			if err != nil {
				c.add(fp+".fault", "%v", err)
			} else if mf.Kind == mock.FaultRecover {
				c.add(fp+".fault", "recover is not a fault; use type %s", FaultGPURecover)
			}
		} else if f.Fault != "" {
			c.add(fp+".fault", "is only used by %s; remove it", FaultGPUUnhealthy)
		}
		if f.Type != FaultSchedulerRestart && f.Down.Duration != 0 {
			c.add(fp+".down", "is only used by %s; remove it", FaultSchedulerRestart)
		}
		if f.Type == FaultSchedulerRestart && f.Down.Duration < 0 {
			c.add(fp+".down", "must not be negative, got %s", f.Down.Duration)
		}
	}
}

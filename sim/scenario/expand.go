package scenario

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// PodPlan is one pod of an expanded workload.
type PodPlan struct {
	// Name of the pod and of its GpuClaim.
	Name string `json:"name"`
	// At is the creation offset from the start of the workload.
	At time.Duration `json:"at"`
	// Kind is the mix entry's name, or "trace".
	Kind  string    `json:"kind"`
	Claim ClaimSpec `json:"claim"`
	// Duration is the run time once started; 0 runs until the end.
	Duration time.Duration `json:"duration,omitempty"`
	// DeleteAt deletes the pod at this offset; 0 never.
	DeleteAt time.Duration `json:"deleteAt,omitempty"`
	// Gang is the gangRef of the pod's claim and GangSize the number of pods in the gang;
	// empty and 0 outside a gang.
	Gang     string `json:"gang,omitempty"`
	GangSize int    `json:"gangSize,omitempty"`
	// CPUMilli and MemoryMiB the pod requests; 0 for the simulator's defaults.
	CPUMilli  int `json:"cpuMilli,omitempty"`
	MemoryMiB int `json:"memoryMiB,omitempty"`
	// Controller is the Job or Deployment whose pod this is (a slot: the controller names the
	// pod itself; Name is the pod's name only when it is played as a bare pod), Template the
	// GpuClaimTemplate its pod template names. Empty for bare pods.
	Controller string `json:"controller,omitempty"`
	Template   string `json:"template,omitempty"`
	// Index is the pod's place among its controller's pods (0-based).
	Index int `json:"index,omitempty"`
}

// Expand returns the workload's pods ordered by arrival. The result depends only on the
// scenario (and so its seed): the same file always gives the same list.
func Expand(s *Scenario) []PodPlan {
	w := s.Spec.Workload
	if len(w.Controllers) > 0 {
		return expandControllers(w)
	}
	if len(w.Trace) > 0 {
		out := make([]PodPlan, 0, len(w.Trace))
		gangSize := map[string]int{}
		for _, e := range w.Trace {
			if e.Gang != "" {
				gangSize[e.Gang]++
			}
		}
		for _, e := range w.Trace {
			p := PodPlan{Name: e.Name, At: e.At.Duration, Kind: "trace", Duration: e.Duration.Duration, Gang: e.Gang, GangSize: gangSize[e.Gang], CPUMilli: e.CPUMilli, MemoryMiB: e.MemoryMiB}
			if e.Claim != nil {
				p.Claim = *e.Claim
			}
			if e.DeleteAt != nil {
				p.DeleteAt = e.DeleteAt.Duration
			}
			out = append(out, p)
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
		return out
	}
	// Two streams, so that changing the mix does not move the arrival times.
	arrivals := rand.New(rand.NewPCG(uint64(s.Spec.Seed), 0x61727269766c)) // "arrivl"
	choices := rand.New(rand.NewPCG(uint64(s.Spec.Seed), 0x6d6978))        // "mix"
	var times []time.Duration
	if a := w.Arrival; a != nil && a.Rate > 0 {
		t := float64(a.Start.Duration)
		for i := 0; i < w.Pods; i++ {
			times = append(times, time.Duration(math.Round(t/1e6))*time.Millisecond)
			gap := 1 / a.Rate
			if a.Process == ArrivalPoisson {
				gap = arrivals.ExpFloat64() / a.Rate
			}
			t += gap * float64(time.Second)
		}
	}
	for _, b := range w.Bursts {
		for range b.Pods {
			times = append(times, b.At.Duration)
		}
	}
	sort.SliceStable(times, func(i, j int) bool { return times[i] < times[j] })
	total := 0
	for _, m := range w.Mix {
		total += m.Weight
	}
	width := len(fmt.Sprint(len(times)))
	out := make([]PodPlan, 0, len(times))
	for i, at := range times {
		m := w.Mix[pick(choices, w.Mix, total)]
		d := m.Duration.Min.Duration
		if span := m.Duration.Max.Duration - d; span > 0 {
			d += time.Duration(choices.Int64N(int64(span) + 1)).Round(time.Millisecond)
		}
		name := fmt.Sprintf("pod-%0*d", width, i)
		if m.Gang < 2 {
			out = append(out, PodPlan{Name: name, At: at, Kind: m.Name, Claim: cloneClaim(m.Claim), Duration: d})
			continue
		}
		// A gang: its members arrive together and run equally long.
		for j := range m.Gang {
			out = append(out, PodPlan{
				Name: fmt.Sprintf("%s-%d", name, j), At: at, Kind: m.Name, Claim: cloneClaim(m.Claim), Duration: d,
				Gang: "gang-" + name[len("pod-"):], GangSize: m.Gang,
			})
		}
	}
	return out
}

// expandControllers gives each Job and Deployment one plan entry per pod, all at its creation
// offset, named <controller>-<index>.
func expandControllers(w Workload) []PodPlan {
	claims := map[string]ClaimSpec{}
	for _, t := range w.ClaimTemplates {
		claims[t.Name] = t.Claim
	}
	var out []PodPlan
	for _, c := range w.Controllers {
		for i := range c.Replicas {
			out = append(out, PodPlan{
				Name: fmt.Sprintf("%s-%d", c.Name, i), At: c.At.Duration, Kind: c.Name,
				Claim: cloneClaim(claims[c.ClaimTemplate]), Duration: c.Duration.Duration,
				Controller: c.Name, Template: c.ClaimTemplate, Index: i,
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Controller returns the workload's Job or Deployment of that name.
func (w *Workload) Controller(name string) (Controller, bool) {
	for _, c := range w.Controllers {
		if c.Name == name {
			return c, true
		}
	}
	return Controller{}, false
}

// ClaimTemplate returns the workload's claim template of that name.
func (w *Workload) ClaimTemplate(name string) (ClaimTemplate, bool) {
	for _, t := range w.ClaimTemplates {
		if t.Name == name {
			return t, true
		}
	}
	return ClaimTemplate{}, false
}

func cloneClaim(c ClaimSpec) ClaimSpec {
	c.PreferIDs = append([]int(nil), c.PreferIDs...)
	return c
}

func pick(r *rand.Rand, mix []MixEntry, total int) int {
	if total <= 0 {
		return 0
	}
	n := r.IntN(total)
	for i, m := range mix {
		if n < m.Weight {
			return i
		}
		n -= m.Weight
	}
	return len(mix) - 1
}

// Summary describes an expanded workload.
type Summary struct {
	Pods   int            `json:"pods"`
	GPUs   int            `json:"gpus"`
	ByKind map[string]int `json:"byKind"`
	// Span is the offset of the last arrival.
	Span time.Duration `json:"span"`
}

// Summarize counts pods and GPUs of a plan.
func Summarize(plan []PodPlan) Summary {
	s := Summary{ByKind: map[string]int{}}
	for _, p := range plan {
		s.Pods++
		s.GPUs += p.Claim.Count
		s.ByKind[p.Kind]++
		s.Span = max(s.Span, p.At)
	}
	return s
}

// TotalNodes and TotalGPUs of the scenario's pools.
func (s *Scenario) TotalNodes() (nodes, gpus int) {
	for _, p := range s.Spec.NodePools {
		nodes += p.Count
		gpus += p.Count * p.GPUsPerNode
	}
	return nodes, gpus
}

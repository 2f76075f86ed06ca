package metrics

import (
	"slices"
	"time"
)

// Steps are the moments of one pod's way from its create call to its binding, on the
// simulator's clock; a step with OK false was not seen (the stock scheduler has no leases or
// claims, and a pod that never bound has no end). Planned is the arrival the workload planned
// for the pod, before its create call: the simulator's own backlog lies between the two.
//
// Scheduled is when the scheduler's own Scheduled event says the pod was bound (on the
// scheduler's clock, once its Binding returned): unlike Bound, it is not seen through a
// watch by the simulator, whose process also runs the agent fleet, so the gap between the two
// is how late the simulator saw the binding.
type Steps struct {
	Planned, Created, Seen, PreBind, Leased, Claimed, Bound, Scheduled                 time.Duration
	PlannedOK, CreatedOK, SeenOK, PreBindOK, LeasedOK, ClaimedOK, BoundOK, ScheduledOK bool
}

// Span is one stage of the waterfall over the pods that have both its ends.
type Span struct {
	Name  string        `json:"name"`
	Pods  int           `json:"pods"`
	P50   time.Duration `json:"p50"`
	P99   time.Duration `json:"p99"`
	Mean  time.Duration `json:"mean"`
	Total bool          `json:"total,omitempty"`
}

// Waterfall stage names.
const (
	SpanPlayer   = "planned arrival -> create call (the simulator's create workers; not in the latency)"
	SpanCreate   = "create call -> pod seen (API write, webhooks, watch)"
	SpanSchedule = "pod seen -> PreBind began (queue, Filter/Score, Reserve, Permit)"
	SpanLeases   = "PreBind began -> GPU leases seen (lease creates)"
	SpanClaim    = "leases seen -> claim taken seen (claim status write)"
	SpanBind     = "claim taken -> pod seen bound (Bind)"
	SpanToBound  = "pod seen -> pod seen bound"
	SpanTotal    = "create call -> pod seen bound"
	// SpanScheduled is the latency without the simulator's watch: to the scheduler's own
	// stamp of the binding.
	SpanScheduled = "create call -> Scheduled event (the scheduler's stamp once its Binding returned; no watch)"
	// SpanSeenLate is how long after the scheduler's stamp the simulator saw the pod bound.
	SpanSeenLate = "Scheduled event -> pod seen bound (the simulator's watch)"
)

// ComputeWaterfall is where the bound pods' time went, stage by stage, each stage's p50, p99
// and mean over the pods. With gpu-scheduler's steps seen, the time from the pod seen to its
// binding splits into the scheduling cycle, the lease creates, the claim write and the Bind;
// without them (the stock scheduler) it is one stage. The stages' percentiles do not add up to
// the total's: each is taken over its own distribution. A stage whose end was seen before its
// start (the lease and claim watches are separate streams) counts as 0. Where the planned
// arrivals are known, a first stage says how far the create calls fell behind them: the
// latency counts from the create call, so a backlog of creates is not in it.
// Where the Scheduled events were read, two more rows follow the total: the latency to the
// scheduler's own stamp of the binding, and how late after it the simulator saw the binding.
func ComputeWaterfall(pods []Steps) []Span {
	type stage struct {
		name     string
		from, to func(s Steps) (time.Duration, bool)
		total    bool
	}
	planned := func(s Steps) (time.Duration, bool) { return s.Planned, s.PlannedOK }
	created := func(s Steps) (time.Duration, bool) { return s.Created, s.CreatedOK }
	seen := func(s Steps) (time.Duration, bool) { return s.Seen, s.SeenOK }
	preBind := func(s Steps) (time.Duration, bool) { return s.PreBind, s.PreBindOK }
	leased := func(s Steps) (time.Duration, bool) { return s.Leased, s.LeasedOK }
	claimed := func(s Steps) (time.Duration, bool) { return s.Claimed, s.ClaimedOK }
	bound := func(s Steps) (time.Duration, bool) { return s.Bound, s.BoundOK }
	scheduled := func(s Steps) (time.Duration, bool) { return s.Scheduled, s.ScheduledOK }
	stages := []stage{{name: SpanPlayer, from: planned, to: created}, {name: SpanCreate, from: created, to: seen}}
	split := false
	for _, p := range pods {
		if p.BoundOK && p.PreBindOK && p.ClaimedOK {
			split = true
			break
		}
	}
	if split {
		stages = append(stages,
			stage{name: SpanSchedule, from: seen, to: preBind},
			stage{name: SpanLeases, from: preBind, to: leased},
			stage{name: SpanClaim, from: leased, to: claimed},
			stage{name: SpanBind, from: claimed, to: bound})
	} else {
		stages = append(stages, stage{name: SpanToBound, from: seen, to: bound})
	}
	stages = append(stages, stage{name: SpanTotal, from: created, to: bound, total: true},
		stage{name: SpanScheduled, from: created, to: scheduled}, stage{name: SpanSeenLate, from: scheduled, to: bound})
	var out []Span
	for _, st := range stages {
		var d []time.Duration
		for _, p := range pods {
			if !p.BoundOK {
				continue
			}
			a, okA := st.from(p)
			b, okB := st.to(p)
			if okA && okB {
				d = append(d, max(b-a, 0))
			}
		}
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		out = append(out, Span{Name: st.name, Pods: len(d), P50: percentile(d, 0.5), P99: percentile(d, 0.99), Mean: sum / time.Duration(len(d)), Total: st.total})
	}
	return out
}

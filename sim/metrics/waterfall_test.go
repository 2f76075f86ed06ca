package metrics

import (
	"testing"
	"time"
)

func TestComputeWaterfall(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Two of gpu-scheduler's pods with every step seen (the second's lease seen after its claim:
	// that stage counts 0), and one never bound, which counts nowhere.
	ours := []Steps{
		{Created: 0, Seen: ms(5), PreBind: ms(25), Leased: ms(40), Claimed: ms(50), Bound: ms(60),
			CreatedOK: true, SeenOK: true, PreBindOK: true, LeasedOK: true, ClaimedOK: true, BoundOK: true},
		{Created: ms(100), Seen: ms(103), PreBind: ms(200), Leased: ms(290), Claimed: ms(280), Bound: ms(400),
			CreatedOK: true, SeenOK: true, PreBindOK: true, LeasedOK: true, ClaimedOK: true, BoundOK: true},
		{Created: ms(100), Seen: ms(900), CreatedOK: true, SeenOK: true},
	}
	want := map[string][2]time.Duration{ // p50, p99
		SpanCreate:   {ms(3), ms(5)},
		SpanSchedule: {ms(20), ms(97)},
		SpanLeases:   {ms(15), ms(90)},
		SpanClaim:    {0, ms(10)},
		SpanBind:     {ms(10), ms(120)},
		SpanTotal:    {ms(60), ms(300)},
	}
	got := ComputeWaterfall(ours)
	if len(got) != len(want) {
		t.Fatalf("got %d stages %+v, want %d", len(got), got, len(want))
	}
	for _, sp := range got {
		w, ok := want[sp.Name]
		if !ok || sp.P50 != w[0] || sp.P99 != w[1] || sp.Pods != 2 {
			t.Errorf("stage %q: p50 %s p99 %s over %d pods, want %s %s over 2", sp.Name, sp.P50, sp.P99, sp.Pods, w[0], w[1])
		}
	}
	if got[len(got)-1].Name != SpanTotal || !got[len(got)-1].Total {
		t.Errorf("last stage %+v, want the total", got[len(got)-1])
	}

	// The stock scheduler: no steps between seen and bound, so one stage there.
	stock := ComputeWaterfall([]Steps{{Created: 0, Seen: ms(4), Bound: ms(30), CreatedOK: true, SeenOK: true, BoundOK: true}})
	names := []string{}
	for _, sp := range stock {
		names = append(names, sp.Name)
	}
	if len(stock) != 3 || stock[1].Name != SpanToBound || stock[1].P50 != ms(26) {
		t.Errorf("stock stages %v (%+v), want create, seen -> bound 26ms, total", names, stock)
	}

	// With the planned arrivals known, the create calls' lag behind them comes first: one pod
	// created on time, one 700 ms late (the simulator's workers all busy), one never bound.
	late := ComputeWaterfall([]Steps{
		{Planned: ms(10), Created: ms(10), Seen: ms(14), Bound: ms(30), PlannedOK: true, CreatedOK: true, SeenOK: true, BoundOK: true},
		{Planned: ms(20), Created: ms(720), Seen: ms(730), Bound: ms(760), PlannedOK: true, CreatedOK: true, SeenOK: true, BoundOK: true},
		{Planned: ms(30), Created: ms(900), PlannedOK: true, CreatedOK: true},
	})
	if len(late) != 4 || late[0].Name != SpanPlayer || late[0].Pods != 2 || late[0].P50 != 0 || late[0].P99 != ms(700) || late[0].Mean != ms(350) {
		t.Errorf("stages %+v, want first the create backlog over 2 pods: p50 0, p99 700ms, mean 350ms", late)
	}
	if late[len(late)-1].Name != SpanTotal || late[len(late)-1].P99 != ms(40) {
		t.Errorf("last stage %+v, want the total from the create call (p99 40ms)", late[len(late)-1])
	}
}

func TestComputeWaterfallScheduledStamp(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Two pods stamped by their scheduler; the simulator saw the first binding 900 ms after the
	// stamp and the second 2 ms before it (its watch beat the scheduler's return: counts 0). A
	// third pod has no Scheduled event (dropped) and counts in neither row.
	got := ComputeWaterfall([]Steps{
		{Created: 0, Seen: ms(5), Bound: ms(1000), Scheduled: ms(100), CreatedOK: true, SeenOK: true, BoundOK: true, ScheduledOK: true},
		{Created: ms(50), Seen: ms(60), Bound: ms(90), Scheduled: ms(92), CreatedOK: true, SeenOK: true, BoundOK: true, ScheduledOK: true},
		{Created: ms(70), Seen: ms(75), Bound: ms(95), CreatedOK: true, SeenOK: true, BoundOK: true},
	})
	want := map[string]Span{
		SpanScheduled: {Pods: 2, P50: ms(42), P99: ms(100), Mean: ms(71)},
		SpanSeenLate:  {Pods: 2, P50: 0, P99: ms(900), Mean: ms(450)},
	}
	found := 0
	for _, sp := range got {
		w, ok := want[sp.Name]
		if !ok {
			continue
		}
		found++
		if sp.Pods != w.Pods || sp.P50 != w.P50 || sp.P99 != w.P99 || sp.Mean != w.Mean || sp.Total {
			t.Errorf("%q: %+v, want %+v", sp.Name, sp, w)
		}
	}
	if found != len(want) {
		t.Errorf("stages %+v: want both rows of the scheduler's stamp", got)
	}
	// The total stays the simulator's own reading, over all three pods.
	for _, sp := range got {
		if sp.Total && (sp.Name != SpanTotal || sp.Pods != 3) {
			t.Errorf("total %+v, want %q over 3 pods", sp, SpanTotal)
		}
	}
}

package gpuclaim

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	apiv1 "github.com/gpu-scheduler/gpu-scheduler/api/v1"
	"github.com/gpu-scheduler/gpu-scheduler/scheduler/allocator"
)

// Score ranks a node by the quality of the claim's placement on it (island fit, bandwidth,
// policy fit, islands kept whole) and by the pod's node strategy: its
// gpu.scheduling/node-strategy annotation, else the plugin's nodeStrategy arg. The allocator
// already scores 0..100, the framework's range, so no normalization is needed.
func (p *Plugin) Score(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := getState(cs)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	name := ni.Node().Name
	res, ok := s.result(name)
	if !ok {
		return 0, nil
	}
	strategy := s.strategy
	if strategy == "" {
		strategy = p.strategy // PreScore did not run (it always does in the framework)
	}
	if strategy == allocator.Fragmentation {
		// FGD's pick alone: the filter already kept multi-GPU claims to nodes where their
		// island fits, and a blend with the placement quality would let a node that strands
		// more capacity win on locality (fragmentation.go).
		return int64(s.ranks[name]) * fwk.MaxScore / 100, nil
	}
	if strategy.Ranked() {
		return int64(allocator.NodeScoreWith(res, s.ranks[name])) * fwk.MaxScore / 100, nil
	}
	n, _ := p.ledger.NodeView(name)
	if n == nil {
		return 0, nil
	}
	score := allocator.NodeScore(n, res, strategy)
	if fill, ok := s.fill[name]; ok {
		score = packScore(score, fill) // domainpack.go
	}
	return int64(score) * fwk.MaxScore / 100, nil
}

// ScoreExtensions is nil: scores are already in range.
func (p *Plugin) ScoreExtensions() fwk.ScoreExtensions { return nil }

// PreScore skips scoring for pods that name no claim, settles the pod's node strategy, and
// for a strategy that ranks nodes against each other (round-robin, random, cost-aware) scores
// the candidate nodes once for all Score calls.
func (p *Plugin) PreScore(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if _, ok := claimName(pod); !ok {
		return fwk.NewStatus(fwk.Skip)
	}
	s, err := getState(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	s.strategy, err = p.podStrategy(pod)
	if err != nil {
		return fwk.AsStatus(err) // PreFilter refuses such pods; this is a backstop
	}
	packs := p.packsDomains(s.strategy, s.domain)
	if !packs && !s.strategy.Ranked() {
		return nil
	}
	names := make([]string, 0, len(nodes))
	for _, ni := range nodes {
		if ni.Node() != nil {
			names = append(names, ni.Node().Name)
		}
	}
	if packs {
		s.fill = p.domainFill(names)
		return nil
	}
	switch s.strategy {
	case allocator.RoundRobin:
		s.ranks = allocator.RoundRobinScores(names, p.roundRobin.get())
	case allocator.Random:
		s.ranks = allocator.RandomScores(names, 0, string(pod.UID))
	case allocator.CostAware:
		costs := make(map[string]float64, len(nodes))
		for _, ni := range nodes {
			if n := ni.Node(); n != nil {
				if v, ok := n.Labels[apiv1.LabelNodeCost]; ok {
					if c, err := allocator.ParseCost(v); err == nil {
						costs[n.Name] = c
					}
				}
			}
		}
		s.ranks = allocator.CostScores(names, func(n string) (float64, bool) { c, ok := costs[n]; return c, ok })
	case allocator.Fragmentation:
		s.ranks, s.fragPicks = p.fragmentationScores(s, pod, nodes) // fragmentation.go
	}
	return nil
}

// podStrategy is the pod's node strategy: its annotation, else the plugin's default.
func (p *Plugin) podStrategy(pod *v1.Pod) (allocator.Strategy, error) {
	v, ok := pod.Annotations[apiv1.AnnotationNodeStrategy]
	if !ok {
		return p.strategy, nil
	}
	s, err := allocator.ParseStrategy(v)
	if err != nil {
		return "", fmt.Errorf("pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, apiv1.AnnotationNodeStrategy, err)
	}
	return s, nil
}

// roundRobinCursor is the node the last round-robin pod was reserved on; the next one starts
// after it. One cursor per scheduler: round-robin pods of all workloads take turns.
type roundRobinCursor struct {
	mu   sync.Mutex
	last string
}

func (c *roundRobinCursor) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

func (c *roundRobinCursor) set(node string) {
	c.mu.Lock()
	c.last = node
	c.mu.Unlock()
}

package fleet

import (
	"context"
	"fmt"
)

// Suspend stops node's agent the way a hung or killed agent process stops: no more status
// writes, no more liveness renewals, so the scheduler comes to judge the node stale. The node
// keeps its mock GPUs; Resume starts a new agent over them, as a restarted process. Suspend
// returns once the agent has stopped writing.
func (f *Fleet) Suspend(ctx context.Context, node string) error {
	f.mu.Lock()
	m := f.members[node]
	if m == nil {
		f.mu.Unlock()
		return fmt.Errorf("suspend the agent of node %s: %w", node, ErrUnknownNode)
	}
	if !m.suspended {
		m.suspended = true
		m.cancel()
	}
	done := m.done
	f.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("suspend the agent of node %s: %w", node, ctx.Err())
	}
}

// Resume starts a new agent for a node whose agent Suspend stopped.
func (f *Fleet) Resume(node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.members[node]
	if m == nil {
		return fmt.Errorf("resume the agent of node %s: %w", node, ErrUnknownNode)
	}
	if !m.suspended {
		return nil
	}
	if f.ctx == nil || f.nodes == nil {
		return fmt.Errorf("resume the agent of node %s: the fleet is not running", node)
	}
	n, err := f.nodes.Get(node)
	if err != nil {
		return fmt.Errorf("resume the agent of node %s: %w", node, err)
	}
	return f.runLocked(f.ctx, n, m)
}

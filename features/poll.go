package features

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Bounds of the waits. Scheduling a pod on an idle control plane takes milliseconds; the
// bounds only matter when something is wrong, and then they decide how long CI waits for the
// verdict.
const (
	pollInterval = 100 * time.Millisecond
	// waitBound bounds waiting for a pod to be scheduled, a claim to change phase, an agent to
	// publish: anything the components do on their own at once.
	waitBound = 45 * time.Second
	// waitSlow bounds waits that include a deliberate delay (a pod that runs for a while, an
	// agent that waits for a GPU to stay quiet before it trusts it again).
	waitSlow = 2 * time.Minute
)

// condition reports whether what a step waits for holds, and what it saw instead. An error
// stops the wait at once: it is for violations that no amount of waiting can repair (a GPU
// held twice), not for a condition that does not hold yet.
type condition func(ctx context.Context) (ok bool, observed string, err error)

// eventually polls cond every pollInterval until it holds, it returns an error, or timeout
// passes. The error names what was awaited and what was last observed, so that a failed
// scenario shows the objects that disagree.
func eventually(ctx context.Context, timeout time.Duration, what string, cond condition) error {
	var observed string
	var hard error
	// The conditions make their API calls with the caller's ctx, not with the poll's deadline:
	// a request cut short by the deadline would replace what was last seen with a rate limiter
	// complaint.
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(context.Context) (bool, error) {
		ok, obs, err := cond(ctx)
		observed = obs
		if err != nil {
			hard = err
			return false, err
		}
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case hard != nil:
		if observed != "" {
			return fmt.Errorf("%w\n%s", hard, observed)
		}
		return hard
	case errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err):
		return fmt.Errorf("%s: not within %s; last seen:\n%s", what, timeout, observed)
	default:
		return fmt.Errorf("%s: %w; last seen:\n%s", what, err, observed)
	}
}

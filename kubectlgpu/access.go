package kubectlgpu

import (
	"fmt"
	"io"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A namespace user (bound to edit or view by a RoleBinding) may read the GpuClaims,
// GpuClaimTemplates and GpuWorkloads of their namespace, and nothing cluster-wide: not the
// GpuNodeStatuses, the nodes, the GPU leases (in the scheduler's namespace) or other namespaces'
// pods and claims. A view that needs such a read shows what the user may see and says, in a
// note on stderr, what it left out and which permission that takes, instead of failing with
// the API server's Forbidden.

// Notes are what a view left out because the user may not read it.
type Notes []string

// denied records a note and reports true when err is the API server refusing the read;
// leftOut says what the view goes without, perm the permission it takes ("list nodes").
func (n *Notes) denied(err error, leftOut, perm string) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	note := fmt.Sprintf("%s: you may not %s (ask a cluster admin for that read access)", leftOut, perm)
	if !slices.Contains(*n, note) {
		*n = append(*n, note)
	}
	return true
}

// print writes the notes to w, one line each.
func (n Notes) print(w io.Writer) {
	for _, s := range n {
		fmt.Fprintln(w, "Note: "+s)
	}
}

// The permissions the fleet views need, as notes name them.
const (
	permStatuses = "list gpunodestatuses.gpu.scheduling (cluster scope)"
	permLeases   = "list leases.coordination.k8s.io in all namespaces (the GPU leases live in the scheduler's namespace)"
	permNodes    = "list nodes (cluster scope)"
	permDryRun   = "list nodes, gpunodestatuses.gpu.scheduling, and the gpuclaims, pods and leases of all namespaces, as the scheduler does"
)

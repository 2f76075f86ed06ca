// Package ledger is what the scheduler knows and decides about GPUs, without the scheduler
// framework: the ledger of every node's GPUs and who holds each (from the agents'
// GpuNodeStatuses, the GPU leases and the pods' allocations), the verdict on one node for one
// claim (Judge), the nodes offered first (Candidates, PickCandidates), the gang fit, a pod's
// gpu-scheduling-map entry (PinOf), and DryRun, which feeds a ledger from a snapshot of the
// cluster and judges every node as Filter would.
//
// The scheduler plugin (scheduler/gpuclaim) feeds one ledger from its informers and calls it
// from its extension points; kubectl gpu runs DryRun and NodeFromStatus on what it reads, so
// the CLI and the scheduler give the same answers without the CLI linking the framework.
package ledger

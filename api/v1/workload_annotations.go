package v1

const (
	// AnnotationNodeStrategy is set on a pod (the GpuWorkload controller writes it from
	// spec.nodeStrategy): one of NodeStrategies. It overrides the scheduler plugin's default
	// nodeStrategy for that pod only.
	AnnotationNodeStrategy = GroupName + "/node-strategy"
	// LabelNodeCost is a node label the cost-aware strategy reads: a non-negative number,
	// lower is cheaper. A node without it ranks last.
	LabelNodeCost = LabelPrefix + "cost"

	// LabelWorkload is set on the pods of a GpuWorkload: the workload's name.
	LabelWorkload = LabelPrefix + "workload"
	// LabelReplicaIndex is set on the pods of a GpuWorkload: the replica's index.
	LabelReplicaIndex = LabelPrefix + "replica-index"
	// LabelAttempt is set on the pods of a GpuWorkload: which pod of the replica this is
	// (0 for the first, one more for each retry).
	LabelAttempt = LabelPrefix + "attempt"
	// FinalizerWorkload keeps a GpuWorkload until its pods and claims are gone.
	FinalizerWorkload = GroupName + "/workload-cleanup"
)

// IsNodeStrategy reports whether s names a node strategy.
func IsNodeStrategy(s string) bool {
	for _, v := range NodeStrategies {
		if string(v) == s {
			return true
		}
	}
	return false
}

package gpuclaim

import ()

// DefaultMaxCandidateNodes is Args.MaxCandidateNodes's default: the framework's own floor on how
// many feasible nodes it looks for before it stops filtering (minFeasibleNodesToFind in
// kube-scheduler). Below 100 offered nodes the framework filters and scores every one of them;
// above, it filters until it has found a share of them (percentageOfNodesToScore, 10 % at 5,000
// nodes: 500) and scores those, in an order that has nothing to do with GPUs. Offering the 100
// best-placed nodes instead of every node with room gives Filter and Score a fifth of the work
// at 5,000 nodes and a better sample: the one the node strategy would rank first.
const DefaultMaxCandidateNodes = 100

package cluster

// WorkloadAPIArgs, appended to kube-apiserver's command line (Config.APIServerExtraArgs), make it
// serve Kubernetes' own gang API (KEP-4671) as 1.36 has it: the scheduling.k8s.io/v1alpha2
// Workload and PodGroup, and the pod field spec.schedulingGroup, which the apiserver drops unless
// the alpha GenericWorkload feature gate is on. gpu-scheduler takes gangs from those PodGroups.
var WorkloadAPIArgs = []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"}

@podgroup
Feature: Gangs from PodGroups: the ecosystem's gang APIs place their pods all or nothing
  Pods that name a GpuClaimTemplate and belong to a pod group form one of gpu-scheduler's gangs,
  with no annotation beyond the template: the coscheduling plugin's PodGroup
  (scheduling.x-k8s.io/v1alpha1, pod label scheduling.x-k8s.io/pod-group), as Kubeflow, JobSet
  and LeaderWorkerSet label their pods, and Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2,
  pod spec.schedulingGroup, behind the GenericWorkload feature gate). gpu-controller makes each
  pod's claim in the gang "<api group>/<group name>" of the group's minMember (or its gang
  policy's minCount) pods; the gang is placed all or nothing, each pod with its claim's islands,
  and, when the template sets gangTopology (no gangRef), the whole group inside one domain.

  Scenario: A Job in a coscheduling PodGroup starts all its pods, each inside one island, or none
    # A "two-island" node has one island of 4 healthy GPUs (its GPU 7 is unhealthy): one node
    # holds one member, and the gang waits for three.
    Given a cluster of 1 "two-island" node
    And GpuClaimTemplate "x4" for 4 GPUs inside one NVLink island
    And PodGroup "train" of at least 3 pods
    When plain Job "train" runs 3 pods at once for 60 seconds each from claim template "x4" in PodGroup "train"
    Then the claims of the pods of Job "train" are in gang "scheduling.x-k8s.io/train" of 3
    And no pod of Job "train" is bound
    And no GPU lease is held
    When 2 "two-island" nodes join the cluster
    Then the 3 live pods of Job "train" hold 4 GPUs each from claims they own
    And each pod of Job "train" has its GPUs in one island
    And no GPU is held twice

  Scenario: Kubernetes' own PodGroup with the gang policy places its pods together
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x8" for 8 GPUs
    And Kubernetes PodGroup "workers" with a gang of at least 2 pods
    When pod "w0" uses claim template "x8" in Kubernetes PodGroup "workers"
    And pod "w1" uses claim template "x8" in Kubernetes PodGroup "workers"
    Then the claim of pod "w0" from template "x8" is in gang "scheduling.k8s.io/workers" of 2
    And the claim of pod "w1" from template "x8" is in gang "scheduling.k8s.io/workers" of 2
    And pod "w0" is pending: "gang {namespace}/scheduling.k8s.io/workers: the free GPUs cannot take all 2 pods still to place at once"
    And no GPU lease is held
    When 1 "dgx-a100" node joins the cluster
    Then pods "w0" and "w1" are bound
    And no GPU is held twice

  Scenario: A pod in a PodGroup whose template names a gang of its own is refused with the reason
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "gang" for 1 GPU in a gang of 2
    And PodGroup "train" of at least 2 pods
    When pod "p" uses claim template "gang" in PodGroup "train"
    Then pod "p" has a Warning event "PodGroupGang" saying "its GpuClaimTemplate "gang" sets spec.gangRef "gang": a pod belongs to one gang"

  Scenario: A pod whose PodGroup does not exist yet waits, and joins its gang once the group appears
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x4" for 4 GPUs
    When pod "a" uses claim template "x4" in PodGroup "late"
    And pod "b" uses claim template "x4" in PodGroup "late"
    Then pod "a" has a Warning event "PodGroupGang" saying "pod is in PodGroup late (scheduling.x-k8s.io) (label scheduling.x-k8s.io/pod-group)"
    When PodGroup "late" of at least 2 pods
    Then pods "a" and "b" are bound
    And the claim of pod "a" from template "x4" is in gang "scheduling.x-k8s.io/late" of 2

  Scenario: A PodGroup's pods land together inside the fullest NVLink domain they fit
    Given 4 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-a"
    And 4 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-b"
    And pod "tenant" claims:
      """yaml
      devices: {count: 8}
      selector: {matchLabels: {nvidia.com/gpu.clique: rack-b}}
      """
    And pod "tenant" is bound
    And GpuClaimTemplate "clique8" for 8 GPUs whose gang lies inside one "nvidia.com/gpu.clique" domain
    And PodGroup "racks" of at least 3 pods
    When pod "w0" uses claim template "clique8" in PodGroup "racks"
    And pod "w1" uses claim template "clique8" in PodGroup "racks"
    And pod "w2" uses claim template "clique8" in PodGroup "racks"
    Then the claim of pod "w0" from template "clique8" is in gang "scheduling.x-k8s.io/racks" of 3
    And pods "w0", "w1" and "w2" are bound
    And pods "w0", "w1" and "w2" run on nodes labelled "nvidia.com/gpu.clique=rack-b"
    And no GPU is held twice

@kueue
Feature: Kueue admits Jobs and GpuWorkloads by their GPUs; gpu-scheduler places them
  Teams share GPUs through Kueue (sigs.k8s.io/kueue, its own controller manager and webhooks):
  each team has a LocalQueue and a ClusterQueue with a nominal quota of nvidia.com/gpu, the
  ClusterQueues in one cohort, so a team may borrow what the other leaves unused and Kueue takes
  it back by preempting the borrower. Kueue admits a Job by its pod template, before any pod
  exists; gpu-webhook in device-plugin mode writes the claim template's GPU count into that
  template when the Job is created. Once Kueue unsuspends the Job, gpu-scheduler places its pods
  with their islands; when Kueue preempts a Job, its pods go and their GPU leases with them.
  A GpuWorkload labelled with a queue has its pods queued by Kueue's pod integration as one pod
  group: gpu-webhook writes each pod's GPU request, Kueue's webhook gates the pods, Kueue admits
  the group when its GPUs fit the quota, and gpu-scheduler then places it, gang and islands.

  Scenario: Two teams share a GPU cohort: admission with borrowing, a Job over quota waiting, borrowed GPUs reclaimed
    Given Kueue runs with its pod integration, and gpu-webhook in device-plugin mode writes the GPU requests
    And a cluster of 2 "pcie-nvlink-pairs" nodes
    And GpuClaimTemplate "pair" for 2 GPUs in one island
    And ClusterQueues "team-a" and "team-b" of 4 GPUs each in one cohort, each with a LocalQueue of its name
    When Job "a-wide" of queue "team-a" runs 4 pods from claim template "pair"
    Then the pod template of Job "a-wide" requests 2 nvidia.com/gpu
    And Kueue admits Job "a-wide" in ClusterQueue "team-a", which borrows 4 GPUs
    And the 4 pods of Job "a-wide" hold 2 GPUs each, each pod inside one island
    When Job "a-more" of queue "team-a" runs 1 pod from claim template "pair"
    Then Job "a-more" waits suspended in queue "team-a", without pods, Kueue saying "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor {flavor}, 2 more needed"
    When Job "b-train" of queue "team-b" runs 2 pods from claim template "pair"
    Then Kueue preempts Job "a-wide" to reclaim the cohort's quota
    And the pods of Job "a-wide" are gone and their GPU leases released
    And Kueue admits Job "b-train" in ClusterQueue "team-b", which borrows 0 GPUs
    And the 2 pods of Job "b-train" hold 2 GPUs each, each pod inside one island
    And Kueue admits Job "a-more" in ClusterQueue "team-a", which borrows 0 GPUs
    And the 1 pods of Job "a-more" hold 2 GPUs each, each pod inside one island
    And no GPU is held twice
    When the Jobs are deleted
    Then no GPU lease is held

  Scenario: A GpuWorkload's pods are admitted as one group by their GPUs; one over the quota waits gated until the first goes
    Given Kueue runs with its pod integration, and gpu-webhook in device-plugin mode writes the GPU requests
    And a cluster of 1 "pcie-nvlink-pairs" node
    And ClusterQueues "team-a" and "team-b" of 4 GPUs each in one cohort, each with a LocalQueue of its name
    When GpuWorkload "wa" of queue "team-a" is applied:
      """yaml
      replicas: 3
      gang: true
      claim: {spec: {devices: {count: 2}, topology: {mode: Required}}}
      """
    Then Kueue admits GpuWorkload "wa" as one group of 3 pods in ClusterQueue "team-a", counting 6 GPUs, which the ClusterQueue uses
    And GpuWorkload "wa" is Running
    And every replica of GpuWorkload "wa" holds 2 GPUs of its own
    And each pod of GpuWorkload "wa" requests 2 nvidia.com/gpu and holds its GPUs inside one island
    When GpuWorkload "wb" of queue "team-a" is applied:
      """yaml
      replicas: 2
      gang: true
      claim: {spec: {devices: {count: 2}, topology: {mode: Required}}}
      """
    Then GpuWorkload "wb" waits in queue "team-a", its 2 pods gated and without GPUs, Kueue saying "couldn't assign flavors to pod set {podset}: insufficient unused quota for nvidia.com/gpu in flavor {flavor}, 2 more needed"
    When GpuWorkload "wa" is deleted
    Then GpuWorkload "wa" is gone, and its pods with their GPU leases
    And Kueue admits GpuWorkload "wb" as one group of 2 pods in ClusterQueue "team-a", counting 4 GPUs, which the ClusterQueue uses
    And GpuWorkload "wb" is Running
    And every replica of GpuWorkload "wb" holds 2 GPUs of its own
    And each pod of GpuWorkload "wb" requests 2 nvidia.com/gpu and holds its GPUs inside one island
    And no GPU is held twice
    When GpuWorkload "wb" is deleted
    Then GpuWorkload "wb" is gone with its pods, claims and GPU leases
    And no GPU lease is held

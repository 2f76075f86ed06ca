@kueue
Feature: Kueue admits Jobs by the GPUs of their claim templates; gpu-scheduler places them
  Teams share GPUs through Kueue (sigs.k8s.io/kueue, its own controller manager and webhooks):
  each team has a LocalQueue and a ClusterQueue with a nominal quota of nvidia.com/gpu, the
  ClusterQueues in one cohort, so a team may borrow what the other leaves unused and Kueue takes
  it back by preempting the borrower. Kueue admits a Job by its pod template, before any pod
  exists; gpu-webhook in device-plugin mode writes the claim template's GPU count into that
  template when the Job is created. Once Kueue unsuspends the Job, gpu-scheduler places its pods
  with their islands; when Kueue preempts a Job, its pods go and their GPU leases with them.

  Scenario: Two teams share a GPU cohort: admission with borrowing, a Job over quota waiting, borrowed GPUs reclaimed
    Given Kueue runs, and gpu-webhook writes the GPU request into the pod templates of Jobs
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

@lease
Feature: GPU leases make an allocation atomic across schedulers
  Every allocated GPU is locked by a Lease gpu-{node}-{id} in the gpu-scheduler namespace,
  held by the pod's UID. Whoever creates the lease first owns the GPU, so two schedulers (or
  one that restarts) never hand out the same GPU twice.

  Background:
    Given a cluster of 2 "two-island" nodes

  Scenario: Two schedulers race for the same free GPUs
    The two nodes have 14 healthy GPUs (GPU 7 of a two-island box is unhealthy).
    Given a second gpu-scheduler is running
    When 16 pods each claim 1 GPU
    Then 14 of them are bound and 2 stay pending
    And no GPU is held twice
    And the agents report the leased GPUs in use

  Scenario: Two schedulers divide the pods, and one takes over when the other stops
    Two gpu-scheduler processes serve one profile without leader election. Each announces
    itself with a peer lease and schedules the pods it owns by a hash of the pod over the live
    peers, so both bind pods and neither races the other for every pod. One that stops
    deletes its lease, and the other schedules every pod from then on.
    Given a second gpu-scheduler is running
    When 12 pods each claim 1 GPU
    Then 12 of them are bound and 0 stay pending
    And both gpu-schedulers bound some of those pods
    And no GPU is held twice
    When the second gpu-scheduler stops
    Then its peer lease is gone
    When 2 more pods each claim 1 GPU
    Then 14 of them are bound and 0 stay pending
    And no GPU is held twice

  Scenario: Two schedulers never bind two pods to one claim
    One claim serves one pod. The two processes divide the pods naming the claim and each
    reserves it in memory only; the claim's status, written with the resourceVersion read just
    before the binding, is the lock, and the process that writes second loses its attempt.
    Given a second gpu-scheduler is running
    And a GpuClaim "one" for 1 GPU
    When 8 pods are created with claim "one"
    Then 1 of them are bound and 7 stay pending
    And GpuClaim "one" is Bound
    And no GPU is held twice

  Scenario: A lease held by a live pod is never taken over
    Given a second gpu-scheduler is running
    And pod "holder" claims 4 GPUs
    And pod "holder" is bound
    When 12 pods each claim 1 GPU
    Then 10 of them are bound and 2 stay pending
    And the leases of pod "holder" are unchanged
    And no GPU is held twice

  Scenario: A scheduler that crashes mid-run rebuilds its state from the leases
    When 8 pods each claim 1 GPU
    And the gpu-scheduler is killed as soon as 1 of them is bound
    And 8 more pods each claim 1 GPU
    And a new gpu-scheduler is started
    Then 14 of them are bound and 2 stay pending
    And no GPU is held twice

  Scenario: A restarted scheduler keeps the GPUs of running pods
    Given pod "holder" claims 4 GPUs
    And pod "holder" is bound
    When the gpu-scheduler is restarted
    And 12 pods each claim 1 GPU
    Then 10 of them are bound and 2 stay pending
    And the leases of pod "holder" are unchanged
    And no GPU is held twice

  Scenario: Shared pods share a GPU, and an Exclusive pod never joins them
    One healthy GPU is left free for the Shared pods.
    Given pod "exclusive-a" claims 7 GPUs
    And pod "exclusive-b" claims 6 GPUs
    And pods "exclusive-a" and "exclusive-b" are bound
    When pod "shared-a" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared}
      """
    And pod "shared-b" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared}
      """
    Then pods "shared-a" and "shared-b" are bound
    And no GPU is held twice
    And the agents report the leased GPUs in use
    When pod "late" claims 1 GPU
    Then pod "late" is pending: "no node has 1 healthy free GPUs for GpuClaim {namespace}/late"

@preemption
Feature: A higher-priority claim preempts lower-priority pods for their GPUs
  When no node has the GPUs a pod needs, the scheduler's preemption evicts pods of lower
  priority whose GPUs would make room, as few as it can; the pod is bound once their leases
  are released. Pods of equal or higher priority are never evicted.

  Background:
    Given a cluster of 1 "dgx-a100" node
    And priority class "acc-gpu-low" with value 100
    And priority class "acc-gpu-high" with value 100000

  Scenario: Only the pod whose GPUs make room is evicted
    Given pod "low-a" with priority class "acc-gpu-low" claims 6 GPUs
    And pod "low-a" is bound
    And pod "low-b" with priority class "acc-gpu-low" claims 2 GPUs
    And pod "low-b" is bound
    When pod "urgent" with priority class "acc-gpu-high" claims 4 GPUs
    Then pod "low-a" is preempted
    And pod "urgent" is bound
    And pods "low-b" and "urgent" are bound
    And no GPU is held twice

  Scenario: A pod never preempts pods of its own priority
    Given pod "first" with priority class "acc-gpu-low" claims 8 GPUs
    And pod "first" is bound
    When pod "second" with priority class "acc-gpu-low" claims 2 GPUs
    Then pod "second" is pending: "no node has 2 healthy free GPUs for GpuClaim {namespace}/second"
    And pod "first" is bound

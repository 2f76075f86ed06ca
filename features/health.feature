@health
Feature: Only healthy GPUs are allocated
  The node agent reads GPU health from NVML (mock NVML here, the same topologies the simulator
  uses) and publishes it in the node's GpuNodeStatus. The scheduler never allocates a GPU that
  is not Healthy.

  Scenario: An unhealthy GPU is never allocated
    GPU 7 of a two-island box has a failed row remapping.
    Given a cluster of 1 "two-island" node
    And GPU 7 of node 0 is reported Unhealthy
    When 8 pods each claim 1 GPU
    Then 7 of them are bound and 1 stay pending
    And no pod is bound to GPU 7 of node 0

  Scenario: A GPU that fails gets no new pods, and a pending claim lands elsewhere
    Given a cluster of 2 "dgx-a100" nodes
    When GPU 3 of node 0 fails with "xid79"
    Then GPU 3 of node 0 is reported Unhealthy
    When pod "whole-box" claims 8 GPUs
    Then pod "whole-box" is bound to node 1
    When 8 pods each claim 1 GPU
    Then 7 of them are bound and 1 stay pending
    And no pod is bound to GPU 3 of node 0

  Scenario: A pending claim lands on another node, never on a GPU that failed meanwhile
    Given a cluster of 1 "dgx-a100" node
    And pod "holder" claims 7 GPUs
    And pod "holder" is bound to GPUs "0,1,2,3,4,5,6"
    And pod "waiting" claims 2 GPUs
    And pod "waiting" is pending: "no node has 2 healthy free GPUs for GpuClaim {namespace}/waiting"
    When GPU 7 of node 0 fails with "xid79"
    And GPU 7 of node 0 is reported Unhealthy
    And 1 "dgx-a100" node joins the cluster
    Then pod "waiting" is bound to node 1
    When pod "late" claims 1 GPU
    Then pod "late" is bound to node 1
    And no pod is bound to GPU 7 of node 0

  Scenario: A GPU that recovers is allocatable again
    Given a cluster of 1 "dgx-h100" node
    And GPU 5 of node 0 fails with "dbe"
    And GPU 5 of node 0 is reported Unhealthy
    And pod "big" claims 8 GPUs
    And pod "big" is pending: "no node has 8 healthy free GPUs for GpuClaim {namespace}/big"
    When GPU 5 of node 0 recovers
    Then GPU 5 of node 0 is reported Healthy
    And GPU 5 of node 0 has recovered 1 time, since a time after every other GPU's
    And pod "big" is bound to GPUs "0,1,2,3,4,5,6,7"

  Scenario: NVML failing on a node fences all its GPUs
    Given a cluster of 2 "dgx-h100" nodes
    When the NVML driver of node 0 fails
    Then every GPU of node 0 is reported Unknown
    When 3 pods each claim 4 GPUs
    Then 2 of them are bound and 1 stay pending
    And no pod is bound to node 0

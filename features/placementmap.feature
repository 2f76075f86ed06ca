@placement-map
Feature: An explicit placement map puts each indexed pod on the node and GPUs it names
  The gpu.scheduling/gpu-scheduling-map annotation on a pod template lists
  "<pod-index>=<node>:<gpu-ids>", one entry per line. The pod whose index (an indexed Job's
  completion index, a StatefulSet's ordinal) has an entry goes exactly there, and takes the GPU
  leases as any other pod; a pod without an entry is placed as usual. An entry that cannot be
  honoured leaves its pod Pending with the entry named, and never takes a GPU another pod holds.
  Nodes are written {node N} here because their names differ from run to run.

  Scenario: An indexed Job's pods go exactly where the map puts them
    Given a cluster of 2 "dgx-a100" nodes
    And GpuClaimTemplate "x2" for 2 GPUs
    When indexed Job "train" runs 3 pods at once for 60 seconds each from claim template "x2" with the scheduling map:
      """
      # index=node:gpus
      0={node 1}:4,6
      1={node 0}:0,7
      """
    Then pod 0 of Job "train" runs on node 1 with GPUs "4,6" and holds their leases
    And pod 1 of Job "train" runs on node 0 with GPUs "0,7" and holds their leases
    And the 3 live pods of Job "train" hold 2 GPUs each from claims they own
    And no GPU is held twice

  Scenario: A StatefulSet's pods go where the map puts their ordinals
    Given a cluster of 2 "dgx-a100" nodes
    And GpuClaimTemplate "x2" for 2 GPUs
    When StatefulSet "shard" runs 2 pods from claim template "x2" with the scheduling map:
      """
      0={node 1}:2,3
      1={node 0}:1,5
      """
    Then pod "shard-0" is bound to node 1
    And pod "shard-0" is bound to GPUs "2,3"
    And pod "shard-1" is bound to node 0
    And pod "shard-1" is bound to GPUs "1,5"
    And no GPU is held twice

  Scenario: An entry naming a held, unhealthy or missing GPU or node leaves its pod Pending, naming the entry
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    And GPU 5 of node 0 fails with "xid79"
    And GPU 5 of node 0 is reported Unhealthy
    When indexed Job "first" runs 1 pod at once for 600 seconds each from claim template "x2" with the scheduling map:
      """
      0={node 0}:0,1
      """
    Then pod 0 of Job "first" runs on node 0 with GPUs "0,1" and holds their leases
    When indexed Job "second" runs 4 pods at once for 600 seconds each from claim template "x2" with the scheduling map:
      """
      0={node 0}:1,2
      1={node 0}:5,6
      2={node 0}:8,9
      3=no-such-node:0,1
      """
    Then pod 0 of Job "second" stays pending with an event saying "gpu-scheduling-map entry 0={node 0}:1,2 for pod {namespace}/{pod} (index 0): on node {node 0}: GPU 1 is held by another pod"
    And pod 1 of Job "second" stays pending with an event saying "gpu-scheduling-map entry 1={node 0}:5,6 for pod {namespace}/{pod} (index 1): on node {node 0}: GPU 5 is Unhealthy"
    And pod 2 of Job "second" stays pending with an event saying "gpu-scheduling-map entry 2={node 0}:8,9 for pod {namespace}/{pod} (index 2): on node {node 0}: GPU 8 does not exist on node {node 0} (it has 8 GPUs)"
    And pod 3 of Job "second" stays pending with an event saying "gpu-scheduling-map entry 3=no-such-node:0,1 for pod {namespace}/{pod} (index 3): node no-such-node does not exist"
    And pod 0 of Job "first" runs on node 0 with GPUs "0,1" and holds their leases
    And no GPU is held twice
    When Job "first" is deleted
    Then pod 0 of Job "second" runs on node 0 with GPUs "1,2" and holds their leases
    And no GPU is held twice

  Scenario: A malformed map is refused when the pod is created, naming the line
    Given a cluster of 1 "dgx-a100" node
    Then creating pod "badmap" with annotation "gpu.scheduling/gpu-scheduling-map" set to "0=s-node" is refused:
      """
      pod {namespace}/badmap: annotation gpu.scheduling/gpu-scheduling-map: scheduling map line 1: allocation "s-node" has no ':'; want node:ids like node-a:0,1
      """

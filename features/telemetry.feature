@telemetry
Feature: The agent reports how busy each GPU is, and least-utilized uses it
  The node agent reads each GPU's utilisation, memory in use, temperature, power and ECC
  counters through NVML (mock NVML here, whose load moves by itself unless a step pins it) and
  publishes them in the node's GpuNodeStatus within a budget of writes per node and minute.
  A pod that asks for the least-utilized node strategy goes to the node whose GPUs are least
  busy by those reports.

  Scenario: Every GPU reports its load
    Given a cluster of 1 "dgx-h100" node
    Then every GPU of node 0 reports its memory in use, temperature and power

  Scenario Outline: least-utilized sends a pod to the less busy node
    Given a cluster of 2 "dgx-h100" nodes
    And the GPUs of node <busy> run at 90%
    And the GPUs of node <idle> run at 10%
    And node <busy> reports its GPUs 90% utilized
    And node <idle> reports its GPUs 10% utilized
    When pod "inference" claims 1 GPU with node strategy "least-utilized"
    Then pod "inference" is bound to node <idle>

    Examples:
      | busy | idle |
      | 0    | 1    |
      | 1    | 0    |

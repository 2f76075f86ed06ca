@liveness
Feature: A node whose agent stops renewing its liveness lease gets no new pods
  The node agent renews a small Lease, gpu-<node>-agent, every few minutes as its sign of life,
  and rewrites an unchanged GpuNodeStatus only every 30 minutes. The scheduler trusts a node
  while the newer of the two is younger than its statusFreshnessSeconds (10 minutes). The
  scenario does not wait 10 minutes: when it stops an agent it sets the agent's last renewal
  and status heartbeat 15 minutes back, as if the agent had been silent that long; the lease is
  then renewed by the agent's own renewer while the rest of the agent stays stopped, so only the
  lease can make the node fresh again.

  Scenario: An agent stops renewing its liveness lease, then renews it again
    Given a cluster of 2 "dgx-h100" nodes
    When the agent of node 0 stops renewing its liveness lease
    And pod "first" claims 8 GPUs
    Then pod "first" is bound to node 1
    When pod "waiting" claims 8 GPUs
    Then pod "waiting" is pending: "no node has 8 healthy free GPUs for GpuClaim {namespace}/waiting (1 nodes ignored: GpuNodeStatus and agent liveness lease older than 10m0s)"
    When the agent of node 0 renews its liveness lease again, its GpuNodeStatus left as it was
    Then pod "waiting" is bound to node 0
    And the GpuNodeStatus of node 0 still has the heartbeat of 15 minutes ago
    And the agent of node 0 runs again

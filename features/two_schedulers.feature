@two-schedulers
Feature: Two releases with their own scheduler names share one cluster
  Each release of the chart has its own schedulerName, its own namespace (its GPU leases) and
  its own node pool (its agents' node selector). Its agents label the GpuNodeStatus of each of
  its nodes with its scheduler name, and a scheduler places pods only on nodes labelled for it.
  So two releases side by side never touch each other's pods, claims or leases: each scheduler
  binds only the pods that name it, onto its own nodes, locks their GPUs in its own namespace
  and writes only their claims. The suite's own gpu-scheduler runs throughout: a third release
  whose pool has no node in these scenarios.

  Background:
    Given release "team-a" with 1 "two-island" node
    And release "team-b" with 1 "two-island" node

  Scenario: Each scheduler binds its own pods onto its own pool
    When 3 pods of scheduler "team-a" each claim 2 GPUs
    And 3 pods of scheduler "team-b" each claim 2 GPUs
    Then every pod is bound by its own scheduler onto a node of its release
    And the GPU leases of each release lie in its own namespace and are held by its own pods
    And the status of every claim was written by its own scheduler alone
    And the agents of each release publish its nodes for its scheduler and report its pods' GPUs in use

  Scenario: A pod is never bound by another release's scheduler, even when only that one has room
    A two-island node has 7 healthy GPUs: "b-big" fills team-b's node.
    Given pod "b-big" of scheduler "team-b" claims 7 GPUs
    And pod "b-big" is bound by scheduler "team-b" onto a node of release "team-b"
    When pod "b-late" of scheduler "team-b" claims 2 GPUs
    And pod "default-late" of scheduler "gpu-scheduler" claims 2 GPUs
    Then scheduler "team-b" reports pod "b-late" unschedulable
    And scheduler "gpu-scheduler" reports pod "default-late" unschedulable
    And release "team-a" holds no GPU lease
    When pod "a-big" of scheduler "team-a" claims 7 GPUs
    Then pod "a-big" is bound by scheduler "team-a" onto a node of release "team-a"
    And the GPU leases of each release lie in its own namespace and are held by its own pods

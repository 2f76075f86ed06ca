@mig
Feature: MIG devices are placed as units; GPUs in MIG mode are never allocated whole
  The operator lays out MIG devices (docs/sharing.md); a GPU in MIG mode serves only its MIG
  devices. A claim with exclusivity MIG gets free, healthy MIG devices of its profile, each
  locked by a lease of its own (gpu-{node}-{id}-mig{slot}); a whole-GPU claim gets whole GPUs
  only. A dgx-h100-mig node has GPUs 0-3 in MIG mode (0: seven 1g.10gb; 1: two 3g.40gb;
  2: a 2g.20gb at slot 0, a 1g.20gb at 2 and 1g.10gb at 4 and 5; 3: none) and GPUs 4-7 whole.
  The scheduler packs MIG devices onto the GPU with the fewest free.

  Background:
    Given a cluster of 1 "dgx-h100-mig" node

  Scenario: A whole-GPU claim never lands on a MIG-mode GPU
    When pod "whole" claims 4 GPUs
    Then pod "whole" is bound to GPUs "4,5,6,7"
    When pod "more" claims 1 GPU
    Then pod "more" is pending: "no node has 1 healthy free GPUs"

  Scenario: A 1g.10gb claim binds to a MIG device on a mixed node, locked by its own lease
    When pod "small" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 1g.10gb}
      """
    Then pod "small" is bound to MIG device "2:4" on GPU "2"
    And the MIG device "2:4" of node 0 is locked by pod "small" alone, and GPU 2 by no whole-GPU lease
    And the agent of node 0 reports MIG device "2:4" in use by pod "small"

  Scenario: A profile no node has free stays Pending, naming what is free
    When pod "big" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 7g.80gb}
      """
    Then pod "big" is pending: "no node has 1 free MIG devices of profile 7g.80gb for GpuClaim {namespace}/big; 1 node has 1g.10gb free, 1 node has 1g.20gb free, 1 node has 2g.20gb free, 1 node has 3g.40gb free (the MIG layout is set by the operator: docs/sharing.md)"

  Scenario: A MIG device turning unhealthy is not offered to the next claim
    When GPU 2 of node 0 fails with "xid79"
    Then GPU 2 of node 0 is reported Unhealthy
    And MIG device "2:4" of node 0 is reported Unhealthy
    When pod "next" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 1g.10gb}
      """
    Then pod "next" is bound to MIG device "0:0" on GPU "0"

  Scenario: A deleted pod's MIG lease is released and its device offered again
    When pod "a" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 2g.20gb}
      """
    Then pod "a" is bound to MIG device "2:0" on GPU "2"
    When pod "b" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 2g.20gb}
      """
    Then pod "b" is pending: "no node has 1 free MIG devices of profile 2g.20gb"
    When pod "a" is deleted
    Then the GPU leases of pod "a" are released
    And pod "b" is bound to MIG device "2:0" on GPU "2"

@topology
Feature: NVLink islands decide which GPUs a claim gets
  A two-island box (the API reference's example) has GPUs 0-3 meshed by NVLink at 600 GB/s
  and GPUs 4-7 on one PCIe switch at 64 GB/s, with GPU 7 unhealthy. An NVSwitch box
  (dgx-a100, dgx-h100) is one island of eight.

  Scenario: A contiguous claim for 4 GPUs lands inside one island
    Given a cluster of 1 "two-island" node
    When pod "train" claims:
      """yaml
      devices: {count: 4, policy: contiguous}
      topology: {mode: Preferred}
      """
    Then pod "train" is bound to GPUs "0,1,2,3"
    And the GPUs of pod "train" lie in one island

  Scenario: A spread claim spans the islands
    Given a cluster of 1 "two-island" node
    When pod "shards" claims:
      """yaml
      devices: {count: 4, policy: spread}
      topology: {mode: Preferred}
      """
    Then the GPUs of pod "shards" span 2 islands

  Scenario: A Required 600 GB/s claim never lands on the 64 GB/s island
    Given a cluster of 1 "two-island" node
    And pod "first" claims:
      """yaml
      devices: {count: 3}
      topology: {mode: Required, minBandwidthGBps: 600}
      """
    And the GPUs of pod "first" have at least 600 GB/s
    When pod "second" claims:
      """yaml
      devices: {count: 3}
      topology: {mode: Required, minBandwidthGBps: 600}
      """
    Then pod "second" is pending: "no node has 3 healthy free GPUs in one island with ≥ 600 GB/s for GpuClaim {namespace}/second"
    And GpuClaim "second" is Pending with message "no node has 3 healthy free GPUs in one island with ≥ 600 GB/s for GpuClaim {namespace}/second"

  Scenario: A Preferred claim that fits no island still gets GPUs
    Given a cluster of 1 "two-island" node
    When pod "wide" claims:
      """yaml
      devices: {count: 6}
      topology: {mode: Preferred, minBandwidthGBps: 600}
      """
    Then the GPUs of pod "wide" span 2 islands

  Scenario: On an NVSwitch box any 4 GPUs are one island
    Given a cluster of 1 "dgx-a100" node
    When pod "left" claims:
      """yaml
      devices: {count: 4}
      topology: {mode: Required, minBandwidthGBps: 600}
      """
    And pod "right" claims:
      """yaml
      devices: {count: 4, policy: spread}
      topology: {mode: Preferred}
      """
    Then pods "left" and "right" are bound
    And the GPUs of pod "left" lie in one island
    And the GPUs of pod "right" lie in one island

  Scenario: Small claims leave whole islands free for large ones
    NVLink pairs {0,1} {2,3} {4,5} {6,7}: two single-GPU claims share a pair (best fit),
    so three pairs stay whole for three 2-GPU claims that require an island.
    Given a cluster of 1 "pcie-nvlink-pairs" node
    When pod "small-a" claims 1 GPU
    And pod "small-a" is bound
    And pod "small-b" claims 1 GPU
    Then pods "small-a" and "small-b" share an island
    When 3 pods each claim 2 GPUs with a Required island
    Then 3 of them are bound and 0 stay pending
    And the GPUs of each of them lie in one island

@lifecycle
Feature: A claim serves one pod at a time and is freed when the pod goes away
  When its pod is deleted, force-deleted or finishes, the scheduler deletes the pod's GPU
  leases and returns the claim to Pending, so that another pod can use it.

  Background:
    Given a cluster of 1 "dgx-a100" node

  Scenario Outline: A pod that is <how> frees its GPUs and its claim
    Given pod "job" claims 2 GPUs and runs for <seconds> seconds
    And pod "job" is bound
    When pod "job" goes away by being <how>
    Then the GPU leases of pod "job" are released
    And the agents report the leased GPUs in use
    And GpuClaim "job" is Pending with message "pod job went away; the claim is free for another pod"
    When pod "again" is created with claim "job"
    Then pod "again" is bound
    And no GPU is held twice

    Examples:
      | how           | seconds |
      | deleted       | 600     |
      | force-deleted | 600     |
      | completed     | 3       |

  Scenario: A claim held by a live pod cannot be taken by a second pod
    Given pod "first" claims 2 GPUs
    And pod "first" is bound
    When pod "second" is created with claim "first"
    Then pod "second" is pending: "GpuClaim {namespace}/first is held by pod {namespace}/first; one claim serves one pod at a time"
    And GpuClaim "first" is Bound
    When pod "first" is deleted
    Then pod "second" is bound
    And no GPU is held twice

  Scenario: A claim's node selector is enforced
    Given 1 "dgx-h100" node labelled "gpu-type=h100"
    When pod "on-h100" claims:
      """yaml
      devices: {count: 2}
      selector: {matchLabels: {gpu-type: h100}}
      """
    And pod "on-b200" claims:
      """yaml
      devices: {count: 2}
      selector: {matchLabels: {gpu-type: b200}}
      """
    Then pod "on-h100" is bound to node 1
    And pod "on-b200" is pending: "no node has 2 healthy free GPUs for GpuClaim {namespace}/on-b200"

  Scenario: preferIds gets those GPUs when they are free and falls back when not
    When pod "pinned" claims:
      """yaml
      devices: {count: 2, policy: preferIds, preferIds: [2, 3]}
      """
    Then pod "pinned" is bound to GPUs "2,3"
    When pod "fallback" claims:
      """yaml
      devices: {count: 2, policy: preferIds, preferIds: [2, 3]}
      """
    Then pod "fallback" is bound to GPUs other than "2,3"
    And no GPU is held twice

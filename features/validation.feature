@validation
Feature: Bad input gets a clear answer
  The GpuClaim schema (OpenAPI and CEL rules) refuses what it can when the claim is created;
  what only the scheduler can judge becomes the claim's Failed status, and a pod that names no
  usable claim stays pending with the reason.

  Scenario: The API server refuses invalid GpuClaims with a message that says what is wrong
    Then the API server refuses these GpuClaims:
      | case                     | spec                                                              | message                                                                                                                                   |
      | count 0                  | {devices: {count: 0}}                                             | spec.devices.count: Invalid value: 0: spec.devices.count in body should be greater than or equal to 1                                     |
      | count above 64           | {devices: {count: 65}}                                            | spec.devices.count: Invalid value: 65: spec.devices.count in body should be less than or equal to 64                                      |
      | negative preferIds       | {devices: {count: 1, policy: preferIds, preferIds: [-1]}}         | spec.devices.preferIds[0]: Invalid value: -1: spec.devices.preferIds[0] in body should be greater than or equal to 0                      |
      | duplicate preferIds      | {devices: {count: 2, policy: preferIds, preferIds: [1, 1]}}       | spec.devices.preferIds: Invalid value: preferIds must not repeat a GPU ID                                                                 |
      | preferIds without policy | {devices: {count: 1, preferIds: [1]}}                             | spec.devices: Invalid value: preferIds is only used with policy: preferIds; set policy: preferIds or remove preferIds                     |
      | policy preferIds, no IDs | {devices: {count: 1, policy: preferIds}}                          | spec.devices: Invalid value: preferIds must list at least one GPU ID when policy is preferIds                                             |
      | unknown policy           | {devices: {count: 1, policy: nearest}}                            | spec.devices.policy: Unsupported value: "nearest": supported values: "contiguous", "spread", "preferIds"                                  |
      | unknown exclusivity      | {devices: {count: 1, exclusivity: Private}}                       | spec.devices.exclusivity: Unsupported value: "Private": supported values: "Exclusive", "Shared", "MIG"                                    |
      | unknown topology mode    | {devices: {count: 1}, topology: {mode: Strict}}                   | spec.topology.mode: Unsupported value: "Strict": supported values: "Required", "Preferred", "Ignore"                                      |
      | negative bandwidth       | {devices: {count: 1}, topology: {minBandwidthGBps: -5}}           | spec.topology.minBandwidthGBps: Invalid value: -5: spec.topology.minBandwidthGBps in body should be greater than or equal to 0            |
      | spread with Required     | {devices: {count: 2, policy: spread}, topology: {mode: Required}} | spec: Invalid value: policy spread places GPUs across islands and cannot be combined with topology.mode Required; use Preferred or Ignore |
      | no devices               | {topology: {mode: Preferred}}                                     | spec.devices: Required value                                                                                                              |
      | gangTopology, no gang    | {devices: {count: 4}, gangTopology: {level: nvidia.com/gpu.clique}} | spec.gangTopology: Invalid value: gangTopology places the nodes of a gang together: set spec.gangRef                                     |
      | gangTopology, no level   | {devices: {count: 4}, gangRef: g, gangTopology: {mode: Required}} | spec.gangTopology.level: Required value                                                                                                   |
      | MIG, no profile          | {devices: {count: 1, exclusivity: MIG}}                           | spec.devices: Invalid value: migProfile is set exactly when exclusivity is MIG: name the MIG profile (for example 1g.10gb) with exclusivity: MIG |
      | a share, not Shared      | {devices: {count: 1, share: {memoryPercent: 25}}}                 | spec.devices: Invalid value: share is only used with exclusivity: Shared                                                                  |

  Scenario: A claim the scheduler cannot serve as written is Failed with the reason
    Given a cluster of 1 "dgx-a100" node
    Then the scheduler fails these GpuClaims:
      | case            | spec                                                               | message |
      | bad label key   | {devices: {count: 1}, selector: {matchLabels: {"gpu type": a100}}} | GpuClaim {namespace}/{name} is invalid: spec.selector.matchLabels key "gpu type" is not a valid label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') |

  Scenario: A MIG claim with a profile is accepted and waits for a free MIG device of it
    Given a cluster of 1 "dgx-a100" node
    When pod "mig" claims:
      """yaml
      devices: {count: 1, exclusivity: MIG, migProfile: 1g.10gb}
      """
    Then pod "mig" is pending: "no node has 1 free MIG devices of profile 1g.10gb for GpuClaim {namespace}/mig; no node has a free MIG device of any profile (the MIG layout is set by the operator: docs/sharing.md)"

  Scenario: A pod that names a claim that does not exist stays pending
    Given a cluster of 1 "dgx-a100" node
    When pod "orphan" is created with claim "ghost"
    Then pod "orphan" is pending: "GpuClaim {namespace}/ghost named by pod orphan does not exist"
    When a GpuClaim "ghost" for 1 GPU
    Then pod "orphan" is bound

  Scenario: A pod with an empty claim annotation stays pending
    Given a cluster of 1 "dgx-a100" node
    When pod "blank" is created with claim ""
    Then pod "blank" is pending: "pod {namespace}/blank has an empty gpu.scheduling/claim annotation; set it to the name of a GpuClaim in namespace {namespace}"

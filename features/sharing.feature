@sharing
Feature: Capped sharing of a GPU
  A Shared claim may state its share of a GPU's memory and compute. The scheduler never
  over-commits a GPU: the shares of its holders are recorded on its lease, a claim that would
  pass the GPU's memory waits with the cap named, and a pod that ends gives its share back.
  An l4-x1 node has one L4 GPU of 23034 MiB.

  Background:
    Given a cluster of 1 "l4-x1" node

  Scenario: Two 25 %-memory claims share one GPU, their shares on its lease
    When pod "a" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 25}}
      """
    And pod "b" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 25}}
      """
    Then pods "a" and "b" are bound
    And the lease of GPU 0 of node 0 records the shares of pods "a" and "b" alone

  Scenario: A claim whose memory would over-commit the GPU stays Pending, the cap named
    When pod "big" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 80}}
      """
    Then pod "big" is bound
    When pod "more" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 25}}
      """
    Then pod "more" is pending: "1 GPUs at the memory cap"

  Scenario: The sharers are released when their pods end
    When pod "a" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 50}}
      """
    And pod "b" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 50}}
      """
    Then pods "a" and "b" are bound
    When pod "a" is deleted
    Then the GPU leases of pod "a" are released
    And the lease of GPU 0 of node 0 records the shares of pod "b" alone
    When pod "c" claims:
      """yaml
      devices: {count: 1, exclusivity: Shared, share: {memoryPercent: 50}}
      """
    Then pod "c" is bound

  Scenario: Two schedulers racing for one GPU's memory never over-commit it
    Each scheduler judges the GPU from its own ledger; the join of the GPU's lease sums the
    shares on the API server's copy, so the one that loses the race for the last room waits.
    Given a second gpu-scheduler is running
    When 10 pods each claim a Shared GPU with 30 % of its memory
    Then 3 of them are bound and 7 stay pending
    And no GPU's shares over-commit its memory or compute

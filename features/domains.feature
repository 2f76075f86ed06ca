@domains
Feature: A gang's nodes share one topology domain
  A gang whose claims state gangTopology has all its nodes inside one domain of a topology
  level: the nodes that share one value of a node label, such as the NVLink domain of a GB200
  NVL72 rack (nvidia.com/gpu.clique). The domain is chosen with the gang's fit: of the domains
  where the whole gang fits, the fullest, so that whole domains stay whole for larger gangs.
  Required waits, naming the level and the largest free block, rather than span domains;
  Preferred spans domains when no single one has room.

  Scenario: A gang is placed inside the fullest NVLink domain it fits
    Given 4 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-a"
    And 4 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-b"
    And pod "tenant" claims:
      """yaml
      devices: {count: 8}
      selector: {matchLabels: {nvidia.com/gpu.clique: rack-b}}
      """
    And pod "tenant" is bound
    When pods "w0", "w1" and "w2" each claim:
      """yaml
      devices: {count: 8}
      gangRef: train
      gangSize: 3
      gangTopology: {level: nvidia.com/gpu.clique, mode: Required}
      """
    Then pods "w0", "w1" and "w2" are bound
    And pods "w0", "w1" and "w2" run on nodes labelled "nvidia.com/gpu.clique=rack-b"
    And no GPU is held twice

  Scenario: A Required gang larger than any domain waits and says why, then fits when one grows
    Given 2 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-a"
    And 3 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-b"
    When pods "w0", "w1", "w2" and "w3" each claim:
      """yaml
      devices: {count: 8}
      gangRef: big
      gangSize: 4
      gangTopology: {level: nvidia.com/gpu.clique, mode: Required}
      """
    Then pod "w0" is pending: "gang {namespace}/big (gangTopology nvidia.com/gpu.clique, Required): no domain of nvidia.com/gpu.clique has room for all 4 pods at once; the largest free block is 24 GPUs on 3 nodes in nvidia.com/gpu.clique=rack-b"
    And pods "w0", "w1", "w2" and "w3" hold no GPU
    When 1 "dgx-a100" node labelled "nvidia.com/gpu.clique=rack-b"
    Then pods "w0", "w1", "w2" and "w3" are bound
    And pods "w0", "w1", "w2" and "w3" run on nodes labelled "nvidia.com/gpu.clique=rack-b"
    And no GPU is held twice

  Scenario: A Preferred gang spans domains when no single one has room
    Given 2 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-a"
    And 2 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-b"
    When pods "w0", "w1" and "w2" each claim:
      """yaml
      devices: {count: 8}
      gangRef: wide
      gangSize: 3
      gangTopology: {level: nvidia.com/gpu.clique, mode: Preferred}
      """
    Then pods "w0", "w1" and "w2" are bound
    And no GPU is held twice

  Scenario: A Required gang as large as a domain keeps one from small pods until it fits
    Given 2 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-a"
    And 2 "dgx-a100" nodes labelled "nvidia.com/gpu.clique=rack-b"
    And pod "s1" claims:
      """yaml
      devices: {count: 1}
      selector: {matchLabels: {nvidia.com/gpu.clique: rack-a}}
      """
    And pod "s1" is bound
    And pod "s2" claims:
      """yaml
      devices: {count: 2}
      selector: {matchLabels: {nvidia.com/gpu.clique: rack-b}}
      """
    And pod "s2" is bound
    When pods "g0" and "g1" each claim:
      """yaml
      devices: {count: 8}
      gangRef: rack
      gangSize: 2
      gangTopology: {level: nvidia.com/gpu.clique, mode: Required}
      """
    Then pod "g0" is pending: "the largest free block is 15 GPUs on 2 nodes in nvidia.com/gpu.clique=rack-a; nvidia.com/gpu.clique=rack-a is kept for it"
    When pod "s3" claims:
      """yaml
      devices: {count: 1}
      selector: {matchLabels: {nvidia.com/gpu.clique: rack-a}}
      """
    Then pod "s3" is pending: "2 nodes with room are held for gang {namespace}/rack"
    When pod "s1" is deleted
    Then pods "g0" and "g1" are bound
    And pods "g0" and "g1" run on nodes labelled "nvidia.com/gpu.clique=rack-a"
    And pod "s3" is pending: "no node has 1 healthy free GPUs"
    And no GPU is held twice

@gang
Feature: A gang binds all its pods or none
  The GpuClaims of a namespace that share a gangRef are one gang. No pod of the gang is bound
  until every member claim exists, each has a pod, and the free GPUs can take all of them at
  once; a gang that cannot be placed whole holds no GPU meanwhile.

  Scenario: The pods of a gang wait for each other and bind together
    Given a cluster of 2 "dgx-a100" nodes
    When pod "w0" claims:
      """yaml
      devices: {count: 8}
      gangRef: train
      gangSize: 2
      """
    Then pod "w0" is pending: "gang {namespace}/train has 1 of its 2 GpuClaims; its pods are scheduled together once all exist"
    And GpuClaim "w0" is Pending with message "gang {namespace}/train has 1 of its 2 GpuClaims; its pods are scheduled together once all exist"
    When pod "w1" claims:
      """yaml
      devices: {count: 8}
      gangRef: train
      gangSize: 2
      """
    Then pods "w0" and "w1" are bound
    And GpuClaim "w0" is Bound
    And GpuClaim "w1" is Bound
    And no GPU is held twice

  Scenario: A gang that does not fit holds no GPU, and binds once it fits
    Given a cluster of 1 "dgx-a100" node
    When pod "w0" claims:
      """yaml
      devices: {count: 6}
      gangRef: train
      gangSize: 2
      """
    And pod "w1" claims:
      """yaml
      devices: {count: 6}
      gangRef: train
      gangSize: 2
      """
    Then pod "w0" is pending: "gang {namespace}/train: the free GPUs cannot take all 2 pods still to place at once; none is placed until they can"
    And pod "w1" is pending: "gang {namespace}/train: the free GPUs cannot take all 2 pods still to place at once; none is placed until they can"
    When pod "small" claims 2 GPUs
    Then pod "small" is bound
    When 1 "dgx-a100" node joins the cluster
    Then pods "w0" and "w1" are bound
    And no GPU is held twice

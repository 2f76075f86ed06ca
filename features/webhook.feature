@webhook
Feature: The admission webhook points containers at their GPUs and guards the allocation
  Every container of a gpu-scheduler pod gets CUDA_VISIBLE_DEVICES from the pod's own
  gpu.scheduling/gpu-ids annotation (Downward API), which the scheduler sets when it binds the
  pod. Nobody but the scheduler may write the allocation annotations.

  Background:
    Given a cluster of 1 "dgx-h100" node

  Scenario: Every container sees the GPUs allocated to its pod
    When pod "trainer" with init container "fetch-weights" and containers "main, sidecar" claims 3 GPUs
    Then pod "trainer" is bound to GPUs "0,1,2"
    And every container of pod "trainer" sees CUDA_VISIBLE_DEVICES "0,1,2"

  Scenario: A pod created with an allocation of its own is refused
    Then creating pod "forged" with annotation "gpu.scheduling/allocated" set to "s-node:0,1" is refused:
      """
      pod {namespace}/forged may not be created with annotation gpu.scheduling/allocated: only the gpu-scheduler sets the GPU allocation, when it binds the pod; name a GpuClaim in annotation gpu.scheduling/claim instead
      """

  Scenario: A user cannot move a running pod onto other GPUs
    Given pod "victim" claims 2 GPUs
    And pod "victim" is bound to GPUs "0,1"
    Then user "mallory" setting annotation "gpu.scheduling/gpu-ids" of pod "victim" to "4,5" is refused:
      """
      user "mallory" may not set, change or remove annotation gpu.scheduling/gpu-ids on pod {namespace}/victim: only the gpu-scheduler writes the GPU allocation
      """
    And every container of pod "victim" sees CUDA_VISIBLE_DEVICES "0,1"

  Scenario: A pod that names a claim but keeps the default scheduler is placed by gpu-scheduler
    When pod "forgot" claims 2 GPUs with schedulerName "default-scheduler"
    Then pod "forgot" has schedulerName "gpu-scheduler"
    And pod "forgot" is bound to GPUs "0,1"

  Scenario: A misspelt gpu.scheduling annotation is refused, naming the keys there are
    Then creating pod "typo" with annotation "gpu.scheduling/claim-name" set to "typo" is refused:
      """
      pod {namespace}/typo: metadata.annotations: unknown key "gpu.scheduling/claim-name" under gpu.scheduling/: known keys are gpu.scheduling/claim, gpu.scheduling/claim-template, gpu.scheduling/gpu-scheduling-map, gpu.scheduling/node-strategy, gpu.scheduling/allocated, gpu.scheduling/gpu-ids, gpu.scheduling/mig-devices, gpu.scheduling/share
      """

@gpuworkload
Feature: A GpuWorkload runs replicas with GPUs of their own, retries failures and cleans up
  A GpuWorkload is replicas of a pod template and one claim spec. The gpu-controller makes a
  pod and a GpuClaim owned by that pod for every replica, reports where each replica runs, and
  recreates failed pods after an exponential backoff until retryPolicy.maxRetries is used up.
  Deleting the workload deletes its pods and claims, and the scheduler frees their GPUs.

  Scenario: Three replicas get three pods, each with exclusive GPUs, and a status per replica
    Given a cluster of 1 "dgx-a100" node
    When GpuWorkload "train" is applied:
      """yaml
      replicas: 3
      claim: {spec: {devices: {count: 2}}}
      template: {spec: {containers: [{name: main, image: registry.example/cuda:fake}]}}
      """
    Then GpuWorkload "train" is Running
    And every replica of GpuWorkload "train" holds 2 GPUs of its own
    And no GPU is held twice
    And GpuWorkload "train" has a Normal event "Running" saying "→ Running: all 3 replicas run on"

  Scenario: A workload whose pods all finish succeeds and holds no GPU
    Given a cluster of 1 "dgx-a100" node
    When GpuWorkload "batch" is applied:
      """yaml
      replicas: 2
      claim: {spec: {devices: {count: 4}}}
      template: {metadata: {annotations: {sim.gpu.scheduling/duration: 2s}}}
      """
    Then GpuWorkload "batch" is Succeeded
    And GpuWorkload "batch" has a Normal event "Succeeded" saying "→ Succeeded: all 2 replicas succeeded"
    And no GPU lease is held

  Scenario: A workload naming a GpuClaimTemplate gets one claim per pod from it, gone with the workload
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When GpuWorkload "train" is applied:
      """yaml
      replicas: 3
      claim: {templateName: x2}
      """
    Then GpuWorkload "train" is Running
    And every replica of GpuWorkload "train" holds 2 GPUs of its own
    And pod "train-0-0" has a GpuClaim made from template "x2" that it owns
    And pod "train-2-0" has a GpuClaim made from template "x2" that it owns
    And no GPU is held twice
    When GpuWorkload "train" is deleted
    Then GpuWorkload "train" is gone with its pods, claims and GPU leases

  Scenario: A gang workload binds all its pods or none
    Given a cluster of 1 "dgx-a100" node
    When GpuWorkload "train" is applied:
      """yaml
      replicas: 3
      gang: true
      claim: {spec: {devices: {count: 4}}}
      """
    Then the 3 pods of GpuWorkload "train" are pending: "gang {namespace}/train-0: the free GPUs cannot take all 3 pods still to place at once; none is placed until they can"
    And GpuWorkload "train" is Pending
    And no GPU lease is held
    When 1 "dgx-a100" node joins the cluster
    Then GpuWorkload "train" is Running
    And every replica of GpuWorkload "train" holds 4 GPUs of its own
    And no GPU is held twice

  Scenario: A failed pod is retried after a backoff, and the workload fails once retries run out
    Given a cluster of 1 "dgx-a100" node
    When GpuWorkload "train" is applied:
      """yaml
      replicas: 2
      claim: {spec: {devices: {count: 1}}}
      retryPolicy: {maxRetries: 2, backoffSeconds: 1}
      """
    Then GpuWorkload "train" is Running
    When replica 0 of GpuWorkload "train" fails
    Then GpuWorkload "train" has a Warning event "PodFailed" saying "pod train-0-0 failed: Xid 79: GPU has fallen off the bus; retry 1 of 2 in 1"
    And replica 0 of GpuWorkload "train" runs as attempt 1 after 1 retry
    When replica 0 of GpuWorkload "train" fails
    Then GpuWorkload "train" has a Warning event "PodFailed" saying "pod train-0-1 failed: Xid 79: GPU has fallen off the bus; retry 2 of 2 in 2"
    And replica 0 of GpuWorkload "train" runs as attempt 2 after 2 retries
    When replica 1 of GpuWorkload "train" fails
    Then GpuWorkload "train" is Failed with message "pod train-1-0 failed: Xid 79: GPU has fallen off the bus; no retries left (2 of 2 used)"
    And GpuWorkload "train" has a Warning event "Failed" saying "Running → Failed"
    And no GPU lease is held
    And gpu-controller's metrics count gpu_scheduler_workloads_failed_total{reason="PodFailed"} above 0
    And gpu-controller's metrics count gpu_scheduler_workload_retries_total above 0
    And gpu-controller's metrics count gpu_scheduler_workloads_scheduled_total{strategy="default"} above 0

  Scenario: The scheduler follows each workload's node strategy
    Given a cluster of 3 "dgx-a100" nodes
    When GpuWorkload "packed" is applied:
      """yaml
      replicas: 3
      claim: {spec: {devices: {count: 1}}}
      """
    Then the replicas of GpuWorkload "packed" run on 1 different nodes
    When GpuWorkload "turns" is applied:
      """yaml
      replicas: 3
      nodeStrategy: round-robin
      claim: {spec: {devices: {count: 1}}}
      """
    Then the replicas of GpuWorkload "turns" run on 3 different nodes

  Scenario: A cost-aware workload goes to the cheapest node
    Given 1 "dgx-a100" node labelled "gpu.scheduling/cost=5"
    And 1 "dgx-a100" node labelled "gpu.scheduling/cost=0.5"
    And 1 "dgx-a100" node labelled "pool=unpriced"
    When GpuWorkload "cheap" is applied:
      """yaml
      replicas: 2
      nodeStrategy: cost-aware
      claim: {spec: {devices: {count: 2}}}
      """
    Then the replicas of GpuWorkload "cheap" all run on node 1

  Scenario: Deleting a workload removes its pods, claims and GPU leases
    Given a cluster of 1 "dgx-a100" node
    When GpuWorkload "train" is applied:
      """yaml
      replicas: 2
      claim: {spec: {devices: {count: 4}}}
      """
    Then GpuWorkload "train" is Running
    When GpuWorkload "train" is deleted
    Then GpuWorkload "train" is gone with its pods, claims and GPU leases

  Scenario: The API server refuses bad GpuWorkloads and names the field
    Then the API server refuses these GpuWorkloads:
      | case               | spec                                                                                                   | message                                                                                                                                                |
      | negative retries   | {retryPolicy: {maxRetries: -1}, claim: {spec: {devices: {count: 1}}}, template: {spec: {containers: [{name: c, image: i}]}}} | spec.retryPolicy.maxRetries: Invalid value: -1: spec.retryPolicy.maxRetries in body should be greater than or equal to 0 |
      | gang of 0 replicas | {replicas: 0, gang: true, claim: {spec: {devices: {count: 1}}}, template: {spec: {containers: [{name: c, image: i}]}}}        | spec.replicas: Invalid value: a gang needs at least 1 replica                                                            |
      | unknown strategy   | {nodeStrategy: cheapest, claim: {spec: {devices: {count: 1}}}, template: {spec: {containers: [{name: c, image: i}]}}}         | spec.nodeStrategy: Unsupported value: "cheapest": supported values: "binpack", "spread", "least-utilized", "round-robin", "random", "cost-aware" |
      | two claim forms    | {claim: {templateName: t, spec: {devices: {count: 1}}}, template: {spec: {containers: [{name: c, image: i}]}}}               | spec.claim: Invalid value: set exactly one of claim.spec and claim.templateName                                          |
      | gangRef by hand    | {claim: {spec: {devices: {count: 1}, gangRef: g}}, template: {spec: {containers: [{name: c, image: i}]}}}                    | spec.claim.spec.gangRef: Invalid value: claim.spec.gangRef is set by the controller; use gang: true instead               |

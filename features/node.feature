@node
Feature: The kubelet hands a container exactly the GPUs gpu-scheduler chose
  On a node, the kubelet's own device manager asks the agent's device plugin for a pod's GPUs.
  The request names no pod, so the plugin finds the pod bound to the node whose allocation is
  being prepared. These scenarios run the kubelet's device manager code
  (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager) and the agent's plugin on 8 mock GPUs, over
  the real unix-socket registration, in a private mount namespace. They run with the
  agent/deviceplugin tests (go test ./agent/deviceplugin), not in the control-plane suite.

  Background:
    Given a node with 8 mock GPUs whose kubelet runs the device manager with our device plugin

  Scenario: Two pods that start at once never swap GPUs
    When 2 pods bound to 2 different GPUs each start at once, 1000 times over
    Then every container got exactly the GPUs the scheduler chose for its pod
    And the kubelet recorded the same GPUs for every pod

  Scenario: A GPU that turns unhealthy leaves the kubelet's allocatable, and comes back
    When GPU 5 turns unhealthy
    Then the kubelet counts 7 allocatable GPUs, GPU 5 not among them
    When GPU 5 recovers
    Then the kubelet counts 8 allocatable GPUs

  Scenario: A pod without an allocation of ours is refused, with the reason
    When a pod asking for 1 GPU is bound to the node without an allocation from gpu-scheduler
    Then the kubelet refuses to start it with "without an allocation by gpu-scheduler"

  Scenario: The agent and the kubelet restart between two pods' starts
    Given a pod bound to GPUs 0,1 and a pod bound to GPUs 4,5
    And the first pod has started with GPUs 0,1
    When the agent restarts
    And the kubelet restarts
    Then the first pod still holds GPUs 0,1 in the kubelet's checkpoint
    And the second pod starts with GPUs 4,5

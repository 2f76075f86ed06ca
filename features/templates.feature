@templates
Feature: Pods get GPUs from a GpuClaimTemplate, one claim per pod, cleaned up with the pod
  A pod, or the pod template of a Job or a Deployment, names a GpuClaimTemplate in the
  gpu.scheduling/claim-template annotation. Every pod gets one GpuClaim made from it, named
  "<pod>-<template>" and owned by the pod: the scheduler places the pod with the template and
  makes the claim when it binds the pod (gpu-controller makes the claims of gang templates,
  before the gang is placed, and reports a missing template). When the pod goes away the
  garbage collector deletes the claim and the scheduler releases the GPUs.

  Scenario: A pod gets its own claim from a template, and pod, claim and leases go together
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When pod "p" uses claim template "x2"
    Then pod "p" has a GpuClaim made from template "x2" that it owns
    And pod "p" is bound
    When pod "p" is deleted
    Then the GpuClaim of pod "p" from template "x2" is gone
    And the GPU leases of pod "p" are released

  Scenario: A missing template leaves the pod Pending with an event naming it, until it appears
    Given a cluster of 1 "dgx-a100" node
    When pod "q" uses claim template "later"
    Then pod "q" has a Warning event "ClaimTemplateNotFound" saying "GpuClaimTemplate {namespace}/later named in annotation gpu.scheduling/claim-template does not exist"
    And pod "q" is pending: "waiting for GpuClaim {namespace}/q-later to be made from GpuClaimTemplate later for pod q: GpuClaimTemplate {namespace}/later does not exist"
    When GpuClaimTemplate "later" for 1 GPU is created
    Then pod "q" has a GpuClaim made from template "later" that it owns
    And pod "q" is bound

  Scenario: Deleting a template leaves the pods made from it running, with their claims
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When Deployment "serve" runs 2 pods from claim template "x2"
    Then the 2 live pods of Deployment "serve" hold 2 GPUs each from claims they own
    When GpuClaimTemplate "x2" is deleted
    And pod "late" uses claim template "x2"
    Then pod "late" has a Warning event "ClaimTemplateNotFound" saying "GpuClaimTemplate {namespace}/x2 named in annotation gpu.scheduling/claim-template does not exist"
    And every pod bound before GpuClaimTemplate "x2" was deleted still runs on the same GPUs with the same claim
    And the 2 live pods of Deployment "serve" hold 2 GPUs each from claims they own
    And no GPU is held twice

  Scenario Outline: A <kind> Job's pods each get their own GPUs and leave nothing behind
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When <kind> Job "train" runs 4 pods at once for 3 seconds each from claim template "x2"
    Then the 4 live pods of Job "train" hold 2 GPUs each from claims they own
    And Job "train" succeeds
    And no GPU lease is held

    Examples:
      | kind     |
      | indexed  |
      | plain    |

  Scenario: A Job's pods share one GPU from a Shared template, each with its own claim and share
    An l4-x1 node has one GPU: four pods of a quarter of its memory each fit on it together.
    Given a cluster of 1 "l4-x1" node
    And GpuClaimTemplate "quarter" for a Shared GPU with 25 % of its memory
    When plain Job "notebooks" runs 4 pods at once for 3 seconds each from claim template "quarter"
    Then the 4 live pods of Job "notebooks" share 1 GPU each from claims they own
    And no GPU's shares over-commit its memory or compute
    And Job "notebooks" succeeds
    And no GPU lease is held

  Scenario: A Deployment's pods keep their own GPUs through a rollout, and old claims go away
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When Deployment "serve" runs 2 pods from claim template "x2"
    Then the 2 live pods of Deployment "serve" hold 2 GPUs each from claims they own
    When Deployment "serve" is rolled out again
    Then the 2 live pods of Deployment "serve" hold 2 GPUs each from claims they own
    And every GpuClaim left belongs to a live pod

  Scenario: A StatefulSet's pods keep their claims by ordinal; scale-down and a deleted pod clean up
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "x2" for 2 GPUs
    When StatefulSet "shard" runs 3 pods from claim template "x2"
    Then the 3 live pods of StatefulSet "shard" hold 2 GPUs each from claims they own
    When StatefulSet "shard" is scaled to 2
    Then the GpuClaim of pod "shard-2" from template "x2" is gone
    And the 2 live pods of StatefulSet "shard" hold 2 GPUs each from claims they own
    When pod "shard-0" is deleted by hand and made again with a GpuClaim of its own from template "x2"
    Then the 2 live pods of StatefulSet "shard" hold 2 GPUs each from claims they own
    And every GpuClaim left belongs to a live pod

  Scenario: A gang named in the template starts all of a Job's pods together or none
    Given a cluster of 1 "dgx-a100" node
    And GpuClaimTemplate "gang" for 4 GPUs in a gang of 3
    When plain Job "train" runs 3 pods at once for 60 seconds each from claim template "gang"
    Then no pod of Job "train" is bound
    And no GPU lease is held
    When 1 "dgx-a100" node joins the cluster
    Then the 3 live pods of Job "train" hold 4 GPUs each from claims they own

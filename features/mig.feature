@mig
Feature: GPUs in MIG mode are never allocated whole
  The operator lays out MIG devices (docs/sharing.md); a GPU in MIG mode serves only its MIG
  devices, so a whole-GPU claim on a node with some GPUs in MIG mode and some whole gets the
  whole ones only. A dgx-h100-mig node has GPUs 0-3 in MIG mode and GPUs 4-7 whole. Placing
  exclusivity MIG claims on MIG devices is not done in the scheduler yet.

  Background:
    Given a cluster of 1 "dgx-h100-mig" node

  Scenario: A whole-GPU claim never lands on a MIG-mode GPU
    When pod "whole" claims 4 GPUs
    Then pod "whole" is bound to GPUs "4,5,6,7"
    When pod "more" claims 1 GPU
    Then pod "more" is pending: "no node has 1 healthy free GPUs"

// Package webhook is the gpu-scheduler admission webhook.
//
// It has two jobs:
//
//   - /mutate (pod CREATE): every container and init container of a pod that names a GpuClaim
//     or uses the gpu-scheduler gets CUDA_VISIBLE_DEVICES (and/or NVIDIA_VISIBLE_DEVICES),
//     valued through the Downward API from the pod's own gpu.scheduling/gpu-ids annotation.
//     The pod spec is immutable after creation and no GPU has been chosen at creation, so the
//     variable points at an annotation the scheduler writes later, when it binds the pod; the
//     kubelet resolves it when the container starts.
//   - /validate (pod CREATE/UPDATE, pods/status UPDATE, pods/binding CREATE): only the
//     scheduler's identity may set, change or remove gpu.scheduling/allocated and
//     gpu.scheduling/gpu-ids, and nobody may create a pod that already carries them. Otherwise
//     any user could point their containers at GPUs that another pod holds.
//
// The server is HTTPS only; its certificate is reloaded from the mounted files when they rotate.
// Package manifests renders the webhook configurations that point the kube-apiserver at it.
package webhook

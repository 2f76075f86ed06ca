#!/usr/bin/env bash
# Hardware check on a real GPU node (docs/node.md, "make e2e-gpu"): install the chart with the
# device plugin on the cluster of the current kubectl context, run a pod holding 2 GPUs, and
# check from inside its container that nvidia-smi -L lists exactly the UUIDs of the GPUs the
# scheduler chose. Skips (exit 0) when this machine has no NVIDIA driver.
set -euo pipefail

cd "$(dirname "$0")/.."
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
NS=${E2E_NAMESPACE:-gpu-e2e}
RELEASE_NS=${RELEASE_NAMESPACE:-gpu-scheduler}
IMAGE=${E2E_IMAGE:-nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04}
COUNT=2

have_driver() {
	command -v nvidia-smi >/dev/null 2>&1 || return 1
	ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1' && return 0
	for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu /usr/local/nvidia/lib64; do
		[ -e "$d/libnvidia-ml.so.1" ] && return 0
	done
	return 1
}

if ! have_driver; then
	echo "e2e-gpu: SKIPPED: no NVIDIA driver on this machine (nvidia-smi or libnvidia-ml.so.1 not found); run it on a GPU node's cluster"
	exit 0
fi

node=${E2E_NODE:-$("$KUBECTL" get nodes -o jsonpath='{.items[0].metadata.name}')}
echo "e2e-gpu: node $node, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
"$KUBECTL" label node "$node" gpu.scheduling/managed=true --overwrite
"$HELM" upgrade --install gpu-scheduler charts/gpu-scheduler --namespace "$RELEASE_NS" --create-namespace \
	--set devicePlugin.enabled=true --wait --timeout 5m
"$KUBECTL" create namespace "$NS" --dry-run=client -o yaml | "$KUBECTL" apply -f -

cleanup() { "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

"$KUBECTL" apply -n "$NS" -f - <<YAML
apiVersion: gpu.scheduling/v1
kind: GpuClaim
metadata: {name: two}
spec: {devices: {count: $COUNT}}
---
apiVersion: v1
kind: Pod
metadata:
  name: two
  annotations: {gpu.scheduling/claim: two}
spec:
  schedulerName: gpu-scheduler
  restartPolicy: Never
  nodeSelector: {kubernetes.io/hostname: $node}
  containers:
  - name: main
    image: $IMAGE
    command: [sleep, "600"]
YAML
"$KUBECTL" wait -n "$NS" pod/two --for=condition=Ready --timeout=5m

ids=$("$KUBECTL" get pod -n "$NS" two -o jsonpath='{.metadata.annotations.gpu\.scheduling/gpu-ids}')
echo "e2e-gpu: scheduler chose GPUs $ids on $node"
want=$(for id in ${ids//,/ }; do nvidia-smi -i "$id" --query-gpu=uuid --format=csv,noheader; done | sort)
got=$("$KUBECTL" exec -n "$NS" two -- nvidia-smi -L | sed -n 's/.*(UUID: \(GPU-[^)]*\)).*/\1/p' | sort)
echo "e2e-gpu: nvidia-smi -L in the container:"
"$KUBECTL" exec -n "$NS" two -- nvidia-smi -L
if [ "$(echo "$want" | wc -l)" -ne "$COUNT" ] || [ "$want" != "$got" ]; then
	echo "e2e-gpu: FAILED: the container sees"; echo "$got"; echo "want exactly"; echo "$want"
	exit 1
fi
echo "e2e-gpu: PASSED: the container sees exactly the $COUNT chosen GPUs"

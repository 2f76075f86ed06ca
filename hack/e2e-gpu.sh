#!/usr/bin/env bash
# Hardware check on a real GPU machine (docs/node.md, "make e2e-gpu"). Skips (exit 0) when this
# machine has no NVIDIA driver. Otherwise:
#  1. node (always): the agent's NVML adapter over the real GPUs (TestRealNVML), the whole agent
#     writing the GpuNodeStatus and the DRA ResourceSlice, checked against nvidia-smi
#     (TestRealAgent), and the
#     kubelet's own device manager handing a pod's container exactly its scheduler-chosen GPU,
#     proven with nvidia-smi -L in a /dev holding only the CDI-resolved device nodes
#     (TestRealGPUContainerView). Run with `go test`, or, where there is no Go toolchain, from
#     the test binaries of `make e2e-gpu-bin` copied over: E2E_GPU_TESTBIN=<their folder>.
#  2. cluster (when the current kubectl context reaches a cluster with nodes): install the chart
#     with the device plugin, run a pod holding 2 GPUs, and check from inside its container that
#     nvidia-smi -L lists exactly the UUIDs of the GPUs the scheduler chose.
set -euo pipefail

cd "$(dirname "$0")/.."
KUBECTL=${KUBECTL:-kubectl}
HELM=${HELM:-helm}
NS=${E2E_NAMESPACE:-gpu-e2e}
RELEASE_NS=${RELEASE_NAMESPACE:-gpu-scheduler}
IMAGE=${E2E_IMAGE:-nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04}
COUNT=2
NODE_TESTS='^(TestRealNVML|TestRealAgent|TestRealGPUContainerView)$'

have_driver() {
	command -v nvidia-smi >/dev/null 2>&1 || return 1
	ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1' && return 0
	for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/aarch64-linux-gnu /usr/local/nvidia/lib64; do
		[ -e "$d/libnvidia-ml.so.1" ] && return 0
	done
	return 1
}

if ! have_driver; then
	echo "e2e-gpu: SKIPPED: no NVIDIA driver on this machine (nvidia-smi or libnvidia-ml.so.1 not found); run it on a GPU node"
	exit 0
fi

echo "e2e-gpu: driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), kernel $(uname -r), GPUs:"
nvidia-smi -L
# The CDI spec names the node-wide control devices; the driver makes /dev/nvidia-uvm* only when
# the UVM module is first used, as a node that has run a CUDA container has.
if [ ! -e /dev/nvidia-uvm ] && command -v nvidia-modprobe >/dev/null 2>&1; then
	echo "e2e-gpu: /dev/nvidia-uvm is missing; nvidia-modprobe -u -c=0 makes it"
	nvidia-modprobe -u -c=0 || true
fi
ls -l /dev/nvidia* 2>&1 | sed 's/^/e2e-gpu: /'

node_check() {
	local log status=0
	log=$(mktemp)
	if [ -n "${E2E_GPU_TESTBIN:-}" ]; then
		echo "e2e-gpu: node check from the test binaries in $E2E_GPU_TESTBIN"
		for t in nvmlgpu agent deviceplugin; do
			"$E2E_GPU_TESTBIN/$t.test" -test.run "$NODE_TESTS" -test.count=1 -test.v 2>&1 | tee -a "$log" || status=1
		done
	elif command -v go >/dev/null 2>&1; then
		echo "e2e-gpu: node check with go test"
		CGO_ENABLED=1 go test -count=1 -v -run "$NODE_TESTS" ./agent/nvmlgpu ./agent ./agent/deviceplugin 2>&1 | tee "$log" || status=1
	else
		echo "e2e-gpu: FAILED: no Go toolchain here; build the test binaries with 'make e2e-gpu-bin' on a machine with Go, copy bin/e2e-gpu over and set E2E_GPU_TESTBIN to it"
		rm -f "$log"
		return 1
	fi
	# With a driver present a skipped hardware test proves nothing.
	if grep -q -- '--- SKIP' "$log"; then
		echo "e2e-gpu: FAILED: a hardware test skipped although an NVIDIA driver is present"
		status=1
	fi
	if [ "$(grep -c -- '--- PASS: TestReal' "$log")" -ne 3 ]; then
		echo "e2e-gpu: FAILED: want 3 hardware tests passed, got $(grep -c -- '--- PASS: TestReal' "$log")"
		status=1
	fi
	rm -f "$log"
	[ "$status" -eq 0 ] && echo "e2e-gpu: node check PASSED"
	return "$status"
}

cluster_check() {
	local node ids want got
	node=${E2E_NODE:-$("$KUBECTL" get nodes -o jsonpath='{.items[0].metadata.name}')}
	echo "e2e-gpu: cluster check on node $node"
	"$KUBECTL" label node "$node" gpu.scheduling/managed=true --overwrite
	"$HELM" upgrade --install gpu-scheduler charts/gpu-scheduler --namespace "$RELEASE_NS" --create-namespace \
		--set devicePlugin.enabled=true --wait --timeout 5m
	"$KUBECTL" create namespace "$NS" --dry-run=client -o yaml | "$KUBECTL" apply -f -
	trap '"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true' EXIT

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
		return 1
	fi
	echo "e2e-gpu: cluster check PASSED: the container sees exactly the $COUNT chosen GPUs"
}

node_check
if command -v "$KUBECTL" >/dev/null 2>&1 && [ -n "$("$KUBECTL" get nodes -o name --request-timeout=10s 2>/dev/null | head -1)" ]; then
	cluster_check
else
	echo "e2e-gpu: cluster check SKIPPED: no kubectl context reaching a cluster with nodes (the node check above ran)"
fi
echo "e2e-gpu: PASSED"

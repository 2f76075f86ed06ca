#!/usr/bin/env bash
# Runs README.md's "Try it by hand" walkthrough exactly as written (the sh block between the
# walkthrough markers) and checks what it printed. Used by `make test-dev`; needs `make build`
# and the tools in _output/bin. Set WALKTHROUGH_OUT to keep the transcript.
set -euo pipefail
cd "$(dirname "$0")/.."

script=$(awk '/<!-- walkthrough:begin -->/{on=1; next} /<!-- walkthrough:end -->/{on=0} on && !/^```/' README.md)
if [[ -z "$script" ]]; then
	echo "README.md has no walkthrough between <!-- walkthrough:begin --> and <!-- walkthrough:end -->" >&2
	exit 1
fi
# A dev cluster someone is using is never touched: the walkthrough starts and stops its own.
state=_output/cluster/dev/cluster.json
if [[ -f $state ]]; then
	pid=$(sed -n 's/.*"ownerPID": *\([0-9][0-9]*\).*/\1/p' "$state")
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		echo "a dev cluster is running (pid $pid, make dev): run make dev-down first" >&2
		exit 1
	fi
fi
out=${WALKTHROUGH_OUT:-$(mktemp)}
# Whatever happens, the cluster goes: the walkthrough's own last line is make dev-down.
trap 'bin/gpu-sim cluster down --name dev >/dev/null 2>&1 || true' EXIT

export GPU_SIM_BUILD=0
start=$(date +%s)
if ! bash -euo pipefail -c "$script" >"$out" 2>&1; then
	echo "the walkthrough failed; its transcript:" >&2
	cat "$out" >&2
	exit 1
fi
echo "walkthrough ran in $(( $(date +%s) - start ))s"

# What the README says the reader sees.
expect=(
	'gpuclaim.gpu.scheduling/train-4 created'
	'pod/train condition met'
	'default/train'
	'GPU 3'
	'  3    NVIDIA H100 80GB HBM3  Unhealthy'
	'HEALTH     SINCE  RECOVERIES'
	'1 node: needs 8 healthy free GPUs; node has 4 (4 held)'
	'1 node: needs 8 healthy free GPUs; node has 7 (1 not healthy)'
	'NVIDIA H100 80GB HBM3  dgx-h100  2      16     4          11    1'
	'GPU  UTIL  MEMORY'
	'Claims: Bound=1 Pending=1'
	'cluster dev stopped'
)
fail=0
for e in "${expect[@]}"; do
	if ! grep -qF -- "$e" "$out"; then
		echo "the walkthrough's output lacks: $e" >&2
		fail=1
	fi
done
if ((fail)); then
	echo "--- transcript:" >&2
	cat "$out" >&2
	exit 1
fi
echo "walkthrough output as README describes"

#!/usr/bin/env bash
# Writes steady-pods.csv, the pod list of scenarios/steady-fill.yaml: 5,200 pods, one every 15 ms
# (66.7/s), in the shape of the openb default trace's GPU pods (99 % ask for one GPU, every
# hundredth for two). Deterministic; rerun it after changing the numbers below.
set -euo pipefail
cd "$(dirname "$0")"
pods=5200 gap_ms=15
{
	echo "created,gpus"
	awk -v n="$pods" -v gap="$gap_ms" 'BEGIN { for (i = 0; i < n; i++) printf "%d,%d\n", i * gap, (i % 100 == 99) ? 2 : 1 }'
} >steady-pods.csv

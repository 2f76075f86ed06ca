#!/usr/bin/env bash
# Runs the tool build's preflight (hack/build-tools.sh --preflight) as a brand-new machine would:
# an empty HOME in a temp directory (no ~/.cache, no ~/go), no GOCACHE/GOPATH/GOFLAGS, no locale,
# only Go on PATH. A new user's first `make sim` once died here because the preflight ran df on
# ~/.cache, which did not exist yet; make verify runs this so that cannot come back. It builds
# nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
go_bin=$(dirname "$(command -v go)")
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/home"

# TOOLS_MIN_FREE_GIB=0: this checks that the preflight copes with missing directories, not how
# full the disk of the machine running the tests is.
if ! out=$(cd "$scratch" && env -i HOME="$scratch/home" PATH="$go_bin:/usr/bin:/bin" TOOLS_MIN_FREE_GIB=0 \
	bash "$root/hack/build-tools.sh" --preflight 2>&1); then
	echo "test-preflight: hack/build-tools.sh --preflight failed with an empty HOME ($scratch/home):" >&2
	echo "$out" >&2
	exit 1
fi
if [ "$out" != "tools: preflight ok" ]; then
	echo "test-preflight: unexpected output from hack/build-tools.sh --preflight with an empty HOME:" >&2
	echo "$out" >&2
	exit 1
fi
echo "test-preflight: ok (empty HOME, no ~/.cache)"

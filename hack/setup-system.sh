#!/usr/bin/env bash
# Installs the system packages that `make test` needs and Go cannot build: Debian's Chromium
# (the report test renders the HTML report headless) and, for the real node (make node-up,
# make e2e-node), what it runs on beside the binaries built from the Go module proxy: runc, the
# standard CNI plugins, iptables and conntrack. The Makefile runs this before the
# tests, so that README's `make test` passes on a fresh machine exactly as written.
#
# As root on Debian/Ubuntu it installs what is missing with apt-get. Otherwise it prints one
# line naming what to install and exits non-zero: the tests would fail later, less clearly.
#
#   hack/setup-system.sh            install what is missing (root) or say what is (not root)
#   hack/setup-system.sh --check    only say what is missing; exit 1 when something is
set -euo pipefail
export LC_ALL=C

mode=install
case "${1:-}" in
--check) mode=check ;;
"") ;;
*)
	echo "usage: hack/setup-system.sh [--check]" >&2
	exit 2
	;;
esac

# command on PATH => Debian package that provides it. Data, not code: add a line when a test
# starts to need another system tool.
declare -A needs=(
	[chromium]=chromium
	[iptables]=iptables
	[conntrack]=conntrack
	[ip]=iproute2
	[mount]=mount
	[runc]=runc
)
# Files (libraries) => package, for what is linked rather than run.
declare -A files=(
	[/usr/include/seccomp.h]=libseccomp-dev
	[/usr/lib/cni/bridge]=containernetworking-plugins
)

missing=()
for cmd in "${!needs[@]}"; do
	if ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/sbin/$cmd" ]; then
		missing+=("${needs[$cmd]}")
	fi
done
for f in "${!files[@]}"; do
	[ -e "$f" ] || missing+=("${files[$f]}")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)

if [ "$mode" = check ]; then
	echo "setup: missing system packages: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "setup: the tests need these system packages, install them (as root: apt-get install -y ${missing[*]})" >&2
	exit 1
fi
echo "setup: installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
# The package lists of a fresh machine may be stale or absent: refresh them once, quietly.
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null
echo "setup: installed ${missing[*]}"

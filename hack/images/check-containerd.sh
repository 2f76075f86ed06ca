#!/usr/bin/env bash
# Loads the archives of `make images` into a containerd of its own (root, state and socket under
# /tmp, so the machine's containerd and anyone else's are left alone), exactly as docs/install.md
# says (ctr -n k8s.io images import), and runs real containers from them with runc: the test
# image's shell, gpu-webhook and gpu-agent (glibc, dynamically linked) with --help, and the pause
# image until SIGTERM. Needs root, containerd and runc; says so in one line and exits 0 without
# them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
images=${IMAGES_DIR:-$root/_output/images}

if [ "$(id -u)" != 0 ]; then
	echo "check-containerd: skipped: running containers needs root"
	exit 0
fi
for b in containerd ctr runc; do
	if ! command -v "$b" >/dev/null; then
		echo "check-containerd: skipped: $b is not installed (apt-get install containerd runc)"
		exit 0
	fi
done
for n in gpu-scheduler gpu-webhook gpu-controller gpu-agent pause testbox; do
	if [ ! -f "$images/$n.oci.tar" ]; then
		echo "check-containerd: $images/$n.oci.tar is missing: run make images first" >&2
		exit 1
	fi
done

tmp=$(mktemp -d /tmp/gpu-images-containerd.XXXXXX)
sock=$tmp/containerd.sock
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	# Snapshot mounts of containers that did not stop cleanly.
	grep -o " $tmp/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/config.toml" <<EOF
version = 2
root = "$tmp/root"
state = "$tmp/state"
# Only what importing and running with ctr needs: no CRI (no kubelet here), no /opt plugins.
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$sock"
EOF
containerd --config "$tmp/config.toml" >"$tmp/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && ctr -a "$sock" version >/dev/null 2>&1 && break
	sleep 0.1
done
if ! ctr -a "$sock" version >/dev/null 2>&1; then
	echo "check-containerd: containerd did not start:" >&2
	tail -20 "$tmp/containerd.log" >&2
	exit 1
fi
echo "check-containerd: $(containerd --version)"
ctr_() { ctr -a "$sock" -n k8s.io "$@"; }
fail() {
	echo "check-containerd: FAIL: $*" >&2
	tail -20 "$tmp/containerd.log" >&2
	exit 1
}

for f in "$images"/*.oci.tar; do
	ctr_ images import "$f" >/dev/null || fail "ctr images import $f"
done
ctr_ images ls
want=$(awk '!/^#/ {print $1, $2}' "$images/images.txt" | sort)
got=$(ctr_ images ls | awk 'NR > 1 {print $1, $3}' | sort)
[ "$want" = "$got" ] || fail "images in containerd differ from images.txt:"$'\n'"want:"$'\n'"$want"$'\n'"got:"$'\n'"$got"
ref() { awk -v n="$1" '!/^#/ && $3 == n".oci.tar" {print $1; exit}' "$images/images.txt"; }

out=$(ctr_ run --rm "$(ref testbox)" check-testbox sh -c 'id -u; ls -d /dev /proc /tmp; ls /dev | grep -c .') || fail "testbox"
echo "$out"
[ "$(echo "$out" | head -1)" = 0 ] || fail "testbox: not root: $out"

for c in gpu-webhook gpu-agent; do
	out=$(ctr_ run --rm "$(ref $c)" "check-$c" "/$c" --help 2>&1) && rc=0 || rc=$?
	# flag's --help exits 0 (pflag) or 2 (the standard library's flag).
	if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then
		fail "$c --help exited $rc: $out"
	fi
	echo "$out" | grep -q -- '-kubeconfig' || fail "$c --help did not print its flags: $out"
	echo "check-containerd: $c --help ran (exit $rc)"
done

ctr_ run -d "$(ref pause)" check-pause >/dev/null || fail "pause did not start"
sleep 1
[ "$(ctr_ task ls | awk '$1 == "check-pause" {print $3}')" = RUNNING ] || fail "pause is not running"
# The image's user, not root (ctr run takes USER from the image config as the kubelet does).
ppid=$(ctr_ task ls | awk '$1 == "check-pause" {print $2}')
uid=$(awk '/^Uid:/ {print $2}' "/proc/$ppid/status")
[ "$uid" = 65535 ] || fail "pause runs as uid $uid, want 65535"
ctr_ task kill -s SIGTERM check-pause
for _ in $(seq 50); do
	status=$(ctr_ task ls | awk '$1 == "check-pause" {print $3}')
	[ "$status" = STOPPED ] && break
	sleep 0.1
done
[ "$status" = STOPPED ] || fail "pause did not stop on SIGTERM (status $status)"
ctr_ task delete check-pause >/dev/null
ctr_ containers delete check-pause
echo "check-containerd: pause stopped on SIGTERM"
echo "check-containerd: ok"

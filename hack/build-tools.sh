#!/usr/bin/env bash
# Builds the real control-plane parts that sim/cluster runs — kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, kwokctl and helm — and
# Prometheus's promtool (with promql-metrics, our lister of the metrics rules and dashboards read)
# from the Go module proxy into _output/bin. Prebuilt downloads do not work on our machines, so everything is
# compiled. A stamp file keyed on the pinned versions (and the go.mod/go.sum that pin them) makes a
# second run a no-op; change a version below or in a tools go.mod and the next run rebuilds.
#
#   hack/build-tools.sh              build what is missing or stale
#   FORCE=1 hack/build-tools.sh      rebuild everything
#   hack/build-tools.sh --preflight  only check that this machine can build (Go, disk space);
#                                    hack/test-preflight.sh runs it with an empty HOME
#   hack/build-tools.sh --node       also build what a real node runs (make node-up, make e2e-node):
#                                    kubelet and kube-proxy (pinned by hack/tools/go.mod) and
#                                    containerd 2.x with its runc shim and ctr, under a stamp of their own
#   hack/build-tools.sh --lint       only golangci-lint with logcheck linked in (hack/tools/golangci-lint),
#                                    under a stamp of its own; hack/verify.sh runs this, make sim never does
#   hack/build-tools.sh --kueue      only Kueue's controller manager (kueue) and the Helm chart of the
#                                    same module version (_output/kueue/chart), under a stamp of its
#                                    own; the acceptance tests run it, make sim never does
set -euo pipefail
# Nothing below may depend on the user's locale (df and awk output, sort order).
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=build
case "${1:-}" in
--preflight) mode=preflight ;;
--node) mode=node ;;
--lint) mode=lint ;;
--kueue) mode=kueue ;;
"") ;;
*)
	echo "usage: hack/build-tools.sh [--preflight|--node|--lint|--kueue]" >&2
	exit 2
	;;
esac

# preflight fails with a clear message when this machine cannot build the tools. It must work on a
# new machine: only Go and a home directory, no ~/.cache or GOPATH yet (the Go caches may not exist:
# measure the nearest directory that does).
preflight() {
	if ! command -v go >/dev/null; then
		echo "tools: go is not on PATH (install Go 1.26)" >&2
		return 1
	fi
	local probe avail_kb need_kb=$((${TOOLS_MIN_FREE_GIB:-8} * 1024 * 1024))
	if ! probe=$(go env GOCACHE) || [ -z "$probe" ]; then
		echo "tools: go env GOCACHE failed (set HOME or GOCACHE)" >&2
		return 1
	fi
	while [ ! -d "$probe" ] && [ "$probe" != / ]; do probe=$(dirname "$probe"); done
	avail_kb=$(df -Pk "$probe" | awk 'NR==2 {print $4}')
	if [ "${avail_kb:-0}" -lt "$need_kb" ]; then
		echo "tools: only $((${avail_kb:-0} / 1024)) MiB free under $probe for the Go caches; a cold build needs ~${TOOLS_MIN_FREE_GIB:-8} GiB (free some disk)" >&2
		return 1
	fi
}
if [ "$mode" = preflight ]; then
	preflight
	echo "tools: preflight ok"
	exit 0
fi

# The pins. Kubernetes and etcd are pinned by hack/tools/go.mod and hack/tools/etcd/go.mod (the
# versions here only feed the version ldflags and the stamp); kwok and helm by `go install @v`.
K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
# containerd 2.x: the first line with CDI (Debian's 1.6 has none), which is how our device plugin's
# devices reach a container. runc and the CNI plugins come from the distribution (hack/node.sh).
CONTAINERD_VERSION=v2.4.2
# Bump when a build command below changes what it produces (a flag, a package, a binary). The
# stamp is keyed on this, the pins, the ldflags and the tools modules — not on the text of this
# script, so editing comments or the preflight does not rebuild every checkout's tools.
TOOLS_STAMP_VERSION=2

bin="$root/_output/bin"

# golangci-lint comes from its own module (hack/tools/golangci-lint pins it and logcheck) with its
# own stamp: only verify needs it, so neither `make tools` nor `make sim` waits for its build, and
# bumping it rebuilds nothing else.
build_lint_tools() {
	local lstamp="$bin/.lint-tools.stamp" lwant lversion t=$SECONDS
	lversion=$(awk '$1 == "github.com/golangci/golangci-lint/v2" {print $2}' hack/tools/golangci-lint/go.mod)
	if [ -z "$lversion" ]; then
		echo "tools: hack/tools/golangci-lint/go.mod does not require github.com/golangci/golangci-lint/v2" >&2
		exit 1
	fi
	lwant=$(
		echo "go=$(go env GOVERSION) golangci-lint=$lversion"
		cat hack/tools/golangci-lint/go.mod hack/tools/golangci-lint/go.sum hack/tools/golangci-lint/*.go | sha256sum
	)
	if [ -z "${FORCE:-}" ] && [ -x "$bin/golangci-lint" ] && [ -f "$lstamp" ] && [ "$(cat "$lstamp")" = "$lwant" ]; then
		echo "tools: golangci-lint $lversion up to date in _output/bin"
		return 0
	fi
	rm -f "$lstamp"
	preflight
	mkdir -p "$bin"
	# The version ldflags make `golangci-lint version` name the pin (a go build of our own module
	# would otherwise report "(devel)").
	if ! (cd hack/tools/golangci-lint && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X main.version=${lversion#v} -X main.date=pinned" -o "$bin/golangci-lint" .); then
		echo "tools: building golangci-lint $lversion failed" >&2
		exit 1
	fi
	# The stamp is written only when the binary is the pin it claims to be.
	if ! "$bin/golangci-lint" version | grep -qF "version ${lversion#v} "; then
		echo "tools: _output/bin/golangci-lint does not report version ${lversion#v}:" >&2
		"$bin/golangci-lint" version >&2 || true
		exit 1
	fi
	echo "$lwant" >"$lstamp"
	echo "tools: golangci-lint $lversion (with logcheck) built in $((SECONDS - t))s"
}
if [ "$mode" = lint ]; then
	build_lint_tools
	exit 0
fi

# Kueue (sigs.k8s.io/kueue) is installed at its own go.mod's versions, as kwok and helm are, so
# its dependencies never move ours. Its CRDs, webhook configurations, webhook Service and
# certificate Secret come from the Helm chart in the same module zip (charts/kueue), copied
# beside the binary, so that the harness (sim/launch.StartKueue) installs exactly what this
# manager serves; nothing is downloaded but the module.
KUEUE_VERSION=v0.17.0
build_kueue() {
	local kstamp="$bin/.kueue.stamp" kwant t=$SECONDS dir kdir="$root/_output/kueue"
	kwant="kueue=$KUEUE_VERSION $(go env GOVERSION)"
	if [ -z "${FORCE:-}" ] && [ -x "$bin/kueue" ] && [ -f "$kdir/chart/Chart.yaml" ] && [ -f "$kstamp" ] && [ "$(cat "$kstamp")" = "$kwant" ]; then
		echo "tools: kueue $KUEUE_VERSION up to date in _output/bin"
		return 0
	fi
	rm -f "$kstamp"
	preflight
	mkdir -p "$bin"
	# The version ldflags make the manager log the pin it is (it would say v0.0.0-main).
	local v=sigs.k8s.io/kueue/pkg/version
	if ! CGO_ENABLED=0 GOBIN="$bin" go install -trimpath \
		-ldflags "-s -w -X $v.GitVersion=$KUEUE_VERSION -X $v.GitCommit=$KUEUE_VERSION -X $v.BuildDate=1970-01-01T00:00:00Z" \
		"sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"; then
		echo "tools: building kueue $KUEUE_VERSION failed" >&2
		exit 1
	fi
	if ! dir=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | awk -F'"' '$2 == "Dir" {print $4}') || [ ! -f "$dir/charts/kueue/Chart.yaml" ]; then
		echo "tools: the kueue $KUEUE_VERSION module in the module cache has no charts/kueue" >&2
		exit 1
	fi
	rm -rf "$kdir"
	mkdir -p "$kdir"
	cp -R "$dir/charts/kueue" "$kdir/chart"
	# The module cache is read-only; the copies need not be.
	chmod -R u+w "$kdir"
	echo "$kwant" >"$kstamp"
	echo "tools: kueue $KUEUE_VERSION built in $((SECONDS - t))s"
}
if [ "$mode" = kueue ]; then
	build_kueue
	exit 0
fi

# Prometheus's tools come from their own module (hack/tools/prometheus pins the version) with their
# own stamp, so adding or bumping them rebuilds nothing else, and the Kubernetes pins below never
# rebuild them.
build_prometheus_tools() {
	local pstamp="$bin/.prometheus-tools.stamp" pwant t=$SECONDS
	pwant=$(
		echo "go=$(go env GOVERSION)"
		cat hack/tools/prometheus/go.mod hack/tools/prometheus/go.sum hack/tools/prometheus/promql-metrics/*.go | sha256sum
	)
	if [ -z "${FORCE:-}" ] && [ -x "$bin/promtool" ] && [ -x "$bin/promql-metrics" ] && [ -f "$pstamp" ] && [ "$(cat "$pstamp")" = "$pwant" ]; then
		echo "tools: promtool and promql-metrics up to date in _output/bin ($(grep -o 'prometheus/prometheus v[0-9.]*' hack/tools/prometheus/go.mod))"
		return 0
	fi
	rm -f "$pstamp"
	preflight
	if ! (cd hack/tools/prometheus && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/" \
		github.com/prometheus/prometheus/cmd/promtool ./promql-metrics); then
		echo "tools: building promtool and promql-metrics failed" >&2
		exit 1
	fi
	echo "$pwant" >"$pstamp"
	echo "tools: promtool and promql-metrics built in $((SECONDS - t))s"
}
mkdir -p "$bin"
# PROMETHEUS_TOOLS=0: only the control plane (make sim and make dev never run promtool).
if [ "${PROMETHEUS_TOOLS:-1}" != 0 ]; then
	build_prometheus_tools
fi

# build_node_tools builds the node's binaries under a stamp of their own, so that neither `make
# tools` nor a bump of a node pin rebuilds the other's binaries. kubelet and kube-proxy share
# hack/tools/go.mod (and so every dependency version) with the control plane; containerd is
# installed at its own go.mod's versions, as kwok and helm are.
build_node_tools() {
	local nstamp="$bin/.node-tools.stamp" nwant t=$SECONDS b nmissing=()
	local node_bins=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr)
	nwant=$(
		echo "node=1 k8s=$K8S_VERSION containerd=$CONTAINERD_VERSION $(go env GOVERSION)"
		echo "k8s_ldflags=$k8s_ldflags"
		cat hack/tools/go.mod hack/tools/go.sum | sha256sum
	)
	for b in "${node_bins[@]}"; do [ -x "$bin/$b" ] || nmissing+=("$b"); done
	if [ -z "${FORCE:-}" ] && [ ${#nmissing[@]} -eq 0 ] && [ -f "$nstamp" ] && [ "$(cat "$nstamp")" = "$nwant" ]; then
		echo "tools: node binaries up to date in _output/bin (kubelet, kube-proxy $K8S_VERSION; containerd $CONTAINERD_VERSION)"
		return 0
	fi
	rm -f "$nstamp"
	preflight
	# One `go build` for both so that the packages they share compile once; static like the rest.
	if ! (cd hack/tools && CGO_ENABLED=0 go build -trimpath -ldflags "$k8s_ldflags" -o "$bin/" \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy); then
		echo "tools: building kubelet and kube-proxy failed" >&2
		exit 1
	fi
	echo "tools: kubelet, kube-proxy ($K8S_VERSION) built in $((SECONDS - t))s"
	t=$SECONDS
	# no_btrfs: the btrfs snapshotter needs cgo and headers, and the node uses overlayfs. The
	# version ldflags let `containerd --version` and the CRI's runtime version name the pin.
	if ! CGO_ENABLED=0 GOBIN="$bin" go install -trimpath -tags no_btrfs \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"; then
		echo "tools: building containerd $CONTAINERD_VERSION failed" >&2
		exit 1
	fi
	echo "tools: containerd, containerd-shim-runc-v2, ctr ($CONTAINERD_VERSION) built in $((SECONDS - t))s"
	echo "$nwant" >"$nstamp"
}
# A new name for the new key: checkouts still on the old script keep reading the old stamp file,
# so neither rebuilds the shared _output/bin for the other.
stamp="$bin/.control-plane-tools.v2.stamp"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok kwokctl helm)

# Without the version ldflags the binaries call themselves v0.0.0-master, and tools that read
# --version (kwokctl, kubectl version skew checks) pick the wrong behaviour.
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
if [ "$mode" = node ]; then
	build_node_tools
fi

want=$(
	echo "tools=$TOOLS_STAMP_VERSION k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION helm=$HELM_VERSION $(go env GOVERSION)"
	echo "k8s_ldflags=$k8s_ldflags"
	cat hack/tools/go.mod hack/tools/go.sum hack/tools/etcd/go.mod hack/tools/etcd/go.sum | sha256sum
)
missing=()
for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || missing+=("$b"); done
if [ -z "${FORCE:-}" ] && [ ${#missing[@]} -eq 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	echo "tools: up to date in _output/bin (k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION)"
	exit 0
fi
rm -f "$stamp"

preflight

export CGO_ENABLED=0

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$SECONDS

# Fetch every module first and concurrently: downloads are network-bound, the compiles below are
# CPU-bound, and on 2 cores overlapping two compiles buys nothing but memory pressure.
(cd hack/tools && go mod download) >"$logs/dl-k8s" 2>&1 &
(cd hack/tools/etcd && go mod download) >"$logs/dl-etcd" 2>&1 &
# `go install pkg@version` resolves and downloads before it compiles; `-n` stops after resolution.
GOBIN="$logs/none" go install -n "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >"$logs/dl-kwok" 2>&1 &
GOBIN="$logs/none" go install -n "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >"$logs/dl-helm" 2>&1 &
fail=0
for job in $(jobs -p); do wait "$job" || fail=1; done
if [ $fail -ne 0 ]; then
	cat "$logs"/dl-* >&2
	echo "tools: downloading modules from the Go module proxy failed (see above)" >&2
	exit 1
fi
echo "tools: modules downloaded in $((SECONDS - start))s"

step() { # name, command...: runs one build step and reports its duration
	local name=$1 t=$SECONDS
	shift
	if ! "$@"; then
		echo "tools: building $name failed" >&2
		exit 1
	fi
	echo "tools: $name built in $((SECONDS - t))s"
}

# The four Kubernetes binaries in one `go build` so shared packages compile once.
step "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl ($K8S_VERSION)" \
	bash -c "cd hack/tools && go build -trimpath -ldflags '$k8s_ldflags' -o '$bin/' \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl"
step "etcd ($ETCD_VERSION)" \
	bash -c "cd hack/tools/etcd && go build -trimpath -ldflags '-s -w' -o '$bin/etcd' go.etcd.io/etcd/server/v3"
step "kwok, kwokctl ($KWOK_VERSION)" \
	env GOBIN="$bin" go install -trimpath -ldflags "-s -w" \
	"sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
step "helm ($HELM_VERSION)" \
	env GOBIN="$bin" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION"

echo "$want" >"$stamp"
echo "tools: all built into _output/bin in $((SECONDS - start))s"

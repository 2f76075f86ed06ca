#!/usr/bin/env bash
# Fails when code is not gofmt-clean, go.mod/go.sum are not tidy, go vet or golangci-lint
# (.golangci.yml) complains, a Go comment or help text carries a date, or generated code or
# docs/api.md is stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

unformatted=$(gofmt -l $(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change these files (run gofmt -w):" >&2
	echo "$unformatted" >&2
	exit 1
fi

# go.mod must say what the code imports: a direct import marked // indirect, or a requirement
# nothing uses, is drift that `go mod tidy` would fix. -diff prints the change and fails without
# touching the files.
if ! tidy=$(go mod tidy -diff 2>&1); then
	echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit the result" >&2
	echo "$tidy" | head -40 >&2
	exit 1
fi

CGO_ENABLED=1 go vet ./...

# golangci-lint with the linters .golangci.yml names, each with why (Kubernetes' logcheck among
# them); hack/build-tools.sh --lint builds it into _output/bin once and again only when its pin moves.
bash hack/build-tools.sh --lint
CGO_ENABLED=1 "$root/_output/bin/golangci-lint" run ./...

# Comments say why and help texts what a flag does; a dated figure is a lab note, and belongs in
# docs/benchmarks.md (hack/nodates says which dates are allowed).
go run ./hack/nodates $(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go')

# The import graph's rules (test/deps): only gpu-scheduler links the kube-scheduler framework,
# and no shipped binary links the simulator's harness.
go test -count=1 ./test/deps/

# The image builder is a module of its own (hack/images): ./... above does not reach it.
if ! tidy=$(go -C hack/images mod tidy -diff 2>&1); then
	echo "hack/images/go.mod is not tidy: run 'go -C hack/images mod tidy' and commit the result" >&2
	echo "$tidy" | head -40 >&2
	exit 1
fi
go -C hack/images vet ./...
# The same linters over it, with the tree's configuration.
(cd hack/images && CGO_ENABLED=1 "$root/_output/bin/golangci-lint" run --config "$root/.golangci.yml" ./...)

# The tool build must start on a brand-new machine (empty HOME, no ~/.cache).
bash hack/test-preflight.sh

# Generate into a scratch copy of the tree and compare, so a dirty work tree is never touched.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$scratch/"
# The scratch copy shares _output/bin with the tree, so the generators are built only once.
mkdir -p "$root/_output/bin" "$scratch/_output"
ln -s "$root/_output/bin" "$scratch/_output/bin"
(cd "$scratch" && bash hack/update-codegen.sh >/dev/null)
for d in api charts/gpu-scheduler/crds docs/api.md; do
	if ! diff -r "$root/$d" "$scratch/$d" >/dev/null; then
		echo "generated code in $d is stale: run 'make generate' and commit the result" >&2
		diff -r "$root/$d" "$scratch/$d" | head -40 >&2
		exit 1
	fi
done
echo "verify: ok"

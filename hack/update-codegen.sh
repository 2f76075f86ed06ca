#!/usr/bin/env bash
# Regenerates deepcopy functions, CRD manifests, the typed clientset, listers and informers
# for api/v1, and docs/api.md (the field reference, hack/apidocs). The generators are pinned in hack/tools/go.mod and built into _output/bin.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin="$root/_output/bin"
mkdir -p "$bin"
(cd hack/tools && go build -o "$bin/" \
	sigs.k8s.io/controller-tools/cmd/controller-gen \
	k8s.io/code-generator/cmd/client-gen \
	k8s.io/code-generator/cmd/lister-gen \
	k8s.io/code-generator/cmd/informer-gen)

module=github.com/gpu-scheduler/gpu-scheduler
header=hack/boilerplate.go.txt
out=api/generated

"$bin/controller-gen" object:headerFile="$header" paths=./api/v1/...
rm -rf charts/gpu-scheduler/crds
# generateEmbeddedObjectMeta keeps the labels and annotations of embedded pod templates (they
# would be pruned otherwise).
"$bin/controller-gen" crd:generateEmbeddedObjectMeta=true paths=./api/v1/... output:crd:dir=charts/gpu-scheduler/crds

rm -rf "$out"
"$bin/client-gen" --go-header-file "$header" --clientset-name versioned \
	--input-base "" --input "$module/api/v1" \
	--output-pkg "$module/$out/clientset" --output-dir "$out/clientset"
"$bin/lister-gen" --go-header-file "$header" \
	--output-pkg "$module/$out/listers" --output-dir "$out/listers" "$module/api/v1"
"$bin/informer-gen" --go-header-file "$header" \
	--versioned-clientset-package "$module/$out/clientset/versioned" \
	--listers-package "$module/$out/listers" \
	--output-pkg "$module/$out/informers" --output-dir "$out/informers" "$module/api/v1"
gofmt -w api

# The field reference users read, from the same types and their doc comments.
go run ./hack/apidocs -dir api/v1 -out docs/api.md

#!/usr/bin/env bash
# make release VERSION=x.y.z: everything a release publishes, in one folder, pushed nowhere.
#
#   OUT/gpu-scheduler-VERSION.tgz          the chart, version and appVersion set to VERSION
#   OUT/kubectl-gpu_OS_ARCH.tar.gz         kubectl-gpu for linux and darwin on amd64 and arm64
#                                          (CGO_ENABLED=0, reproducible tar: sorted, mtime 0, root)
#   OUT/SHA256SUMS                         sha256sum -c format, over every file above
#   OUT/krew/gpu.yaml                      plugins/krew/gpu.yaml with version, URIs and sums filled in
#   OUT/release-notes.md                   the Unreleased section of docs/release-notes.md
#   OUT/images/                            make images IMAGE_TAG=vVERSION (OCI archives); RELEASE_IMAGES=0 leaves them out
#
# Environment: VERSION (required, x.y.z or x.y.z-pre), OUT (default _output/release/VERSION),
# RELEASE_IMAGES (default 1), RELEASE_URL (default the GitHub releases download URL), HELM.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

VERSION=${VERSION:-}
if [[ ! $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION=${VERSION@Q} is not a semantic version x.y.z (without the leading v), e.g. make release VERSION=0.2.0" >&2
  exit 2
fi
OUT=${OUT:-$ROOT/_output/release/$VERSION}
RELEASE_IMAGES=${RELEASE_IMAGES:-1}
RELEASE_URL=${RELEASE_URL:-https://github.com/gpu-scheduler/gpu-scheduler/releases/download}
HELM=${HELM:-$ROOT/_output/bin/helm}
GO=${GO:-go}
PLATFORMS=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)

if [[ ! -x $HELM ]]; then
  echo "release: no helm at $HELM (make tools builds it, or set HELM)" >&2
  exit 1
fi

rm -rf "$OUT"
mkdir -p "$OUT/krew"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The chart, with the version stamped on a copy so the tree keeps its own.
cp -r charts/gpu-scheduler "$work/gpu-scheduler"
"$HELM" package "$work/gpu-scheduler" --version "$VERSION" --app-version "$VERSION" -d "$OUT" >/dev/null

# kubectl-gpu archives.
for p in "${PLATFORMS[@]}"; do
  os=${p%/*} arch=${p#*/}
  dir="$work/kubectl-gpu_${os}_${arch}"
  mkdir -p "$dir"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags='-s -w' -o "$dir/kubectl-gpu" ./cmd/kubectl-gpu
  cp LICENSE "$dir/" 2>/dev/null || true
  tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . | gzip -n -9 >"$OUT/kubectl-gpu_${os}_${arch}.tar.gz"
done

(cd "$OUT" && sha256sum -- *.tgz *.tar.gz >SHA256SUMS)

# Krew manifest: the version, and per platform the URI of this version's archive and its sum.
# Every platform of PLATFORMS must be in the template, and no other.
awk -v version="v$VERSION" -v url="$RELEASE_URL" -v sums="$OUT/SHA256SUMS" '
  BEGIN {
    while ((getline line < sums) > 0) { split(line, fld, /[ \t]+\*?/); sum[fld[2]] = fld[1] }
  }
  /^  version:/ { print "  version: " version; next }
  /^    uri:/ {
    n = split($2, parts, "/"); file = parts[n]
    if (!(file in sum)) { printf "release: krew manifest names %s, which the release does not build\n", file > "/dev/stderr"; bad = 1 }
    seen[file] = 1; cur = file
    print "    uri: " url "/" version "/" file; next
  }
  /^    sha256:/ { print "    sha256: \"" sum[cur] "\""; next }
  { print }
  END {
    for (f in sum) if (f ~ /^kubectl-gpu_/ && !(f in seen)) { printf "release: krew manifest has no platform for %s\n", f > "/dev/stderr"; bad = 1 }
    exit bad
  }' plugins/krew/gpu.yaml >"$OUT/krew/gpu.yaml"

# Release notes: the Unreleased section, under the version's heading.
awk -v version="$VERSION" '
  /^## / { if (insec) exit; if ($0 == "## Unreleased") { insec = 1; print "# gpu-scheduler v" version; next } }
  insec { print }
' docs/release-notes.md >"$OUT/release-notes.md"
if [[ $(grep -cv '^[[:space:]]*$' "$OUT/release-notes.md") -le 1 ]]; then
  echo "release: docs/release-notes.md has no \"## Unreleased\" section with notes in it" >&2
  exit 1
fi

if [[ $RELEASE_IMAGES == 1 ]]; then
  make --no-print-directory images IMAGE_TAG="v$VERSION"
  mkdir -p "$OUT/images"
  cp -r _output/images/. "$OUT/images/"
fi

echo "release: v$VERSION in $OUT"

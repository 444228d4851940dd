#!/usr/bin/env bash
# Builds every image of hack/images.txt for linux/amd64 and linux/arm64 (static binaries,
# CGO_ENABLED=0, cross-compiled with GOARCH) as one OCI image index each, written as an OCI image
# layout OUT_DIR/<image> by hack/image, ready to push to a registry (the e2e suite's
# TestInstallFromARegistry pushes them). The local cluster's images stay the host's architecture only
# (hack/cluster.sh images), which keeps `make dev` fast.
#
#   hack/image-index.sh OUT_DIR [TAG]    # TAG defaults to the chart's appVersion
#
# It prints one line per image: its reference, the index's digest, its layout directory.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

out="${1:?usage: hack/image-index.sh OUT_DIR [TAG]}"
tag="${2:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' dist/chart/Chart.yaml)}"
[[ -n "${tag}" ]] || { echo "hack/image-index.sh: no TAG given and no appVersion in dist/chart/Chart.yaml" >&2; exit 1; }
archs=(amd64 arm64)

mkdir -p bin "${out}"
go build -o bin/image ./hack/image
while read -r image binary package where; do
  [[ -z "${image}" || "${image}" == \#* ]] && continue
  for arch in "${archs[@]}"; do
    CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath -ldflags "-s -w" -o "bin/linux_${arch}/${binary}" "${package}"
  done
  bin/image --tag "toolgate/${image}:${tag}" --layout "${out}/${image}" --platform linux/amd64 --platform linux/arm64 \
    --entrypoint "/${binary}" --user 65532:65532 --file "/${binary}=bin/linux_{arch}/${binary}"
done < hack/images.txt

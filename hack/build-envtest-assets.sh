#!/usr/bin/env bash
# Builds the control-plane binaries envtest needs (kube-apiserver, etcd) from the Go module proxy,
# at pinned versions, into $TOOLGATE_CACHE/k8s/<version>/ (default ~/.cache/toolgate, outside the checkout,
# so fresh clones and worktrees share it). Cached: a second run with the binaries present is a no-op.
#
#   hack/build-envtest-assets.sh            # kube-apiserver + etcd
#   hack/build-envtest-assets.sh --with-kcm # also kube-controller-manager
#   hack/build-envtest-assets.sh --node     # also kube-controller-manager, kube-scheduler, kubelet and
#                                           # kube-proxy (the single-node cluster of hack/cluster.sh)
#
# Prints the assets directory on its last line (suitable for KUBEBUILDER_ASSETS).
set -euo pipefail

# The supported versions are the three newest upstream minors, 1.35 to 1.37 (docs/kubernetes-versions.md);
# KUBE_VERSION=v1.35.4 builds the oldest.
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"                      # k8s.io/kubernetes
STAGING_VERSION="${STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}" # matching k8s.io/* staging modules
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"        # the etcd k8s.io/kubernetes itself pins

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TOOLGATE_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/toolgate}"
out="${cache}/k8s/${KUBE_VERSION#v}-linux-amd64"
mkdir -p "${out}"

with_kcm=false
with_node=false
case "${1:-}" in
  --with-kcm) with_kcm=true ;;
  --node) with_kcm=true with_node=true ;;
  "") ;;
  *) echo "build-envtest-assets: unknown flag ${1} (want --with-kcm or --node)" >&2; exit 2 ;;
esac

log() { echo "build-envtest-assets: $*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

build_kube() { # $@: commands under k8s.io/kubernetes/cmd to build
  local mod="${work}/kube"
  mkdir -p "${mod}"
  local kmod
  kmod="$(cd "${work}" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
  {
    echo "module toolgate.dev/hack/kube"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
    echo
    echo "replace ("
    # every staging module k8s.io/kubernetes replaces locally goes to the published release instead
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"${STAGING_VERSION}"'#p' "${kmod}"
    echo ")"
  } > "${mod}/go.mod"
  {
    echo "//go:build tools"
    echo "package tools"
    echo "import ("
    for c in "$@"; do echo "	_ \"k8s.io/kubernetes/cmd/${c}/app\""; done
    echo ")"
  } > "${mod}/tools.go"
  (cd "${mod}" && go mod tidy >&2)
  # One go build for all of them: their packages compile once, in parallel, and the binaries link
  # side by side rather than one after another.
  log "building $* ${KUBE_VERSION} (about 15 minutes on 2 cores from nothing, 1 to 2 per binary when only linking)"
  local start=${SECONDS} pkgs=() c
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
  mkdir -p "${work}/bin"
  (cd "${mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${version_ldflags}" -o "${work}/bin/" "${pkgs[@]}")
  for c in "$@"; do
    mv "${work}/bin/${c}" "${out}/${c}.tmp"
    mv "${out}/${c}.tmp" "${out}/${c}"
    echo "${KUBE_VERSION}" > "${out}/.${c}.version"
  done
  log "built $* in $((SECONDS - start))s"
}

build_etcd() {
  local mod="${work}/etcd"
  mkdir -p "${mod}"
  cat > "${mod}/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat > "${mod}/go.mod" <<GOMOD
module toolgate.dev/hack/etcd

go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
GOMOD
  (cd "${mod}" && go mod tidy >&2)
  log "building etcd ${ETCD_VERSION}"
  (cd "${mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${out}/etcd.tmp" .)
  mv "${out}/etcd.tmp" "${out}/etcd"
}

# The version each component reports (kube-apiserver's /version, what Helm's kubeVersion checks and
# kubectl version print), as Kubernetes' own release build stamps it; without it a build from the
# module proxy says v0.0.0-master. A component built before this stamp is linked again (the compiled
# packages come from Go's build cache).
minor="$(echo "${KUBE_VERSION}" | sed 's/^v1\.\([0-9]*\)\..*/\1/')"
version_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  version_ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
built() { [[ -x "${out}/${1}" && "$(cat "${out}/.${1}.version" 2>/dev/null)" == "${KUBE_VERSION}" ]]; }

want=()
built kube-apiserver || want+=(kube-apiserver)
${with_kcm} && { built kube-controller-manager || want+=(kube-controller-manager); }
if ${with_node}; then
  for c in kube-scheduler kubelet kube-proxy; do built "${c}" || want+=("${c}"); done
fi
if ((${#want[@]})); then build_kube "${want[@]}"; fi
[[ -x "${out}/etcd" ]] || build_etcd
log "assets ready in ${out}"
echo "${out}"

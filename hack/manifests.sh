#!/usr/bin/env bash
# hack/manifests.sh CONTROLLER_GEN CRD_DIR RBAC_DIR: generates the CRDs and the manager ClusterRole
# from the markers (`make manifests`; test/manifests runs it into a scratch directory to compare).
# Every CRD carries its field descriptions, which `kubectl explain` shows, except the Tool's: its
# jobTemplate is a whole Pod template, whose descriptions would make the CRD about 750 KB, too large
# for `kubectl apply`; the Tool CRD is generated without descriptions.
set -euo pipefail
gen="$1" crd="$2" rbac="$3"
"${gen}" rbac:roleName=manager-role crd webhook paths="./..." \
  output:crd:artifacts:config="${crd}" output:rbac:artifacts:config="${rbac}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
"${gen}" crd:maxDescLen=0 paths="./api/..." output:crd:artifacts:config="${tmp}"
cp "${tmp}/toolgate.dev_tools.yaml" "${crd}/toolgate.dev_tools.yaml"

#!/usr/bin/env bash
# hack/manifests.sh CONTROLLER_GEN CRD_DIR RBAC_DIR: generates the CRDs and the manager ClusterRole
# from the markers (`make manifests`; test/manifests runs it into a scratch directory to compare).
# Every CRD carries its field descriptions, which `kubectl explain` shows, except the Pod template
# embedded in the Tool's jobTemplate: with its descriptions the Tool CRD is about 750 KB, too large
# for `kubectl apply`. hack/crddesc removes the descriptions beneath spec.jobTemplate.spec.template
# only; every other field of the Tool, the Job's own fields included, keeps its description.
set -euo pipefail
gen="$1" crd="$2" rbac="$3"
"${gen}" rbac:roleName=manager-role crd webhook paths="./..." \
  output:crd:artifacts:config="${crd}" output:rbac:artifacts:config="${rbac}"
go run ./hack/crddesc -strip spec.jobTemplate.spec.template "${crd}/toolgate.dev_tools.yaml"

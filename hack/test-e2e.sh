#!/usr/bin/env bash
# `make test-e2e`: starts the local cluster (hack/cluster.sh up), runs the quick start's commands as
# written on it (test/e2e TestQuickStart: install with the chart, a call to Succeeded, uninstall),
# installs Toolgate (hack/cluster.sh install: the chart with config/dev/values.yaml, and the reference
# provider), runs the rest of the e2e suite in test/e2e against it, and stops the cluster again, also
# when the suite fails. The receipts test builds cosign from hack/tools/cosign on its first run, into
# ${TOOLGATE_CACHE:-~/.cache/toolgate}/tools/cosign-<version>/ (several minutes cold, nothing after;
# the suite's timeout leaves room for it).
# Arguments are passed to `go test`. E2E_KEEP_CLUSTER=1 leaves the cluster running afterwards.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

start=${SECONDS}
keep="${E2E_KEEP_CLUSTER:-0}"
finish() {
  local rc=$?
  if [[ "${keep}" != 1 ]]; then
    hack/cluster.sh down || rc=1
  fi
  echo "test-e2e: $((SECONDS - start))s in total, exit ${rc}" >&2
  exit "${rc}"
}
trap finish EXIT

kubeconfig="$(hack/cluster.sh up | tail -n 1)"
echo "test-e2e: cluster and images ready after $((SECONDS - start))s" >&2
export KUBECONFIG="${kubeconfig}" TOOLGATE_E2E_CLUSTER_DIR="$(dirname "${kubeconfig}")"
TOOLGATE_E2E_QUICKSTART=1 go test -tags e2e ./test/e2e/ -run '^TestQuickStart$' -count=1 -v -timeout 20m
echo "test-e2e: the quick start ran after $((SECONDS - start))s" >&2
hack/cluster.sh install
echo "test-e2e: Toolgate installed after $((SECONDS - start))s" >&2

set -x
go test -tags e2e ./test/e2e/ -skip '^TestQuickStart$' -count=1 -v -timeout 45m "$@"

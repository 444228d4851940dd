#!/usr/bin/env bash
# Runs Toolgate end to end on this machine (`make dev`); docs/local-dev.md describes it. Needs root.
#
#   make dev                      # interactive: approve or deny yourself, Ctrl-C stops everything
#   DEV_AUTO_APPROVE=1 make dev   # approves the sample ToolCall, waits for its result, stops, exits 0
#
# It starts the single-node cluster of hack/cluster.sh (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd + runc, kubelet, kube-proxy), builds the images from this checkout and
# loads them into it, installs Toolgate as users do (the chart dist/chart, with config/dev/values.yaml,
# and the reference approvals provider of config/dev as a Pod), then applies config/samples (the Tool, then the ToolCall)
# and waits for a decision. Once approved, the Tool's Job runs the demo tool (cmd/issue-refund) in a
# real Pod, and the ToolCall's status.result is what that container wrote.
#
# Environment:
#   DEV_AUTO_APPROVE=1        approve automatically and exit once the ToolCall finished
#   DEV_AUTO_APPROVE_DELAY=3  seconds to wait before approving automatically
#   DEV_KEEP_CLUSTER=1        leave the cluster running on exit (stop it with hack/cluster.sh down)
#   DEV_WAIT_TIMEOUT=120      seconds to wait for each step before giving up
#   DEV_SAMPLES=config/samples  directory holding the v1alpha1_tool.yaml and v1alpha1_toolcall.yaml to apply
#   CLUSTER_DIR=.cluster      the cluster's state directory (hack/cluster.sh)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

auto="${DEV_AUTO_APPROVE:-0}"
[[ "${auto}" == "1" || "${auto}" == "true" ]] && auto=1 || auto=0
approve_delay="${DEV_AUTO_APPROVE_DELAY:-3}"
keep="${DEV_KEEP_CLUSTER:-0}"
wait_timeout="${DEV_WAIT_TIMEOUT:-120}"
samples="${DEV_SAMPLES:-config/samples}"

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { printf '\nmake dev: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH"
command -v kubectl >/dev/null || die "kubectl is not on PATH"
[[ "$(id -u)" == 0 ]] || die "make dev runs a real kubelet and containerd: run it as root"

state="$(hack/cluster.sh kubeconfig)"
state="$(dirname "${state}")"
dev="${state#"${root}"/}" # printed paths are relative to the repository root when they can be
export KUBECONFIG="${state}/kubeconfig"
provider_url=http://10.96.0.10:8085 # the reference provider's Service (config/dev)
admin="${dev}/provider-admin-credential" # the reference provider's admin credential (hack/cluster.sh install)

total_start=${SECONDS}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ "${keep}" == 1 ]]; then
    say "Leaving the cluster running (DEV_KEEP_CLUSTER=1); stop it with: hack/cluster.sh down"
  else
    say "Stopping the cluster (logs are removed with it; DEV_KEEP_CLUSTER=1 keeps them)"
    hack/cluster.sh down || true
  fi
  ((rc == 0 || rc == 130 || rc == 143)) || note "make dev failed (exit ${rc})."
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "Starting the cluster (hack/cluster.sh up): first builds kube components into ~/.cache/toolgate/k8s/ (several minutes on a fresh machine), then the images"
up_start=${SECONDS}
hack/cluster.sh up >/dev/null
note "cluster and images ready in $((SECONDS - up_start))s"
note "kubeconfig: ${dev}/kubeconfig (user toolgate-admin, group system:masters)"
go build -o bin/reference-provider ./cmd/reference-provider

say "Installing Toolgate (the chart with config/dev/values.yaml, and the reference provider of config/dev)"
hack/cluster.sh install
kubectl get pods -n toolgate-system -o wide

# check_manager: fail when the manager Pod is crash-looping.
check_manager() {
  local restarts
  restarts="$(kubectl -n toolgate-system get pods -l control-plane=controller-manager \
    -o jsonpath='{range .items[*]}{.status.containerStatuses[0].restartCount}{"\n"}{end}' 2>/dev/null | sort -n | tail -n 1)"
  if [[ -n "${restarts}" && "${restarts}" -gt 2 ]]; then
    echo "make dev: the manager restarted ${restarts} times; its last log lines:" >&2
    kubectl -n toolgate-system logs deploy/toolgate-controller-manager --tail=30 >&2 || true
    exit 1
  fi
}

manager_logs() {
  echo "make dev: last lines of the manager's log:" >&2
  kubectl -n toolgate-system logs deploy/toolgate-controller-manager --tail=30 >&2 || true
}

phase_of() { kubectl get toolcall "$1" -o jsonpath='{.status.phase}' --request-timeout=10s 2>/dev/null || true; }

# wait_phase NAME PHASE...: wait until the ToolCall is in one of PHASEs; fail on any other terminal phase.
wait_phase() {
  local name="$1" phase i w
  shift
  for ((i = 0; ; i++)); do
    phase="$(phase_of "${name}")"
    for w in "$@"; do [[ "${phase}" == "${w}" ]] && return 0; done
    case "${phase}" in
      Succeeded | Failed | Denied | Expired | ApprovalUnavailable | Cancelled | Rejected)
        echo "make dev: ToolCall ${name} ended ${phase} while waiting for $*:" >&2
        kubectl get toolcall "${name}" -o yaml >&2 || true
        manager_logs
        exit 1
        ;;
    esac
    check_manager
    if ((i >= wait_timeout)); then
      echo "make dev: ToolCall ${name} is '${phase}' after ${wait_timeout}s, expected $*" >&2
      manager_logs
      exit 1
    fi
    sleep 1
  done
}

say "Applying ${samples}: the Tool, then the ToolCall"
for f in "${samples}/v1alpha1_tool.yaml" "${samples}/v1alpha1_toolcall.yaml"; do
  [[ -f "${f}" ]] || die "${f} does not exist"
done
tool="$(kubectl apply -f "${samples}/v1alpha1_tool.yaml" -o name)"
echo "${tool} applied"
# The API server stores spec.jobTemplate without checking it; the manager decodes it as a Job template.
# Check it the same way (a server-side dry run of a Job with that spec) to fail here with the reason.
job_spec="$(kubectl get "${tool}" -o jsonpath='{.spec.jobTemplate.spec}')"
if ! out="$(printf '{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"toolgate-dev-check"},"spec":%s}' "${job_spec}" |
  kubectl create --dry-run=server -f - 2>&1)"; then
  die "$(printf '%s: spec.jobTemplate does not make a valid batch/v1 Job, so the manager cannot run this Tool\n(a template that does not even decode keeps it from reading any Tool in the namespace: ToolCalls end\nRejected, UnknownTool). Fix %s; the API server says:\n%s' \
    "${tool}" "${samples}/v1alpha1_tool.yaml" "${out}")"
fi
# The manager looks Tools up in its cache: give it a moment to see the Tool (a ToolCall whose Tool it
# has not seen yet ends Rejected, UnknownTool).
sleep 2
toolcall="$(kubectl apply -f "${samples}/v1alpha1_toolcall.yaml" -o name)"
toolcall="${toolcall##*/}"
echo "toolcall.toolgate.dev/${toolcall} applied"

say "Waiting for ToolCall ${toolcall} to reach AwaitingApproval"
wait_phase "${toolcall}" AwaitingApproval
request_id="$(kubectl get toolcall "${toolcall}" -o jsonpath='{.status.requestID}')"
kubectl get toolcall "${toolcall}" -o wide
echo
bin/reference-provider list --url "${provider_url}" --credential-file "${admin}"

decide="bin/reference-provider decide --url ${provider_url} --credential-file ${admin} --id ${request_id}"
cat <<EOF2

==> The refund is waiting for a human decision (approval request ${request_id})

    The request's context carries the demo tool's preview: what it would refund, to whom and from
    which charge, as the tool claims it (docs/previews.md).

    Run these from the repository root, in another terminal.

    Approve it (valid for 5 minutes):
      ${decide} --approve --note "Duplicate charge confirmed." --valid-for 5m

    Or deny it:
      ${decide} --deny --note "Not a duplicate charge."

    Or decide in the browser (the approval page, served by the provider's Pod): open
      ${provider_url}/ui/
    and sign in with the admin credential in ${admin}.

    Follow it:
      kubectl --kubeconfig ${dev}/kubeconfig get toolcalls -o wide -w
    Pending approval requests:
      bin/reference-provider list --url ${provider_url} --credential-file ${admin}

    Logs: kubectl --kubeconfig ${dev}/kubeconfig -n toolgate-system logs deploy/toolgate-controller-manager
          (and deploy/toolgate-reference-provider); the cluster's components: ${dev}/logs/
EOF2

show_outcome() {
  local name="$1" uid
  uid="$(kubectl get toolcall "${name}" -o jsonpath='{.metadata.uid}')"
  echo
  kubectl get toolcall "${name}" -o wide
  echo
  kubectl get jobs,pods -l "toolgate.dev/toolcall-uid=${uid}" -o wide || true
  echo
  note "the tool's output (kubectl logs):"
  kubectl logs -l "toolgate.dev/toolcall-uid=${uid}" --tail=20 | sed 's/^/      /' || true
  note "status.message: $(kubectl get toolcall "${name}" -o jsonpath='{.status.message}')"
  note "status.result:  $(kubectl get toolcall "${name}" -o jsonpath='{.status.result}')"
}

if ((auto)); then
  say "DEV_AUTO_APPROVE=1: approving in ${approve_delay}s"
  sleep "${approve_delay}"
  echo "+ ${decide} --approve --note \"Duplicate charge confirmed (DEV_AUTO_APPROVE).\" --valid-for 5m"
  ${decide} --approve --note "Duplicate charge confirmed (DEV_AUTO_APPROVE)." --valid-for 5m

  say "Waiting for the Job (phase Running)"
  wait_phase "${toolcall}" Running Succeeded
  kubectl get toolcall "${toolcall}" -o wide

  say "Waiting for the tool's Pod to run, the Job to complete and phase Succeeded"
  wait_phase "${toolcall}" Succeeded
  show_outcome "${toolcall}"
  say "ToolCall ${toolcall} Succeeded ($((SECONDS - total_start))s in total)"
  exit 0
fi

say "Running until Ctrl-C; ToolCall changes are shown below"
declare -A last=()
while true; do
  check_manager
  while IFS=$'\t' read -r ns name phase reason; do
    [[ -n "${name}" ]] || continue
    key="${ns}/${name}"
    [[ "${last[${key}]:-}" == "${phase} ${reason}" ]] && continue
    last[${key}]="${phase} ${reason}"
    echo "$(date -u +%H:%M:%S) ToolCall ${key}: ${phase:-<none>} ${reason:+(${reason})}"
    case "${phase}" in
      Succeeded | Failed | Denied | Expired | ApprovalUnavailable | Cancelled | Rejected)
        note "message: $(kubectl get toolcall -n "${ns}" "${name}" -o jsonpath='{.status.message}' 2>/dev/null || true)"
        [[ "${phase}" == Succeeded || "${phase}" == Failed ]] &&
          note "result:  $(kubectl get toolcall -n "${ns}" "${name}" -o jsonpath='{.status.result}' 2>/dev/null || true)"
        ;;
    esac
  done < <(kubectl get toolcalls -A --request-timeout=10s -o go-template='{{range .items}}{{.metadata.namespace}}{{"\t"}}{{.metadata.name}}{{"\t"}}{{with .status}}{{with .phase}}{{.}}{{end}}{{end}}{{"\t"}}{{with .status}}{{with .reason}}{{.}}{{end}}{{end}}{{"\n"}}{{end}}' 2>/dev/null || true)
  sleep 2
done

#!/usr/bin/env bash
# Runs Toolgate end to end on this machine (`make dev`); docs/local-dev.md describes it.
#
#   make dev                      # interactive: approve or deny yourself, Ctrl-C stops everything
#   DEV_AUTO_APPROVE=1 make dev   # approves the sample ToolCall, waits for its result, stops, exits 0
#
# It starts, all on 127.0.0.1:
#   - a control plane (hack/dev/cluster): etcd + kube-apiserver with Toolgate's CRDs, and
#     kube-controller-manager running the Job and garbage-collector controllers;
#   - the reference approvals provider (bin/reference-provider serve);
#   - the manager (bin/manager);
#   - a simulated kubelet: there is no kubelet, scheduler or container runtime, so the Pods of
#     Toolgate's Jobs never run. This script sets each such Pod's status to Succeeded itself, with the
#     termination message the sample Tool's container would have written (its TOOL_ARGUMENTS).
# then applies config/samples (the Tool, then the ToolCall) and waits for a decision.
#
# Environment:
#   DEV_AUTO_APPROVE=1        approve automatically and exit once the ToolCall finished
#   DEV_AUTO_APPROVE_DELAY=3  seconds to wait before approving automatically
#   DEV_PROVIDER_PORT=8085    port of the reference provider (127.0.0.1)
#   DEV_POD_RUN_SECONDS=3     how long a simulated Pod stays Pending before it "succeeds"
#   DEV_WAIT_TIMEOUT=120      seconds to wait for each step before giving up
#   DEV_SAMPLES=config/samples  directory holding the v1alpha1_tool.yaml and v1alpha1_toolcall.yaml to apply
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

auto="${DEV_AUTO_APPROVE:-0}"
[[ "${auto}" == "1" || "${auto}" == "true" ]] && auto=1 || auto=0
approve_delay="${DEV_AUTO_APPROVE_DELAY:-3}"
provider_port="${DEV_PROVIDER_PORT:-8085}"
pod_run_seconds="${DEV_POD_RUN_SECONDS:-3}"
wait_timeout="${DEV_WAIT_TIMEOUT:-120}"
samples="${DEV_SAMPLES:-config/samples}"

dev=.dev # relative to the repository root: printed commands are meant to be run from there
provider_url="http://127.0.0.1:${provider_port}"
credential="${dev}/provider-credential"
export KUBECONFIG="${root}/${dev}/kubeconfig"

say() { printf '\n==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
die() { printf '\nmake dev: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH"
command -v kubectl >/dev/null || die "kubectl is not on PATH"

# One `make dev` at a time: a second one would wipe the first one's .dev/.
if [[ -f "${dev}/dev.pid" ]] && kill -0 "$(cat "${dev}/dev.pid")" 2>/dev/null; then
  die "another make dev is running (pid $(cat "${dev}/dev.pid")); stop it first (Ctrl-C in its terminal)"
fi
if (exec 3<>"/dev/tcp/127.0.0.1/${provider_port}") 2>/dev/null; then
  die "127.0.0.1:${provider_port} is in use; free it or set DEV_PROVIDER_PORT"
fi

say "Building the control-plane binaries (cached in ~/.cache/toolgate/k8s/), the manager and the reference provider"
assets="$(hack/build-envtest-assets.sh --with-kcm | tail -n 1)"
assets="$(cd "${assets}" && pwd)"
note "control-plane binaries: ${assets}"
make --no-print-directory build
go build -o bin/dev-cluster ./hack/dev/cluster

# Fresh state every run: the control plane starts empty, so the provider's database does too.
rm -rf "${dev}"
mkdir -m 700 "${dev}"
echo $$ > "${dev}/dev.pid"
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "${credential}")

# ---------------------------------------------------------------------------------------------------
# Child processes and cleanup

cluster_pid="" provider_pid="" manager_pid="" kubelet_pid=""
cluster_children=() # etcd, kube-apiserver, kube-controller-manager (children of hack/dev/cluster)

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# stop PID NAME SECONDS: SIGTERM, then SIGKILL after SECONDS.
stop() {
  local pid="$1" name="$2" secs="$3" i
  alive "${pid}" || return 0
  kill -TERM "${pid}" 2>/dev/null || true
  for ((i = 0; i < secs * 5; i++)); do
    alive "${pid}" || { wait "${pid}" 2>/dev/null || true; return 0; }
    sleep 0.2
  done
  echo "make dev: ${name} (pid ${pid}) did not stop in ${secs}s; killing it" >&2
  kill -KILL "${pid}" 2>/dev/null || true
  wait "${pid}" 2>/dev/null || true
}

cleanup() {
  local rc=$? pid i
  trap - EXIT INT TERM
  say "Stopping (logs stay in ${dev}/)"
  if alive "${kubelet_pid}"; then
    touch "${dev}/kubelet-sim.stop"
    for ((i = 0; i < 50; i++)); do alive "${kubelet_pid}" || break; sleep 0.2; done
    stop "${kubelet_pid}" "simulated kubelet" 1
  fi
  stop "${manager_pid}" manager 15
  stop "${provider_pid}" "reference provider" 15
  stop "${cluster_pid}" "control plane" 60
  # Should the control plane program have died without stopping its children, stop them here.
  for pid in "${cluster_children[@]}"; do
    if alive "${pid}" && tr '\0' ' ' < "/proc/${pid}/cmdline" 2>/dev/null | grep -qF "${assets}/"; then
      echo "make dev: stopping leftover control-plane process ${pid}" >&2
      kill -TERM "${pid}" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do alive "${pid}" || break; sleep 0.2; done
      kill -KILL "${pid}" 2>/dev/null || true
    fi
  done
  rm -f "${dev}/dev.pid" "${dev}/pids" "${dev}/kubelet-sim.stop"
  if ((rc == 0 || rc == 130 || rc == 143)); then
    note "All processes stopped."
  else
    note "All processes stopped; make dev failed (exit ${rc})."
  fi
  exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

record_pids() {
  local p
  {
    echo "dev.sh $$"
    for p in "cluster ${cluster_pid}" "reference-provider ${provider_pid}" "manager ${manager_pid}" "kubelet-sim ${kubelet_pid}"; do
      [[ "${p}" == *" " ]] || echo "${p}"
    done
    for p in "${cluster_children[@]}"; do echo "cluster-child ${p}"; done
  } > "${dev}/pids"
}

# check_children: fail when a component died on its own.
check_children() {
  local spec name pid log
  for spec in "control plane:${cluster_pid}:cluster.log" "reference provider:${provider_pid}:reference-provider.log" \
    "manager:${manager_pid}:manager.log"; do
    IFS=: read -r name pid log <<< "${spec}"
    if [[ -n "${pid}" ]] && ! alive "${pid}"; then
      echo "make dev: the ${name} exited; last lines of ${dev}/${log}:" >&2
      tail -n 20 "${dev}/${log}" >&2 || true
      exit 1
    fi
  done
}

# ---------------------------------------------------------------------------------------------------
# Control plane

say "Starting the control plane: etcd, kube-apiserver, kube-controller-manager (job, garbage-collector)"
bin/dev-cluster --assets "${assets}" --crds config/crd/bases --dir "${dev}" > "${dev}/cluster.log" 2>&1 &
cluster_pid=$!
record_pids
for ((i = 0; ; i++)); do
  [[ -f "${dev}/cluster.ready" ]] && break
  check_children
  ((i < wait_timeout * 5)) || die "the control plane did not start in ${wait_timeout}s; see ${dev}/cluster.log"
  sleep 0.2
done
mapfile -t cluster_children < <(pgrep -P "${cluster_pid}" || true)
record_pids
note "kube-apiserver: $(cat "${dev}/cluster.ready") (etcd and kube-apiserver on random free 127.0.0.1 ports)"
note "kubeconfig:     ${dev}/kubeconfig (user dev, group system:masters)"

# ---------------------------------------------------------------------------------------------------
# Reference provider and manager

say "Starting the reference approvals provider on ${provider_url}"
bin/reference-provider serve --listen "127.0.0.1:${provider_port}" --db "${dev}/reference-provider.db" \
  --credential-file "${credential}" > "${dev}/reference-provider.log" 2>&1 &
provider_pid=$!
record_pids
for ((i = 0; ; i++)); do
  bin/reference-provider list --url "${provider_url}" --credential-file "${credential}" >/dev/null 2>&1 && break
  check_children
  ((i < wait_timeout * 5)) || die "the reference provider did not answer in ${wait_timeout}s; see ${dev}/reference-provider.log"
  sleep 0.2
done

say "Starting the manager (metrics and health probes off, long-poll wait 30s)"
bin/manager --kubeconfig "${dev}/kubeconfig" --provider-url "${provider_url}" --provider-credential-file "${credential}" \
  --poll-wait 30s --metrics-bind-address 0 --health-probe-bind-address 0 > "${dev}/manager.log" 2>&1 &
manager_pid=$!
record_pids

# ---------------------------------------------------------------------------------------------------
# Simulated kubelet

# One line per Pending Pod of a Toolgate Job: namespace, name, and a status patch that marks the Pod
# Succeeded with every container terminated (exit code 0); the termination message is the container's
# TOOL_ARGUMENTS, which is what the sample Tool's command writes to /dev/termination-log.
# printf "%q" quotes a string for JSON here: TOOL_ARGUMENTS is serialized JSON, so it holds no
# control characters.
# shellcheck disable=SC2016 # a Go template, not shell
pod_patch_template='{{range .items}}{{.metadata.namespace}}{{"\t"}}{{.metadata.name}}{{"\t"}}{"status":{"phase":"Succeeded","containerStatuses":[{{range $i, $c := .spec.containers}}{{if $i}},{{end}}{"name":{{printf "%q" $c.name}},"image":{{printf "%q" $c.image}},"imageID":"","ready":false,"started":false,"restartCount":0,"state":{"terminated":{"exitCode":0,"reason":"Completed","message":{{$m := ""}}{{with $c.env}}{{range .}}{{if eq .name "TOOL_ARGUMENTS"}}{{$m = .value}}{{end}}{{end}}{{end}}{{printf "%q" $m}},"startedAt":"@START@","finishedAt":"@FINISH@"}}}{{end}}]}}{{"\n"}}{{end}}'

# sim_say: a line for the terminal and .dev/kubelet-sim.log.
sim_say() { echo "$(date -u +%H:%M:%S) simulated kubelet: $*" | tee -a "${dev}/kubelet-sim.log"; }

simulate_kubelet() {
  declare -A first_seen=()
  local ns name patch key start seen
  while [[ ! -e "${dev}/kubelet-sim.stop" ]]; do
    while IFS=$'\t' read -r ns name patch; do
      [[ -n "${name}" ]] || continue
      key="${ns}/${name}"
      if [[ -z "${first_seen[${key}]:-}" ]]; then
        first_seen[${key}]="${SECONDS} $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        sim_say "Pod ${key} created; marking it Succeeded in ${pod_run_seconds}s (nothing is executed)"
        continue
      fi
      read -r seen start <<< "${first_seen[${key}]}"
      ((SECONDS - seen >= pod_run_seconds)) || continue
      patch="${patch//@START@/${start}}"
      patch="${patch//@FINISH@/$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
      if kubectl patch pod -n "${ns}" "${name}" --subresource=status --type=merge -p "${patch}" --request-timeout=10s >/dev/null; then
        sim_say "Pod ${key} set to Succeeded, exit code 0, termination message = its TOOL_ARGUMENTS"
      fi
    done < <(kubectl get pods -A -l toolgate.dev/toolcall-uid --field-selector=status.phase=Pending \
      -o go-template="${pod_patch_template}" --request-timeout=10s 2>/dev/null || true)
    sleep 1
  done
}

say "Starting the simulated kubelet (no kubelet or container runtime here)"
note "Pods of Toolgate Jobs are NOT executed. ${pod_run_seconds}s after such a Pod appears, this script sets its"
note "status to Succeeded (container terminated, exit code 0) with kubectl patch --subresource=status; the"
note "termination message is the Pod's TOOL_ARGUMENTS, which is what the sample Tool's command writes."
note "kube-controller-manager's Job controller then completes the Job; Toolgate records the result."
simulate_kubelet 2>> "${dev}/kubelet-sim.log" &
kubelet_pid=$!
record_pids

# ---------------------------------------------------------------------------------------------------
# The sample

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
        echo "make dev: last lines of ${dev}/manager.log:" >&2
        tail -n 30 "${dev}/manager.log" >&2 || true
        exit 1
        ;;
    esac
    check_children
    if ((i >= wait_timeout)); then
      echo "make dev: ToolCall ${name} is '${phase}' after ${wait_timeout}s, expected $*; last lines of ${dev}/manager.log:" >&2
      tail -n 30 "${dev}/manager.log" >&2 || true
      exit 1
    fi
    sleep 1
  done
}

say "Applying ${samples}: the Tool, then the ToolCall"
for f in "${samples}/v1alpha1_tool.yaml" "${samples}/v1alpha1_toolcall.yaml"; do
  [[ -f "${f}" ]] || die "${f} does not exist"
done
# Let the manager start its caches first, and give it a moment to see the Tool: it looks Tools up
# in its cache, and a ToolCall whose Tool it has not seen yet ends Rejected (UnknownTool).
for ((i = 0; i < wait_timeout; i++)); do
  grep -q '"Starting workers"' "${dev}/manager.log" 2>/dev/null && break
  check_children
  sleep 1
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
sleep 2
toolcall="$(kubectl apply -f "${samples}/v1alpha1_toolcall.yaml" -o name)"
toolcall="${toolcall##*/}"
echo "toolcall.toolgate.dev/${toolcall} applied"

say "Waiting for ToolCall ${toolcall} to reach AwaitingApproval"
wait_phase "${toolcall}" AwaitingApproval
request_id="$(kubectl get toolcall "${toolcall}" -o jsonpath='{.status.requestID}')"
kubectl get toolcall "${toolcall}" -o wide
echo
bin/reference-provider list --url "${provider_url}" --credential-file "${credential}"

decide="bin/reference-provider decide --url ${provider_url} --credential-file ${credential} --id ${request_id}"
cat <<EOF

==> The refund is waiting for a human decision (approval request ${request_id})

    Run these from the repository root, in another terminal.

    Approve it (valid for 5 minutes):
      ${decide} --approve --note "Duplicate charge confirmed." --valid-for 5m

    Or deny it:
      ${decide} --deny --note "Not a duplicate charge."

    Or decide in the browser (the approval page; the link signs you in once):
      ${provider_url}/ui/?token=$(cat "${credential}")

    Follow it:
      kubectl --kubeconfig ${dev}/kubeconfig get toolcalls -o wide -w
    Pending approval requests:
      bin/reference-provider list --url ${provider_url} --credential-file ${credential}

    Logs: ${dev}/manager.log, ${dev}/reference-provider.log, ${dev}/cluster.log, ${dev}/kube-apiserver.log,
          ${dev}/kube-controller-manager.log, ${dev}/etcd.log, ${dev}/kubelet-sim.log
EOF

show_outcome() {
  local name="$1"
  echo
  kubectl get toolcall "${name}" -o wide
  echo
  kubectl get jobs,pods -l "toolgate.dev/toolcall-uid=$(kubectl get toolcall "${name}" -o jsonpath='{.metadata.uid}')" || true
  echo
  note "status.message: $(kubectl get toolcall "${name}" -o jsonpath='{.status.message}')"
  note "status.result:  $(kubectl get toolcall "${name}" -o jsonpath='{.status.result}')"
  note "(the Pod did not run: the simulated kubelet set its status; the result is its TOOL_ARGUMENTS)"
}

if ((auto)); then
  say "DEV_AUTO_APPROVE=1: approving in ${approve_delay}s"
  sleep "${approve_delay}"
  echo "+ ${decide} --approve --note \"Duplicate charge confirmed (DEV_AUTO_APPROVE).\" --valid-for 5m"
  ${decide} --approve --note "Duplicate charge confirmed (DEV_AUTO_APPROVE)." --valid-for 5m

  say "Waiting for the Job (phase Running)"
  wait_phase "${toolcall}" Running Succeeded
  kubectl get toolcall "${toolcall}" -o wide
  echo
  kubectl get jobs,pods

  say "Waiting for the simulated Pod, the Job's completion and phase Succeeded"
  wait_phase "${toolcall}" Succeeded
  show_outcome "${toolcall}"
  say "ToolCall ${toolcall} Succeeded"
  exit 0
fi

say "Running until Ctrl-C; ToolCall changes are shown below"
declare -A last=()
while true; do
  check_children
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

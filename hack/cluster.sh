#!/usr/bin/env bash
# A single-node Kubernetes cluster from real components on this machine, for `make dev` and
# `make test-e2e` (docs/local-dev.md describes it). Needs root.
#
#   hack/cluster.sh up       # build what is missing, start the cluster, build and import the images
#   hack/cluster.sh images   # rebuild the images from this checkout (and import them when it runs)
#   hack/cluster.sh install  # install Toolgate (the chart dist/chart with config/dev/values.yaml, the
#                            # reference provider of config/dev, the manager's AAP webhook receiver with
#                            # a certificate issued here)
#   hack/cluster.sh down     # stop everything the cluster started and remove its state
#   hack/cluster.sh kubeconfig  # print the admin kubeconfig's path
#
# Components: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy
# (built from the Go module proxy by hack/build-envtest-assets.sh --node, cached in
# ~/.cache/toolgate/k8s/), Debian's containerd + runc + CNI plugins (installed with apt-get when
# missing). bin/cluster (hack/cluster) runs them; everything they write lives in CLUSTER_DIR.
#
# Images (no registry, no Docker daemon): bin/image (hack/image) writes docker-archive tarballs from
# binaries built here with CGO_ENABLED=0, and `ctr images import` loads them into the cluster's
# containerd:
#   localhost/toolgate/<image>:dev       one per row of hack/images.txt (the Dockerfile's targets, plus
#                                        the e2e suite's echo-tool): the manager (toolgate), the
#                                        reference provider, the MCP gateway, the demo tool of
#                                        config/samples (issue-refund), kubectl-toolcall for agent Pods
#   localhost/toolgate/pause:3.10        the Pod sandbox (hack/pause), containerd's sandbox_image
#
# Environment:
#   CLUSTER_DIR=.cluster     state directory (certificates, kubeconfig, containerd, kubelet, logs)
#   CLUSTER_TIMEOUT=3m       how long to wait for each component
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

state="${CLUSTER_DIR:-${root}/.cluster}"
mkdir -p "${state}"
state="$(cd "${state}" && pwd)"
timeout="${CLUSTER_TIMEOUT:-3m}"
kubeconfig="${state}/kubeconfig"
ctr_cmd=(ctr --address "${state}/containerd/containerd.sock" -n k8s.io)

PAUSE_IMAGE=localhost/toolgate/pause:3.10
# The reference provider's Service address in config/dev (there is no cluster DNS).
PROVIDER_URL=http://10.96.0.10:8085
# The manager's AAP webhook receiver (config/receiver; the Service has the fixed address 10.96.0.11 in
# config/dev, which the reference provider's Pod resolves this name to).
RECEIVER_URL=https://toolgate-aap-receiver.toolgate-system.svc/aap/events

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'hack/cluster.sh: %s\n' "$*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || die "the cluster needs root (containerd, kubelet and kube-proxy manage mounts, namespaces, cgroups and iptables)"

# timed LABEL CMD...: runs CMD and says how long it took.
timed() {
  local label="$1" start=${SECONDS}
  shift
  "$@"
  say "${label}: $((SECONDS - start))s"
}

ensure_packages() {
  local missing=()
  [[ -x /usr/bin/containerd && -x /usr/bin/ctr ]] || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v openssl >/dev/null || missing+=(openssl)
  ((${#missing[@]})) || return 0
  say "installing ${missing[*]} with apt-get"
  local log
  log="$(mktemp)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >"${log}" 2>&1; then
    cat "${log}" >&2
    rm -f "${log}"
    die "apt-get install ${missing[*]} failed"
  fi
  rm -f "${log}"
  # The package starts containerd as a service with the default configuration; this cluster runs its own.
  if command -v systemctl >/dev/null && systemctl is-active --quiet containerd 2>/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
}

build_assets() {
  assets="$(hack/build-envtest-assets.sh --node | tail -n 1)"
}

build_tools() {
  mkdir -p bin
  go build -o bin/ ./hack/cluster ./hack/image
  # The Helm command line the chart is installed with (hack/tools/helm pins it with the SDK's release).
  (cd hack/tools/helm && go build -o ../../../bin/helm helm.sh/helm/v4/cmd/helm)
}

# build_images writes the image tarballs into ${state}/images: one per row of hack/images.txt, and
# the Pod sandbox's.
build_images() {
  local out=bin/linux image binary package where pkgs=()
  mkdir -p "${out}" "${state}/images"
  while read -r image binary package where; do
    [[ -z "${image}" || "${image}" == \#* ]] && continue
    pkgs+=("${package}")
  done < hack/images.txt
  # One go build for every program: the packages they share compile once, in parallel, and the
  # binaries link side by side. go build names each after its package's directory.
  local tmp="${out}/.build"
  rm -rf "${tmp}" && mkdir -p "${tmp}"
  CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" -o "${tmp}/" "${pkgs[@]}" ./hack/pause
  while read -r image binary package where; do
    [[ -z "${image}" || "${image}" == \#* ]] && continue
    mv "${tmp}/$(basename "${package}")" "${out}/${binary}" || die "go build wrote no $(basename "${package}") for ${package}: two rows of hack/images.txt share a directory name?"
    bin/image --tag "localhost/toolgate/${image}:dev" --out "${state}/images/${image}.tar" \
      --entrypoint "/${binary}" --user 65532:65532 --file "/${binary}=${out}/${binary}" >&2
  done < hack/images.txt
  mv "${tmp}/pause" "${out}/pause"
  bin/image --tag "${PAUSE_IMAGE}" --out "${state}/images/pause.tar" --entrypoint /pause --user 65535:65535 --ca-bundle "" \
    --file "/pause=${out}/pause" >&2
}

import_images() {
  local t
  for t in "${state}"/images/*.tar; do
    "${ctr_cmd[@]}" images import --no-unpack=false "${t}" >/dev/null || die "ctr images import ${t} failed"
  done
  "${ctr_cmd[@]}" images ls -q | grep '^localhost/toolgate/' >&2
}

running() {
  [[ -f "${state}/cluster.pid" ]] && kill -0 "$(cat "${state}/cluster.pid")" 2>/dev/null
}

cmd_up() {
  ensure_packages
  say "building kube components (cached in ~/.cache/toolgate/k8s/) and the cluster's tools"
  timed "kube components" build_assets
  timed "cluster tools" build_tools
  say "building the images from this checkout"
  timed "images" build_images
  if running; then
    say "the cluster is already running (${state}); importing the images"
    import_images
    echo "${kubeconfig}"
    return 0
  fi
  bin/cluster cleanup --dir "${state}" --assets "${assets}" >>"${state}/cleanup.log" 2>&1 || true
  mkdir -p "${state}/logs"
  rm -f "${state}/ready" "${state}/failed"
  say "starting the cluster (logs in ${state}/logs/)"
  local start=${SECONDS}
  setsid bin/cluster up --dir "${state}" --assets "${assets}" --pause-image "${PAUSE_IMAGE}" --timeout "${timeout}" \
    >>"${state}/logs/cluster.log" 2>&1 </dev/null &
  local pid=$!
  while [[ ! -f "${state}/ready" ]]; do
    if [[ -f "${state}/failed" ]] || ! kill -0 "${pid}" 2>/dev/null; then
      echo "hack/cluster.sh: the cluster did not start:" >&2
      cat "${state}/failed" >&2 2>/dev/null || tail -n 30 "${state}/logs/cluster.log" >&2
      exit 1
    fi
    sleep 0.5
  done
  say "cluster ready in $((SECONDS - start))s: node toolgate-node, apiserver $(cat "${state}/ready")"
  timed "image import" import_images
  echo "${kubeconfig}"
}

cmd_images() {
  build_tools
  build_images
  if running; then
    import_images
  else
    say "the cluster is not running: the tarballs are in ${state}/images/ (hack/cluster.sh up imports them)"
  fi
}

cmd_down() {
  if running; then
    local pid
    pid="$(cat "${state}/cluster.pid")"
    say "stopping the cluster (pid ${pid})"
    kill -TERM "${pid}"
    for ((i = 0; i < 600; i++)); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
    kill -0 "${pid}" 2>/dev/null && die "the cluster (pid ${pid}) did not stop in 120s; see ${state}/logs/cluster.log"
  fi
  if [[ -x bin/cluster ]]; then
    local assets=""
    [[ -d "${HOME}/.cache/toolgate/k8s" ]] && assets="$(hack/build-envtest-assets.sh --node 2>/dev/null | tail -n 1)"
    bin/cluster cleanup --dir "${state}" --assets "${assets}" || die "cleanup failed; see above"
  fi
  # Only what the cluster wrote: its state directory.
  if grep -qF " ${state}/" /proc/self/mountinfo; then
    die "mounts remain under ${state}; not removing it"
  fi
  rm -rf "${state}"
  say "cluster stopped and removed"
}

# receiver_tls issues, once per cluster, a CA of its own (${state}/receiver/ca.crt) and from it the
# serving certificate of the manager's AAP webhook receiver (config/receiver) for the names of its
# Service, toolgate-aap-receiver in toolgate-system; the reference provider trusts that CA only.
receiver_tls() {
  local dir="${state}/receiver" svc=toolgate-aap-receiver.toolgate-system.svc
  [[ -s "${dir}/ca.crt" && -s "${dir}/tls.crt" && -s "${dir}/tls.key" ]] && return 0
  mkdir -p "${dir}"
  (
    umask 077
    cd "${dir}"
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=toolgate local cluster receiver CA" -keyout ca.key -out ca.crt \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=${svc}" -keyout tls.key -out tls.csr
    printf '%s\n' "subjectAltName=DNS:${svc},DNS:${svc}.cluster.local" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -set_serial "0x$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" \
      -days 365 -extfile tls.ext -out tls.crt
    rm -f tls.csr tls.ext
    chmod 644 ca.crt tls.crt
  ) >"${state}/receiver.log" 2>&1 || { cat "${state}/receiver.log" >&2; die "issuing the receiver's certificate with openssl failed"; }
}

# cmd_install installs Toolgate as users do, with the chart (dist/chart, the values of
# config/dev/values.yaml: the images of this checkout, the reference provider as the manager's own, the
# receiver on), and the reference provider beside it (config/dev), with a fresh provider credential.
cmd_install() {
  running || die "the cluster is not running: hack/cluster.sh up"
  export KUBECONFIG="${kubeconfig}"
  local cred="${state}/provider-credential" token="${state}/provisioner-token" approvers="${state}/approvers" who
  local admin="${state}/provider-admin-credential"
  for who in "${cred}" "${token}" "${admin}" "${state}/alice-credential" "${state}/bob-credential"; do
    [[ -s "${who}" ]] || (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"${who}")
  done
  # Two approvers of the reference provider, each scoped to no instance: the e2e suite's two teams
  # provision theirs, and the admin grants each approver their team's instance by id.
  (umask 077 && printf 'alice %s instances=\nbob %s instances=\n' "$(cat "${state}/alice-credential")" "$(cat "${state}/bob-credential")" >"${approvers}")
  kubectl create namespace toolgate-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The manager runs under the restricted Pod Security Standard.
  kubectl label namespace toolgate-system --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
  kubectl -n toolgate-system create secret generic toolgate-provider-credential --from-file=credential="${cred}" \
    --from-file=provisioner-token="${token}" --from-file=approvers="${approvers}" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The reference provider's admin credential (its admin API and approval page) in a Secret of its own,
  # which serves no provider object: the manager never reads it.
  kubectl -n toolgate-system create secret generic toolgate-provider-admin --from-file=credential="${admin}" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # Its consent to serve the ClusterApprovalProvider default (config/dev), which reads its provisioner token.
  kubectl -n toolgate-system label secret toolgate-provider-credential --overwrite toolgate.dev/cluster-approval-provider=default >/dev/null
  # The manager's webhook receiver (config/receiver): its certificate, and the CA the provider trusts.
  receiver_tls
  kubectl -n toolgate-system create secret tls toolgate-receiver-tls --cert="${state}/receiver/tls.crt" \
    --key="${state}/receiver/tls.key" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n toolgate-system create configmap toolgate-receiver-ca --from-file=ca.crt="${state}/receiver/ca.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  local existed=0
  kubectl -n toolgate-system get deployment toolgate-controller-manager >/dev/null 2>&1 && existed=1
  [[ -x bin/helm ]] || build_tools
  bin/helm upgrade --install toolgate dist/chart --namespace toolgate-system --values config/dev/values.yaml \
    >&2
  # config/dev names the sample grant in config/samples, which lies outside it.
  kubectl kustomize --load-restrictor=LoadRestrictionsNone config/dev | kubectl apply -f - >&2
  if ((existed)); then
    # The image tags stay :dev; images imported since the last install take effect on a restart.
    kubectl -n toolgate-system rollout restart deployment/toolgate-reference-provider deployment/toolgate-controller-manager >&2
  fi
  kubectl -n toolgate-system rollout status deployment/toolgate-reference-provider --timeout=180s >&2
  kubectl -n toolgate-system rollout status deployment/toolgate-controller-manager --timeout=180s >&2
  # The cluster's default approvals provider: an AAP instance of its own, which the manager creates on
  # the reference provider with the provisioner token (applied once its CRD is served). The reference
  # provider keeps its instances in an emptyDir: after its restart the object is created again, so
  # that it provisions an instance the new provider knows.
  if ((existed)); then
    kubectl delete clusterapprovalprovider default --ignore-not-found --timeout=120s >&2
  fi
  kubectl apply -f config/dev/cluster_approval_provider.yaml >&2
  kubectl wait --for=condition=Ready clusterapprovalprovider/default --timeout=120s >&2
  say "Toolgate installed; the reference provider answers on ${PROVIDER_URL} (admin credential in ${admin}, instance credential in ${cred}); the ClusterApprovalProvider default provisioned its instance there; the manager's AAP webhook receiver is ${RECEIVER_URL} (CA in ${state}/receiver/ca.crt)"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  images) cmd_images ;;
  install) cmd_install ;;
  kubeconfig) echo "${kubeconfig}" ;;
  *) die "usage: hack/cluster.sh up|down|images|install|kubeconfig" ;;
esac

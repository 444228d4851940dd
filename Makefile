# Images: docker-build builds one per `release` row of hack/images.txt, tagged
# $(IMAGE_PREFIX)<image>:$(TAG) (the manager's is IMG), and docker-push pushes them; deploy and
# build-installer install IMG. E.g. make docker-build docker-push IMAGE_PREFIX=registry.example.com/ TAG=v0.1.0
IMAGE_PREFIX ?=
# TAG defaults to the chart's appVersion (dist/chart/Chart.yaml): no manifest names `latest`.
TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' dist/chart/Chart.yaml)
IMG ?= $(IMAGE_PREFIX)toolgate:$(TAG)
# The mcp-call image that deploy and build-installer give the manager (--mcp-executor-image): the
# image of the calls of MCPServers that name none.
MCP_CALL_IMG ?= $(IMAGE_PREFIX)mcp-call:$(TAG)

# The Kubernetes version envtest and the local cluster run (hack/build-envtest-assets.sh builds it):
# the newest supported by default. Toolgate supports the three newest upstream minors
# (docs/kubernetes-versions.md); make test runs the admission and install suites on the oldest too.
KUBE_VERSION ?= v1.37.2
OLDEST_KUBE_VERSION ?= v1.35.4
export KUBE_VERSION

# Flags appended to `go test` by the test target, e.g. make test GO_TEST_FLAGS='-run TestToolCall -v'.
# Later flags win, so GO_TEST_FLAGS='-timeout 5m' overrides the default timeout.
GO_TEST_FLAGS ?=
# Flags appended to `go test` by the bench target.
BENCH_FLAGS ?=

# Tool binaries and build output live in bin/ (git-ignored).
LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
# Generated kustomization used by deploy/undeploy to set the image.
DEPLOY_OVERLAY ?= $(LOCALBIN)/deploy

# Resolves KUBEBUILDER_ASSETS in the recipe's shell: an already-set value wins; otherwise the envtest
# binaries are built (once; cached in ~/.cache/toolgate/k8s/) by hack/build-envtest-assets.sh, which prints their directory.
RESOLVE_ENVTEST_ASSETS = if [ -z "$${KUBEBUILDER_ASSETS:-}" ]; then KUBEBUILDER_ASSETS="$$(hack/build-envtest-assets.sh | tail -n 1)"; fi; export KUBEBUILDER_ASSETS

# CONTAINER_TOOL defines the container tool to be used for building images.
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl

# Setting SHELL to bash allows bash commands to be executed by recipes.
# Options are set to exit when a recipe line exits non-zero or a piped command fails.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

# The help target prints out all targets with their descriptions organized
# beneath their categories. The categories are represented by '##@' and the
# target descriptions by '##'. The awk command is responsible for reading the
# entire set of makefiles included in this invocation, looking for lines of the
# file as xyz: ## something, and then pretty-format the target and help. Then,
# if there's a line with ##@ something, that gets pretty-printed as a category.
# More info on the usage of ANSI control characters for terminal formatting:
# https://en.wikipedia.org/wiki/ANSI_escape_code#SGR_parameters
# More info on the awk command:
# http://linuxcommand.org/lc3_adv_awk.php

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs (config/crd/bases, with the descriptions kubectl explain shows, but for the Pod template inside the Tool's jobTemplate: hack/crddesc) and the manager ClusterRole (config/rbac/role.yaml).
	bash hack/manifests.sh "$(CONTROLLER_GEN)" config/crd/bases config/rbac

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy, DeepCopyInto and DeepCopyObject implementations.
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: test
test: $(CONTROLLER_GEN) ## Run all tests (race detector on) against envtest, including the short chaos run (both provider profiles, synchronous; `make chaos` adds asynchronous mode) and the browser tests, then the controller, Go client, MCP gateway and kubectl toolcall scenarios again against the seed provider profile (the fewest fields AAP allows, plain-text errors), then the admission and install suites again on the oldest supported Kubernetes (OLDEST_KUBE_VERSION); KUBE_VERSION chooses the version of the rest; builds controller-gen and the envtest binaries on first use. Fails first on a committed executable or a non-test Go file over 500 lines (hack/check-repo.sh).
	@bash hack/check-repo.sh
	@bash hack/install-test-deps.sh
	@$(RESOLVE_ENVTEST_ASSETS); echo "KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS}"; set -x; \
	CONTROLLER_GEN="$(CONTROLLER_GEN)" go test ./... -race -count=1 -timeout 25m $(GO_TEST_FLAGS); \
	TOOLGATE_PROVIDER_PROFILE=seed go test ./controllers/... ./pkg/toolcall/ ./internal/mcpgateway/ ./cmd/kubectl-toolcall/ -race -count=1 -timeout 25m -skip '$(PROFILE_INDEPENDENT)' $(GO_TEST_FLAGS); \
	KUBEBUILDER_ASSETS="$$(KUBE_VERSION=$(OLDEST_KUBE_VERSION) hack/build-envtest-assets.sh | tail -n 1)" \
	  go test ./test/admission/ ./test/installer/ -race -count=1 -timeout 15m $(GO_TEST_FLAGS)

# PROFILE_INDEPENDENT are the controller tests that bring a provider of their own (expiring
# credentials, asynchronous mode) and never use the harness's: the seed pass would run them unchanged.
PROFILE_INDEPENDENT = ^Test(ExpiringCredential|ReplacedInstance|Asynchronous|Receiver|LostNotification|RemovingDelivery|NotificationBefore|Rotation|DeliveryUpdate|DeletedProviderStill|NotifiedCall)

.PHONY: bench
bench: ## Run the benchmarks and write the results into docs/performance.md: long polls (synchronous) and the requeue-polling baseline at 100 to 10,000 pending, asynchronous mode (AAP webhooks) at 100 to 100,000, the end-to-end throughput run, the waiter alone. About 50 minutes on 2 cores, 24 of them the 100,000 run, and about 8 GiB of free memory (at 100,000 pending the apiserver held 5.6 GiB and etcd 1.0 GiB). BENCH_FLAGS='-bench.sizes=100,1000,10000' leaves out the 100,000 run.
	@$(RESOLVE_ENVTEST_ASSETS); echo "KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS}"; set -x; \
	go test ./test/bench/ -run '^$$' -bench . -benchtime 1x -timeout 180m -args -bench.modes=longpoll,requeue,async -bench.sizes=100,1000,10000,async:100000 -bench.write="$(CURDIR)/docs/performance.md" $(BENCH_FLAGS)

.PHONY: chaos
chaos: ## Run the full chaos run (500 ToolCalls, provider faults, manager killed every few seconds) against both provider profiles (full, seed) and the full profile in asynchronous mode (async: notifications to the manager's receiver, under delivery faults) and print the invariant and outcome tables of each. Replay a run's choices with CHAOS_FLAGS=-chaos.seed=N; -chaos.logs=DIR keeps the managers' and the provider's logs.
	@$(RESOLVE_ENVTEST_ASSETS); echo "KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS}"; set -x; \
	go test ./test/chaos/ -run TestChaos -count=1 -v -timeout 40m -args -chaos.calls=500 -chaos.profiles=full,seed,async -chaos.parallel=false $(CHAOS_FLAGS)

.PHONY: fuzz
fuzz: ## Run each fuzz target (provider responses, decision logic) for FUZZTIME (default 60s).
	@set -e; for pkg in ./internal/provider/ ./internal/aapwebhook/ ./controllers/toolcalls/; do \
	  for target in $$(go test $$pkg -list '^Fuzz' | grep '^Fuzz'); do \
	    echo "== $$pkg $$target"; go test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(or $(FUZZTIME),60s); \
	  done; \
	done

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest into ~/.cache/toolgate/k8s/ (cached; skipped when KUBEBUILDER_ASSETS is set) and print the directory.
	@$(RESOLVE_ENVTEST_ASSETS); echo "$${KUBEBUILDER_ASSETS}"

.PHONY: dev
dev: ## Run Toolgate end to end on a local single-node cluster (hack/cluster.sh): the sample refund runs in a real Pod. Needs root.
	bash hack/dev.sh

.PHONY: test-e2e
test-e2e: ## Start the local cluster, install Toolgate (the chart dist/chart with config/dev/values.yaml, and the reference provider of config/dev), run the e2e suite (test/e2e) through real Pods, stop the cluster. Needs root.
	@bash hack/test-e2e.sh $(GO_TEST_FLAGS)

.PHONY: cluster-up
cluster-up: ## Start the local single-node cluster and load the images built from this checkout (hack/cluster.sh up).
	bash hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it wrote (hack/cluster.sh down).
	bash hack/cluster.sh down

##@ Build

.PHONY: build
build: ## Build the manager, the reference approvals provider, the kubectl plugin and the MCP gateway into bin/.
	go build -o "$(LOCALBIN)/manager" ./cmd
	go build -o "$(LOCALBIN)/reference-provider" ./cmd/reference-provider
	go build -o "$(LOCALBIN)/kubectl-toolcall" ./cmd/kubectl-toolcall
	go build -o "$(LOCALBIN)/toolgate-mcp" ./cmd/toolgate-mcp

.PHONY: run
run: ## Run the manager from your host against the cluster in your kubeconfig (pass flags with ARGS=...).
	go run ./cmd $(ARGS)

.PHONY: images
images: ## Build the images of hack/images.txt (and the Pod sandbox's) as tarballs without Docker and load them into the local cluster when it runs.
	bash hack/cluster.sh images

.PHONY: image-index
image-index: ## Build every image of hack/images.txt for linux/amd64 and linux/arm64 as one OCI image index each, OCI image layouts in bin/oci/<image>, tagged toolgate/<image>:$(TAG), to push to a registry (hack/image-index.sh).
	bash hack/image-index.sh "$(LOCALBIN)/oci" "$(TAG)"

# RELEASE_IMAGES runs its argument, a command, once per release row of hack/images.txt with $${ref} set
# to the row's image reference.
RELEASE_IMAGES = grep -v '^\#' hack/images.txt | while read -r image binary package where; do \
	  [ "$${where}" = release ] || continue; \
	  ref="$(IMAGE_PREFIX)$${image}:$(TAG)"; [ "$${image}" != toolgate ] || ref="$(IMG)"; \
	  set -x; $(1) || exit 1; set +x; \
	done

.PHONY: docker-build
docker-build: ## Build the images (one per release row of hack/images.txt: manager, reference provider, MCP gateway, MCP executor, demo tool, kubectl-toolcall) with Docker for the host's platform, tagged $(IMAGE_PREFIX)<image>:$(TAG), the manager's IMG.
	@$(call RELEASE_IMAGES,$(CONTAINER_TOOL) build --target "$${image}" -t "$${ref}" .)

# The platforms docker-buildx builds each image for, as one multi-platform image (an index).
PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: docker-buildx
docker-buildx: ## Build and push the same images for every platform of PLATFORMS (default linux/amd64,linux/arm64) as one multi-platform image each, with docker buildx.
	@$(call RELEASE_IMAGES,$(CONTAINER_TOOL) buildx build --platform "$(PLATFORMS)" --target "$${image}" -t "$${ref}" --push .)

.PHONY: docker-push
docker-push: ## Push the images docker-build built.
	@$(call RELEASE_IMAGES,$(CONTAINER_TOOL) push "$${ref}")

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: ## Install the CRDs into the cluster in your kubeconfig.
	$(KUBECTL) kustomize config/crd | $(KUBECTL) apply -f -

.PHONY: uninstall
uninstall: ## Uninstall the CRDs from the cluster. Call with ignore-not-found=true to ignore resource not found errors.
	$(KUBECTL) kustomize config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: deploy-overlay ## Deploy the controller (config/default, image IMG) to the cluster in your kubeconfig.
	$(KUBECTL) kustomize "$(DEPLOY_OVERLAY)" | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: deploy-overlay ## Remove the controller from the cluster. Call with ignore-not-found=true to ignore resource not found errors.
	$(KUBECTL) kustomize "$(DEPLOY_OVERLAY)" | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

# deploy-overlay writes a kustomization (git-ignored, under bin/) that points config/default at $(IMG),
# the manager's default mcp-call image at $(MCP_CALL_IMG).
.PHONY: deploy-overlay
deploy-overlay: | $(LOCALBIN)
	@mkdir -p "$(DEPLOY_OVERLAY)"
	@img='$(IMG)'; name="$${img%:*}"; tag="$${img##*:}"; \
	case "$${tag}" in "$${img}"|*/*) name="$${img}"; tag='$(TAG)' ;; esac; \
	printf '%s\n' \
	  'apiVersion: kustomize.config.k8s.io/v1beta1' \
	  'kind: Kustomization' \
	  'resources:' \
	  '- ../../config/default' \
	  'images:' \
	  '- name: controller' \
	  "  newName: $${name}" \
	  "  newTag: $${tag}" \
	  'patches:' \
	  '- target: {kind: Deployment, name: toolgate-controller-manager}' \
	  '  patch: |-' \
	  '    - {op: add, path: /spec/template/spec/containers/0/args/-, value: "--mcp-executor-image=$(MCP_CALL_IMG)"}' \
	  > "$(DEPLOY_OVERLAY)/kustomization.yaml"

.PHONY: build-installer
build-installer: manifests deploy-overlay ## Write dist/install.yaml (config/default with the image IMG, one file to kubectl apply) and the Helm chart's generated templates (CRDs, RBAC, admission policies; hack/chart) from it, with the alerting rules and the dashboard it ships.
	@mkdir -p dist dist/chart/templates
	$(KUBECTL) kustomize "$(DEPLOY_OVERLAY)" > dist/install.yaml
	go run ./hack/chart --manifest dist/install.yaml --out dist/chart/templates \
	  --file config/prometheus/rules.yaml=dist/chart/files/prometheus-rules.yaml \
	  --file config/grafana/toolgate-dashboard.json=dist/chart/files/grafana-dashboard.json

##@ Dependencies

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/ (version pinned by hack/tools/go.mod).

# controller-gen is built from hack/tools/go.mod and rebuilt whenever that module changes.
$(CONTROLLER_GEN): hack/tools/go.mod hack/tools/go.sum | $(LOCALBIN)
	cd hack/tools && go build -o "$(CONTROLLER_GEN)" sigs.k8s.io/controller-tools/cmd/controller-gen
	@touch "$(CONTROLLER_GEN)"

$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

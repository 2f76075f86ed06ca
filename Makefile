# gpu-scheduler — run `make help` for the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       := $(CURDIR)/bin
TOOLS_BIN := $(CURDIR)/_output/bin
SCENARIO  ?= scenarios/quickstart.yaml

## help: list the targets and what they do
.PHONY: help
help:
	@grep -hE '^## ' $(MAKEFILE_LIST) | sed -e 's/^## //' | awk '{i = index($$0, ": "); printf "  %-22s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2)}'

## build: build every binary in cmd/ into ./bin, with kubectl_complete-gpu (kubectl gpu <TAB>)
.PHONY: build
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=1 $(GO) build -o $(BIN)/ ./cmd/...
	install -m 0755 plugins/kubectl_complete-gpu $(BIN)/

## generate: regenerate deepcopy, CRD manifests, clientset, listers, informers and docs/api.md
.PHONY: generate
generate:
	bash hack/update-codegen.sh

## verify: gofmt, go mod tidy a no-op, go vet, golangci-lint (.golangci.yml), no dates in comments or help texts, generated code and docs/api.md up to date
.PHONY: verify
verify:
	bash hack/verify.sh

## lint: golangci-lint with the linters in .golangci.yml over the tree and the hack/images module (built into _output/bin when missing; make verify runs it too)
.PHONY: lint
lint:
	bash hack/build-tools.sh --lint
	CGO_ENABLED=1 $(TOOLS_BIN)/golangci-lint run ./...
	cd hack/images && CGO_ENABLED=1 $(TOOLS_BIN)/golangci-lint run --config $(CURDIR)/.golangci.yml ./...

## unit: hermetic unit tests, fuzz seeds and benchmark compilation (go test ./...)
.PHONY: unit
unit:
	CGO_ENABLED=1 $(GO) test -count=1 ./...
	CGO_ENABLED=1 $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./...
	$(GO) -C hack/images test -count=1 ./...

## test: everything CI runs: verify, unit tests, integration and acceptance tests, the simulator smoke run, the README walkthrough and the real-node tests (e2e-node: skipped with one line where the machine cannot host a node)
.PHONY: test
test: setup verify unit test-chart test-release test-integration test-acceptance test-sim test-dev e2e-node

## setup: install the system packages the tests and the real node need and Go cannot build (Chromium, runc, CNI plugins, iptables, conntrack) when missing: as root with apt-get, else one line saying what to install
.PHONY: setup
setup:
	bash hack/setup-system.sh

## tools: build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, kwokctl, helm, promtool and promql-metrics into _output/bin (only when a pin changed)
.PHONY: tools
tools:
	bash hack/build-tools.sh

# The control plane alone (no promtool): what make sim and make dev run.
.PHONY: tools-control-plane
tools-control-plane:
	PROMETHEUS_TOOLS=0 bash hack/build-tools.sh

## kueue-tools: build Kueue's controller manager into _output/bin and copy its Helm chart (CRDs, webhooks) into _output/kueue (only when its pin changed); the acceptance tests run it
.PHONY: kueue-tools
kueue-tools:
	bash hack/build-tools.sh --kueue

## test-integration: tests against a real control plane (build tag integration), one package at a time
.PHONY: test-integration
test-integration: tools
	@pkgs=$$(grep -rl --include='*_test.go' -e '^//go:build integration' . | grep -v '^./_output/' | xargs -r -n1 dirname | sort -u); \
	if [ -z "$$pkgs" ]; then echo "no integration tests"; exit 0; fi; \
	echo CGO_ENABLED=1 $(GO) test -tags integration -count=1 -p 1 -timeout 30m $$pkgs; \
	CGO_ENABLED=1 $(GO) test -tags integration -count=1 -p 1 -timeout 30m $$pkgs

## test-acceptance: the godog scenarios in features/ against a real control plane (TAGS=@lease to pick some); JUnit in reports/acceptance.xml
.PHONY: test-acceptance
test-acceptance: tools kueue-tools
	@mkdir -p reports
	CGO_ENABLED=1 $(GO) test -v -tags acceptance -count=1 -timeout 30m ./features/ -args -godog.format=$(or $(GODOG_FORMAT),pretty) $(if $(TAGS),-godog.tags=$(TAGS))

## sim: simulate SCENARIO (default scenarios/quickstart.yaml) with gpu-scheduler and the stock kube-scheduler; table on stdout, report in reports/
.PHONY: sim
sim: tools-control-plane build
	GPU_SIM_BUILD=0 $(BIN)/gpu-sim run $(SCENARIO)

## test-sim: the simulator's smoke runs (scenarios/smoke.yaml: 8 nodes, 24 pods, both schedulers; workloads-smoke.yaml: Jobs and a Deployment through claim templates, nothing may leak)
.PHONY: test-sim
test-sim: tools build
	GPU_SIM_BUILD=0 $(BIN)/gpu-sim run scenarios/smoke.yaml
	GPU_SIM_BUILD=0 $(BIN)/gpu-sim run scenarios/workloads-smoke.yaml

## e2e-gpu: on a machine with an NVIDIA driver: the node-level hardware check (real NVML through the agent's adapter; the whole agent's GpuNodeStatus and ResourceSlice checked against nvidia-smi; the kubelet's device manager hands a pod's container exactly its GPU, checked with nvidia-smi -L), then, when the current kubectl context reaches a cluster, the chart and a 2-GPU pod; exits 0 with a message when there is no driver (docs/node.md)
.PHONY: e2e-gpu
e2e-gpu:
	bash hack/e2e-gpu.sh

## e2e-gpu-bin: build the node-level hardware check's test binaries into bin/e2e-gpu, for a GPU machine without Go (E2E_GPU_TESTBIN=bin/e2e-gpu make e2e-gpu there)
.PHONY: e2e-gpu-bin
e2e-gpu-bin:
	@mkdir -p bin/e2e-gpu
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o bin/e2e-gpu/nvmlgpu.test ./agent/nvmlgpu
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o bin/e2e-gpu/agent.test ./agent
	CGO_ENABLED=1 go test -c -ldflags='-s -w' -o bin/e2e-gpu/deviceplugin.test ./agent/deviceplugin

## cluster-up: start a local control plane with the stock scheduler (NODES=n fake GPU nodes); prints its KUBECONFIG
.PHONY: cluster-up
cluster-up: tools
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-sim ./cmd/gpu-sim
	$(BIN)/gpu-sim cluster up --nodes $(or $(NODES),0)

## cluster-down: stop the cluster started by cluster-up and remove its state
.PHONY: cluster-down
cluster-down:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-sim ./cmd/gpu-sim
	$(BIN)/gpu-sim cluster down

## cluster-status: show the local cluster's processes, memory and nodes
.PHONY: cluster-status
cluster-status:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-sim ./cmd/gpu-sim
	$(BIN)/gpu-sim cluster status

## dev: a local cluster to try the scheduler by hand (NODES=8 TOPOLOGY=dgx-h100, a preset of scenarios/hardware): control plane, kwok GPU nodes, the agent fleet, gpu-webhook, gpu-scheduler and gpu-controller; prints the export lines; stays up until make dev-down
.PHONY: dev
dev: tools-control-plane build
	GPU_SIM_BUILD=0 $(BIN)/gpu-sim cluster up --name dev --gpu-stack --stock-scheduler=false --nodes $(or $(NODES),8) --topology $(or $(TOPOLOGY),dgx-h100)
	@echo 'export PATH=$(BIN):$(TOOLS_BIN):$$PATH   # kubectl, and kubectl-gpu as "kubectl gpu"'

## dev-down: stop the cluster of make dev and remove its state
.PHONY: dev-down
dev-down:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-sim ./cmd/gpu-sim
	$(BIN)/gpu-sim cluster down --name dev

## test-dev: run README's "Try it by hand" walkthrough as written against make dev (hack/test-walkthrough.sh)
.PHONY: test-dev
test-dev: tools-control-plane build
	bash hack/test-walkthrough.sh

# Container images. No container engine runs on the development machines of this project: these
# targets are for machines with Docker (or CONTAINER_ENGINE=podman).
CONTAINER_ENGINE ?= docker
REGISTRY         ?= ghcr.io/gpu-scheduler
TAG              ?= dev
DOCKER_BUILD     = $(CONTAINER_ENGINE) build -f build/Dockerfile $(DOCKER_BUILD_ARGS)

## docker: build the scheduler image $(REGISTRY)/gpu-scheduler:$(TAG) (needs Docker)
.PHONY: docker
docker:
	$(DOCKER_BUILD) --target scheduler -t $(REGISTRY)/gpu-scheduler:$(TAG) .

## docker-webhook: build the webhook image $(REGISTRY)/gpu-webhook:$(TAG) (needs Docker)
.PHONY: docker-webhook
docker-webhook:
	$(DOCKER_BUILD) --target webhook -t $(REGISTRY)/gpu-webhook:$(TAG) .

## docker-controller: build the GpuWorkload controller image $(REGISTRY)/gpu-controller:$(TAG) (needs Docker)
.PHONY: docker-controller
docker-controller:
	$(DOCKER_BUILD) --target controller -t $(REGISTRY)/gpu-controller:$(TAG) .

## docker-agent: build the NVML agent image $(REGISTRY)/gpu-agent:$(TAG) (needs Docker)
.PHONY: docker-agent
docker-agent:
	$(DOCKER_BUILD) --target agent -t $(REGISTRY)/gpu-agent:$(TAG) .

## docker-all: build all four images
.PHONY: docker-all
docker-all: docker docker-webhook docker-controller docker-agent

## test-chart: helm lint, golden renderings and schema tests of charts/gpu-scheduler (the install test runs in test-integration)
.PHONY: test-chart
test-chart: tools
	GPU_SCHEDULER_REQUIRE_HELM=1 $(GO) test -count=1 ./test/chart/

## e2e-kind: kind cluster, images, chart, GPU-less smoke test with mock-topology agents (needs Docker; see docs/install.md)
.PHONY: e2e-kind
e2e-kind: tools docker-all
	$(GO) run ./test/e2e-kind --helm $(TOOLS_BIN)/helm --image-registry $(REGISTRY) --image-tag $(TAG) $(E2E_KIND_ARGS)

# Images without a container engine (hack/images, a Go module of its own so that
# go-containerregistry never moves the product's dependency versions): the four components as
# OCI image indexes for linux/amd64 and linux/arm64, named as the chart's defaults name them
# ($(REGISTRY)/<name>:<the chart's appVersion> unless IMAGE_TAG is set), and the node tests'
# pause and testbox images, as OCI archives in _output/images.
IMAGE_TAG       ?=
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

## images: build the images as OCI archives in _output/images without Docker (IMAGE_TAG, IMAGE_PLATFORMS, IMAGES=gpu-agent,testbox to pick some, IMAGE_COMMIT=HEAD to build a commit rather than the working tree; PUSH=1 also pushes the components to REGISTRY); ctr -n k8s.io images import loads them
.PHONY: images
images:
	$(GO) -C hack/images run . -registry $(REGISTRY) -tag '$(IMAGE_TAG)' -platforms $(IMAGE_PLATFORMS) $(if $(IMAGES),-images $(IMAGES)) $(if $(IMAGE_COMMIT),-commit $(IMAGE_COMMIT)) $(if $(filter 1 true yes,$(PUSH)),-push)

## test-images: the image builder's tests, make images twice with the same digests, and the images run in a containerd of their own (hack/images/check-containerd.sh: root, containerd and runc, else it says so and skips)
.PHONY: test-images
test-images:
	$(GO) -C hack/images test -count=1 ./...
	$(MAKE) --no-print-directory images
	cp _output/images/images.txt _output/images/images.first.txt
	$(MAKE) --no-print-directory images
	diff -u _output/images/images.first.txt _output/images/images.txt
	bash hack/images/check-containerd.sh

# A real single-node cluster on this machine (test/e2e-node/node; needs root and cgroups): the
# control plane of make dev, containerd 2.x with CDI, runc, a real kubelet, the bridge CNI plugin
# on a bridge of its own (10.203.0.0/24, nothing masqueraded out) and kube-proxy, with the
# images of make images loaded. kubelet, kube-proxy and containerd are built from the Go module
# proxy (hack/build-tools.sh --node); runc, iptables and the CNI plugins are the distribution's.
NODE_PLATFORM = linux/$(shell $(GO) env GOARCH)

.PHONY: node-tools
node-tools:
	bash hack/build-tools.sh --node

## node-up: a real single-node cluster on this machine (root, cgroups): control plane, containerd with CDI, kubelet, bridge CNI, kube-proxy, the images of make images loaded and 8 fake /dev/nvidia* devices; prints the KUBECONFIG; stays up until make node-down
.PHONY: node-up
node-up: node-tools
	$(MAKE) --no-print-directory images IMAGE_PLATFORMS=$(NODE_PLATFORM)
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-node ./test/e2e-node/gpu-node
	$(BIN)/gpu-node up
	@echo 'export PATH=$(TOOLS_BIN):$$PATH   # kubectl and helm'

## node-down: stop the node of make node-up and remove everything it left (processes, mounts, cgroups, bridge and veths, iptables chains, sysctls, /var/lib/kubelet...); fails naming anything still left
.PHONY: node-down
node-down:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gpu-node ./test/e2e-node/gpu-node
	$(BIN)/gpu-node down

## e2e-node: the real-node tests (test/e2e-node, build tag e2enode): a node, the chart installed as docs/install.md says, real containers that see exactly their GPUs, quota, escapes, coexistence and failure drills; skips with one line where the machine cannot host a node (GPU_SCHEDULER_REQUIRE_NODE=1 makes that a failure)
.PHONY: e2e-node
e2e-node: node-tools
	$(MAKE) --no-print-directory images IMAGE_PLATFORMS=$(NODE_PLATFORM)
	CGO_ENABLED=1 $(GO) test -tags e2enode -count=1 -v -timeout 60m ./test/e2e-node/ $(if $(RUN),-run '$(RUN)')

## test-release: run make release's script (VERSION=9.8.7-rc.1, without the images: test-images builds those) into a temporary folder and check the artefacts: SHA256SUMS against the files, the four kubectl-gpu archives (executable for their OS and CPU), the krew manifest's URIs and sums, the chart package (lint, version, dry-run install, CRDs) and the release notes (test/release); the four cross builds take several minutes on a cold build cache
.PHONY: test-release
test-release: tools
	$(GO) test -tags release -count=1 -timeout 30m ./test/release/

## release: VERSION=x.y.z: chart package, kubectl-gpu archives (linux/darwin, amd64/arm64) with SHA256SUMS, the filled-in krew manifest, release notes and the images under _output/release/VERSION; pushes nothing (RELEASE_IMAGES=0 leaves the images out)
.PHONY: release
release: tools
	VERSION='$(VERSION)' bash hack/release/release.sh

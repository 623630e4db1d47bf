# pulumi-operator. The two commands: `make run` and `make test` (README.md).
# Every tool is built from the Go module proxy at the versions pinned under hack/tools/.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
BIN := $(CURDIR)/bin
LOCAL := $(CURDIR)/.local
# kubectl for `make deploy`: the pinned one `make tools` builds (bin/kubectl), or KUBECTL=...
KUBECTL ?= $(if $(wildcard $(BIN)/kubectl),$(BIN)/kubectl,kubectl)
# The Go toolchain every target builds and tests with: go.mod's toolchain line, the one place it is
# pinned (internal/pins checks that the other modules, the Dockerfile and README agree). Exported
# as GOTOOLCHAIN, so a machine with another Go, or with GOTOOLCHAIN=local in its environment, gets
# exactly this one: the go command downloads it once through the Go module proxy (README.md "Go").
GO_TOOLCHAIN := $(shell awk '$$1 == "toolchain" {print $$2}' go.mod)
export GOTOOLCHAIN := $(GO_TOOLCHAIN)
# The pulumi CLI's version, which the CLI reports (and the Automation API checks): the pkg/v3 that
# agent/go.mod requires, the one place it is pinned.
PULUMI_VERSION := $(shell awk '$$1 == "github.com/pulumi/pulumi/pkg/v3" {print $$2}' agent/go.mod)
# The Go language host (plugin language go) `make plugins` installs: only the plain CLI running
# this project as a `runtime: go` program needs it. Pinned apart from the CLI: the Go module proxy
# serves no later release of it (README.md "With the plain pulumi CLI"), and the newer CLI runs this
# one (test/e2e/plaincli_test.go). hack/install-plugins.sh and .ci/run read it here.
PULUMI_GO_LANGUAGE_VERSION := v3.255.0
# Where `make run` keeps its state (workspaces and the default file backend) and its
# generated development passphrase.
RUN_STATE := $(LOCAL)/state
RUN_KUBECONFIG := $(LOCAL)/cluster/kubeconfig
PASSPHRASE_FILE := $(LOCAL)/passphrase
WORKERS ?= 2

.PHONY: all build tools plugins cluster cluster-down install uninstall run test e2e vulncheck vet fmt clean

all: build

## build: the operator binary, bin/pulumi-operator, and the pinned CLI, bin/pulumi, which is also
## its engine host, bin/pulumi-operator-engine (a link to it; agent/cmd/pulumi, stack.EngineHost)
# CGO_ENABLED=0 -trimpath as in the Dockerfile: `make image` shares this build cache. -s -w
# (no symbol table, no DWARF) as there too; stack traces keep their function names and lines.
build: $(BIN)/pulumi
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(BIN)/pulumi-operator .

## tools: the pinned pulumi CLI and its plugins, the local cluster's binaries, controller-gen, MinIO
## (S3 backend tests) and the previous release's CLI and engine host (bin/pulumi-previous/: the
## upgrade test, hack/build-pulumi-previous.sh).
## A plugin that cannot be installed stops only CI (CI=true); elsewhere its error is printed and the
## tests that need it SKIP, loudly.
tools: $(BIN)/pulumi
	PLUGINS_REQUIRED=$(if $(filter true,$(CI)),1,0) hack/install-plugins.sh $(BIN)
	hack/build-tools.sh $(BIN)
	hack/build-minio.sh $(BIN)
	hack/build-pulumi-previous.sh $(BIN)

## plugins: the Kubernetes provider plugin (the version in go.mod) and the Go language host into the
## project's Pulumi home, bin/pulumi-home, where the operator finds them. From the files named by
## PULUMI_KUBERNETES_PLUGIN_FILE / PULUMI_GO_LANGUAGE_PLUGIN_FILE (air-gapped), else downloaded
## (README.md "The Kubernetes provider plugin"). Seconds when already installed.
plugins: $(BIN)/pulumi
	hack/install-plugins.sh $(BIN)

# The pinned CLI with the engine host in it: the CLI's main package compiled into agent/cmd/pulumi
# through the overlay hack/cli-overlay.sh writes (that package's comment says why). Rebuilt when
# anything of the agent module changes. The Automation API refuses a CLI that reports no
# version, hence the -X.
AGENT_SOURCES := $(shell find agent -name '*.go' -not -name '*_test.go') agent/go.mod agent/go.sum
$(BIN)/pulumi: $(AGENT_SOURCES) hack/cli-overlay.sh
	@mkdir -p $(LOCAL)
	hack/cli-overlay.sh $(LOCAL)/cli-overlay.json
	cd agent && CGO_ENABLED=0 go build -trimpath -overlay $(LOCAL)/cli-overlay.json \
		-ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$(PULUMI_VERSION)" \
		-o $(BIN)/pulumi ./cmd/pulumi
	ln -sfn pulumi $(BIN)/pulumi-operator-engine
	@touch $(BIN)/pulumi

## cluster: start the local simulated cluster; kubeconfig at .local/cluster/kubeconfig
cluster: tools
	hack/cluster-up.sh

## cluster-down: stop it (no process left); state stays unless PURGE=1
cluster-down:
	hack/cluster-down.sh $(if $(PURGE),--purge,)

## install / uninstall: the CRD into the cluster of $KUBECONFIG (default: the local cluster)
install:
	KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) apply -k config/crd
	KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) wait --for=condition=Established crd/kindcustomhttps.groupsp.measutosh.dev --timeout=60s

uninstall:
	KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) delete -k config/crd --ignore-not-found

$(PASSPHRASE_FILE):
	@mkdir -p $(LOCAL)
	@umask 077 && head -c 32 /dev/urandom | base64 > $@
	@echo "generated a development passphrase for stack secrets in $@"

## run: build everything, start the local cluster, install the CRD, run `watch` (Ctrl-C stops it)
run: build cluster $(PASSPHRASE_FILE)
	$(MAKE) --no-print-directory install KUBECONFIG=$(RUN_KUBECONFIG)
	@echo "now, in another shell: KUBECONFIG=$(RUN_KUBECONFIG) $(KUBECTL) apply -f config/samples/"
	PULUMI_CONFIG_PASSPHRASE_FILE=$(PASSPHRASE_FILE) $(BIN)/pulumi-operator \
		--kubeconfig $(RUN_KUBECONFIG) --state-dir $(RUN_STATE) watch --workers $(WORKERS)

## test: every test, against a local cluster of its own and the pinned pulumi CLI
test: tools build
	hack/test.sh ./...

## e2e: only the end-to-end tests (need the Kubernetes provider plugin; SKIP where absent)
e2e: tools build
	hack/test.sh ./test/e2e/...

## vulncheck: govulncheck (hack/tools/govulncheck) on every module of the repository and on
## bin/pulumi-operator and bin/pulumi, offline against the pinned Go vulnerability database
## (hack/tools/vulndb, built into .local/vulndb/<version> once); fails on a called vulnerability
## that hack/vulncheck-accepted.txt does not accept with its reason (hack/vulncheck.sh)
vulncheck: build
	hack/vulncheck.sh $(BIN)

vet:
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

clean: cluster-down
	rm -rf $(BIN) $(LOCAL)

# ---- Installing the operator into a cluster: config/default (kustomize) or charts/pulumi-operator.
.PHONY: deploy undeploy helm promtool

## deploy: the CRD, RBAC and the operator (config/default) into the cluster of $KUBECONFIG
## (default: the local cluster); create Secret pulumi-operator-secrets first (README.md)
deploy:
	KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) apply -k config/default

## undeploy: remove the operator and its RBAC. Keeps the CRD (so every KindCustomHttp, its objects
## and its stack), namespace pulumi-operator-system, the state volume and the Secret
# The Deployment goes first and in the foreground (kubectl returns once its pods are gone), so a
# Pulumi operation that is finishing during the pod's grace period still has its permissions.
undeploy:
	$(KUBECTL) kustomize config/default | KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) delete \
		--ignore-not-found --cascade=foreground -l app.kubernetes.io/component=manager -f -
	$(KUBECTL) kustomize config/default | KUBECONFIG=$${KUBECONFIG:-$(RUN_KUBECONFIG)} $(KUBECTL) delete \
		--ignore-not-found -l app.kubernetes.io/component=rbac -f -

# ---- Images: docker, or podman/buildah (CONTAINER_TOOL=podman). Not run in CI: no engine there.
.PHONY: docker-build docker-push
CONTAINER_TOOL ?= docker
## IMG: the operator image to build and push (default: the chart's image at its appVersion)
IMG ?= ghcr.io/pulumi-operator/pulumi-operator:$(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/pulumi-operator/Chart.yaml)
## PLATFORM: the image's platform, e.g. linux/arm64 (default: the engine's own)
PLATFORM ?=
## DOCKER_BUILD_ARGS: more arguments for the build, e.g. --build-arg PULUMI_KUBERNETES_PLUGIN_FILE=...
DOCKER_BUILD_ARGS ?=

## docker-build: build the operator image IMG from Dockerfile (its context leaves out bin/ and .local/,
## see .dockerignore); `make docker-build IMG=registry.example/pulumi-operator:dev PLATFORM=linux/arm64`
docker-build:
	$(CONTAINER_TOOL) build $(if $(PLATFORM),--platform $(PLATFORM)) $(DOCKER_BUILD_ARGS) -t $(IMG) .

## docker-push: push IMG
docker-push:
	$(CONTAINER_TOOL) push $(IMG)

# ---- A real node: the images users get, run as real containers.
.PHONY: image realnode-up realnode-down e2e-real

## image: the operator and http-server images from Dockerfile (.local/images/pulumi-operator.tar and
## http-server.tar, docker archives): with buildah when there is no Docker engine, from local base
## images and the plugin file, downloading nothing; loaded into the real node when it runs. Fails
## when the operator image is over IMAGE_MAX_MB, 400 MB (hack/image-build.sh).
image:
	hack/image-build.sh

## realnode-up: one real node beside the control plane (containerd, runc, CNI bridge, kubelet,
## kube-proxy, CoreDNS; root only), kubeconfig .local/realnode/kubeconfig; realnode-down stops it
## and removes every trace
realnode-up: tools image
	hack/realnode-up.sh

realnode-down:
	hack/realnode-down.sh

## e2e-real: test/e2e/realnode on a real node: Helm and `make deploy` installs of the built image in
## restricted namespaces, the sample served through its Service, a rollout with no failed request,
## an up interrupted by deleting the operator pod, delete. SKIP (exit 0) where no node can run
e2e-real: tools build image helm
	hack/e2e-real.sh

## helm: the pinned helm CLI, bin/helm (for charts/pulumi-operator and its tests)
helm:
	hack/build-helm.sh $(BIN)

# The chart tests (config/) need bin/helm; under CI=true they fail without it.
test: helm

## promtool: the pinned promtool, bin/promtool (hack/tools/promtool: the PrometheusRule's unit tests)
promtool:
	hack/build-promtool.sh $(BIN)

# config/prometheusrule_test.go needs bin/promtool; under CI=true it fails without it.
test: promtool

# ---- Generated manifests: the CRD and the ClusterRoles come from +kubebuilder markers.
.PHONY: controller-gen manifests generate

## controller-gen: the pinned controller-gen, bin/controller-gen (hack/tools/controller-gen)
controller-gen:
	ONLY=controller-gen hack/build-tools.sh $(BIN)

## manifests: regenerate from the markers the CRD, config/crd (from api/v1; the chart's crds/ holds
## a copy: helm warns about a symbolic link, and `helm package` must carry the file itself), and
## the ClusterRoles config/rbac/role.yaml (watcher/rbac.go) and
## config/rbac/cluster_name_role.yaml (commands/rbac.go), and the DeepCopy methods of the
## API types, api/v1/zz_generated.deepcopy.go. config/manifests_test.go runs the same commands
## and fails until the committed files are what they generate.
manifests: controller-gen
	$(BIN)/controller-gen crd:headerFile=config/crd/header.txt paths=./api/v1 output:crd:artifacts:config=config/crd
	$(BIN)/controller-gen rbac:roleName=pulumi-operator-manager,headerFile=config/rbac/header.txt paths=./watcher output:rbac:artifacts:config=config/rbac
	$(BIN)/controller-gen rbac:roleName=pulumi-operator-cluster-name,fileName=cluster_name_role.yaml,headerFile=config/rbac/header.txt paths=./commands output:rbac:artifacts:config=config/rbac
	$(BIN)/controller-gen object paths=./api/v1 output:object:dir=api/v1
	rm -f charts/pulumi-operator/crds/groupsp.measutosh.dev_kindcustomhttps.yaml
	cp config/crd/groupsp.measutosh.dev_kindcustomhttps.yaml charts/pulumi-operator/crds/

## generate: the same as manifests (kubebuilder's other name)
generate: manifests

# config/manifests_test.go needs bin/controller-gen; under CI=true it fails without it.
test: controller-gen

# ---- Generated gRPC code: the engine host's protocol (agent/protocol/enginepb).
.PHONY: proto proto-tools

## proto-tools: the pinned buf, protoc-gen-go and protoc-gen-go-grpc in bin/ (hack/tools/buf,
## hack/tools/protoc-gen)
proto-tools:
	ONLY="buf protoc-gen-go protoc-gen-go-grpc" hack/build-tools.sh $(BIN)

## proto: regenerate agent/protocol/enginepb's Go code from engine.proto (agent/protocol/buf.gen.yaml).
## config/proto_test.go runs the same and fails until the committed code is what it generates.
proto: proto-tools
	cd agent/protocol && PATH="$(BIN):$$PATH" $(BIN)/buf generate

# config/proto_test.go needs them; under CI=true it fails without them.
test: proto-tools

# ---- Benchmarks. Not tests: `make test` never runs them, and a figure that misses its
# target is reported, not failed.
.PHONY: bench

## bench: figures against targets on a local cluster of its own (.local/bench-cluster): a new CR
## to Ready, bursts of 100 CRs, idle over 1000, drift repair, a change (also on PostgreSQL), each
## against the floor of its `pulumi up` engine run; writes .local/bench/results.json and
## docs/benchmarks.md (which says how long the run took). BENCH_FLAGS passes flags to hack/bench,
## a module of its own (e.g. --phases latency,drift,change). Then, on a real node, a new CR to its
## first GET through its Service (hack/bench/realnode.sh; SKIP where no node can run).
bench: tools build image helm
	hack/bench/run.sh $(BENCH_FLAGS)
	hack/bench/realnode.sh

.PHONY: bench-upgrade

## bench-upgrade: `make bench`'s local-cluster figures for this tree's binaries and the previous
## release's (BASELINE_BIN, see hack/bench/upgrade.sh) in one run, in turn sample for sample and
## burst for burst; docs/benchmarks.md then sets each figure beside the previous release's
## ("Side by side", those worse by more than 10 % marked).
bench-upgrade: tools build image helm
	hack/bench/upgrade.sh $(BENCH_FLAGS)

.PHONY: bench-wave

## bench-wave: a program upgrade over 1000 stacks (hack/bench phase wave, outside `make bench`
## and CI; about 40 minutes on 2 cores): the operator is replaced by this tree built with
## infra.ProgramVersion one higher, which re-runs every stack at the default pace
## (--program-upgrades-per-minute) while new objects are timed to Ready during the wave and
## after it. Writes .local/bench-wave/results.json and the wave section of docs/benchmarks.md
## (`make bench` keeps it). BENCH_WAVE_FLAGS passes flags (e.g. --wave-objects 200).
bench-wave: tools build
	BENCH_OUT=$(CURDIR)/.local/bench-wave hack/bench/run.sh --phases wave --budget 90m $(BENCH_WAVE_FLAGS)

.PHONY: bench-scale

## bench-scale: the cost curve and sharded operators, outside `make bench` and CI (about an hour
## and a half on 2 cores, most of it creating the 10,000 objects): bursts of 100, 300 and 1000 new CRs, an idle operator over 1000, 3000 and
## 10,000 (each object a real up, on the PostgreSQL backend run.sh starts; --scale-backend file
## for the file backend; a count the --budget cannot pay for is left out, with the
## reason), then 3 operators sharded by label selector over 1000 objects on one PostgreSQL
## backend, one of them killed and started again. Writes .local/bench-scale/results.json and
## its own section of docs/benchmarks.md (`make bench` keeps it), also when a phase fails: the
## doc names what failed and `make` exits 1. BENCH_SCALE_FLAGS passes flags to hack/bench
## (e.g. --scale-idle 1000,3000 --budget 40m).
bench-scale: tools build
	BENCH_OUT=$(CURDIR)/.local/bench-scale hack/bench/run.sh --phases scale,shards --budget 150m $(BENCH_SCALE_FLAGS)

# ---- Soak. Not a test: `make test` never runs it.
.PHONY: soak

## soak: thousands of updates on a local cluster of its own (hack/bench/soak): the state
## directory, the operator's and the engine host's memory, goroutines and file descriptors sampled
## from start to end; writes .local/soak/soak.json and the soak section of docs/benchmarks.md.
## SOAK_FLAGS passes flags (e.g. --updates 500)
soak: tools build
	hack/bench/soak/run.sh $(SOAK_FLAGS)

# ---- Crash safety. `make test` runs a short TestCrashSafety (3 kills, file backend);
# this is the long run.
.PHONY: crash-test

## crash-test: test/crash/TestCrashSafety on the file and PostgreSQL backends: SIGKILLs `watch` (with its
## pulumi processes) at random 20 times per backend while objects change, then checks that state
## and cluster agree (hack/test.sh: its own cluster and PostgreSQL). CRASH_SEED=N replays a run's
## choices, CRASH_KILLS=N sets the kills per backend.
crash-test: tools build
	PULUMI_OPERATOR_CRASH_TEST=1 hack/test.sh -run TestCrashSafety ./test/crash/

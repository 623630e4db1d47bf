#!/usr/bin/env bash
# Builds the binaries of the local simulated cluster (hack/cluster-up.sh) into DEST:
#   etcd                                                 (hack/tools/etcd, go.etcd.io/etcd/server/v3)
#   kube-apiserver, kube-controller-manager, kube-scheduler (hack/tools/kubernetes, k8s.io/kubernetes)
#   kwok                                                 (hack/tools/kwok, sigs.k8s.io/kwok)
#   kubelet, kube-proxy                                  (hack/tools/kubernetes: the real node of
#                                                         hack/realnode-up.sh, same version)
#   kubectl                                              (hack/tools/kubernetes: `make deploy`)
#   coredns                                              (hack/tools/coredns, the real node's DNS)
# controller-gen (hack/tools/controller-gen, sigs.k8s.io/controller-tools) for `make manifests`, and
# buf, protoc-gen-go and protoc-gen-go-grpc (hack/tools/buf, hack/tools/protoc-gen) for `make proto`.
#
# Usage: hack/build-tools.sh [DEST]     (DEST defaults to <repo>/bin)
#        ONLY="controller-gen ..." hack/build-tools.sh [DEST] builds only the binaries named.
#
# Each tools module is its own go.mod, so their dependency graphs never meet; versions are pinned
# there (the `tool` directive) and in the committed go.sum. A binary is skipped when it exists and
# its stamp file (DEST/.stamps/<binary>) matches the go.mod, go.sum and Go version it was built
# from. FORCE=1 rebuilds everything. A cold build of the kube-* binaries takes several minutes on
# 2 cores; the Go build cache makes later builds quick.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
ONLY="${ONLY:-}"
TOOLS="${REPO_ROOT}/hack/tools"

# Version information the upstream Makefiles inject (k8s hack/lib/version.sh); without it the kube-*
# binaries report v0.0.0-master and kubectl complains about the skew.
KUBE_VERSION="v1.35.4"
KUBE_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	KUBE_LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	KUBE_LDFLAGS+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=35"
	KUBE_LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
done

# build NAME MODULE_DIR PACKAGE LDFLAGS: build::go (stamped, -trimpath), unless ONLY names
# other binaries.
build() {
	if [[ -n "${ONLY}" && " ${ONLY} " != *" $1 "* ]]; then
		return 0
	fi
	build::go "$@"
}

build etcd "${TOOLS}/etcd" go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver "${KUBE_LDFLAGS}"
build kube-controller-manager "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-controller-manager "${KUBE_LDFLAGS}"
build kube-scheduler "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-scheduler "${KUBE_LDFLAGS}"
build kwok "${TOOLS}/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w"
# The real node (hack/realnode-up.sh): the same k8s.io/kubernetes module as the control plane
# above, so the packages they share come from the build cache (a cold kubelet build is still
# the longest of all, once).
build kubelet "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kubelet "${KUBE_LDFLAGS}"
build kube-proxy "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-proxy "${KUBE_LDFLAGS}"
# kubectl, for `make deploy`/`undeploy` (kustomize built in) on a machine that has none.
build kubectl "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kubectl "${KUBE_LDFLAGS}"
# Static: it runs inside the CoreDNS image, which has no C library.
CGO_ENABLED=0 build coredns "${TOOLS}/coredns" github.com/coredns/coredns "-s -w"
# controller-gen stamps its version into every CRD it writes (annotation
# controller-gen.kubebuilder.io/version); a binary built from a tools module reports none without -X.
CONTROLLER_TOOLS_VERSION="$(build::module_version "${TOOLS}/controller-gen" sigs.k8s.io/controller-tools)"
build controller-gen "${TOOLS}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen \
	"-s -w -X sigs.k8s.io/controller-tools/pkg/version.version=${CONTROLLER_TOOLS_VERSION}"
# buf and the two code generators it runs (`make proto`: agent/protocol/enginepb from its .proto).
build buf "${TOOLS}/buf" github.com/bufbuild/buf/cmd/buf "-s -w"
build protoc-gen-go "${TOOLS}/protoc-gen" google.golang.org/protobuf/cmd/protoc-gen-go "-s -w"
build protoc-gen-go-grpc "${TOOLS}/protoc-gen" google.golang.org/grpc/cmd/protoc-gen-go-grpc "-s -w"

#!/usr/bin/env bash
# Builds the binaries of the local simulated cluster (hack/cluster-up.sh) into DEST:
#   etcd                                                 (hack/tools/etcd, go.etcd.io/etcd/server/v3)
#   kube-apiserver, kube-controller-manager, kube-scheduler (hack/tools/kubernetes, k8s.io/kubernetes)
#   kwok                                                 (hack/tools/kwok, sigs.k8s.io/kwok)
# and controller-gen (hack/tools/controller-gen, sigs.k8s.io/controller-tools) for `make manifests`.
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
DEST="${1:-${REPO_ROOT}/bin}"
mkdir -p "${DEST}"
DEST="$(cd "${DEST}" && pwd)"
STAMPS="${DEST}/.stamps"
mkdir -p "${STAMPS}"
FORCE="${FORCE:-0}"
ONLY="${ONLY:-}"
TOOLS="${REPO_ROOT}/hack/tools"

command -v go >/dev/null 2>&1 || { echo "build-tools: go is not on PATH" >&2; exit 1; }
GO_VERSION="$(go env GOVERSION)"

# Version information the upstream Makefiles inject (k8s hack/lib/version.sh); without it the kube-*
# binaries report v0.0.0-master and kubectl complains about the skew.
KUBE_VERSION="v1.35.4"
KUBE_LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	KUBE_LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	KUBE_LDFLAGS+=" -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=35"
	KUBE_LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
done

# stamp_of MODULE_DIR EXTRA...: what a binary built from MODULE_DIR depends on.
stamp_of() {
	local dir="$1"
	shift
	{
		echo "go=${GO_VERSION}"
		echo "args=$*"
		cat "${dir}/go.mod" "${dir}/go.sum"
	} | sha256sum | cut -d' ' -f1
}

# build NAME MODULE_DIR PACKAGE LDFLAGS
build() {
	local name="$1" dir="$2" pkg="$3" ldflags="$4"
	local out="${DEST}/${name}" stamp_file="${STAMPS}/${name}" want start
	if [[ -n "${ONLY}" && " ${ONLY} " != *" ${name} "* ]]; then
		return 0
	fi
	want="$(stamp_of "${dir}" "${pkg}" "${ldflags}")"
	if [[ "${FORCE}" != "1" && -x "${out}" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${want}" ]]; then
		echo "${name}: up to date (${out})"
		return 0
	fi
	start=${SECONDS}
	rm -f "${stamp_file}"
	# -trimpath keeps the binaries independent of where the checkout and module cache live.
	(cd "${dir}" && go build -trimpath -ldflags "${ldflags}" -o "${out}.tmp" "${pkg}")
	mv -f "${out}.tmp" "${out}"
	echo "${want}" >"${stamp_file}"
	echo "${name}: built ${out} ($((SECONDS - start))s)"
}

build etcd "${TOOLS}/etcd" go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver "${KUBE_LDFLAGS}"
build kube-controller-manager "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-controller-manager "${KUBE_LDFLAGS}"
build kube-scheduler "${TOOLS}/kubernetes" k8s.io/kubernetes/cmd/kube-scheduler "${KUBE_LDFLAGS}"
build kwok "${TOOLS}/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w"
# controller-gen stamps its version into every CRD it writes (annotation
# controller-gen.kubebuilder.io/version); a binary built from a tools module reports none without -X.
CONTROLLER_TOOLS_VERSION="$(cd "${TOOLS}/controller-gen" && go list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)"
build controller-gen "${TOOLS}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen \
	"-s -w -X sigs.k8s.io/controller-tools/pkg/version.version=${CONTROLLER_TOOLS_VERSION}"

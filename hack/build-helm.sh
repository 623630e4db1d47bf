#!/usr/bin/env bash
# Builds the helm CLI (for the chart in charts/pulumi-operator and its tests in config/) into
# DEST/helm from the tools module hack/tools/helm (helm.sh/helm/v3 at the version pinned there by
# its `tool` directive and go.sum).
#
# Usage: hack/build-helm.sh [DEST]     (DEST defaults to <repo>/bin)
#
# Skipped when DEST/helm exists and its stamp file (DEST/.stamps/helm) matches the go.mod, go.sum,
# Go version and flags it was built from. FORCE=1 rebuilds. A cold build takes a few minutes on
# 2 cores; the Go build cache makes later builds quick.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
DIR="${REPO_ROOT}/hack/tools/helm"
MOD="helm.sh/helm/v3"
PKG="${MOD}/cmd/helm"

# The version information helm's Makefile injects; without it `helm version` reports v3.22 with no
# patch and no commit, and lint/template assume a Kubernetes version that does not match the
# client-go helm was built with (its Makefile: major = client-go major + 1, minor = client-go minor).
HELM_VERSION="$(build::module_version "${DIR}" "${MOD}")"
CLIENT_GO="$(build::module_version "${DIR}" k8s.io/client-go)"
if [[ ! "${CLIENT_GO}" =~ ^v0\.([0-9]+)\. ]]; then
	log::info "cannot read the k8s.io/client-go version (${CLIENT_GO})"
	exit 1
fi
K8S_MINOR="${BASH_REMATCH[1]}"
LDFLAGS="-s -w -X ${MOD}/internal/version.version=${HELM_VERSION} -X ${MOD}/internal/version.gitTreeState=clean"
for pkg in "${MOD}/pkg/lint/rules" "${MOD}/pkg/chartutil"; do
	LDFLAGS+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${K8S_MINOR}"
done

# As helm's Makefile builds it: static (CGO_ENABLED=0), -trimpath.
CGO_ENABLED=0 build::go helm "${DIR}" "${PKG}" "${LDFLAGS}"

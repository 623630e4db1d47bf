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
DEST="${1:-${REPO_ROOT}/bin}"
mkdir -p "${DEST}"
DEST="$(cd "${DEST}" && pwd)"
STAMPS="${DEST}/.stamps"
mkdir -p "${STAMPS}"
FORCE="${FORCE:-0}"
DIR="${REPO_ROOT}/hack/tools/helm"
MOD="helm.sh/helm/v3"
PKG="${MOD}/cmd/helm"

command -v go >/dev/null 2>&1 || { echo "build-helm: go is not on PATH" >&2; exit 1; }
GO_VERSION="$(go env GOVERSION)"

# The version information helm's Makefile injects; without it `helm version` reports v3.22 with no
# patch and no commit, and lint/template assume a Kubernetes version that does not match the
# client-go helm was built with (its Makefile: major = client-go major + 1, minor = client-go minor).
HELM_VERSION="$(cd "${DIR}" && go list -m -f '{{.Version}}' "${MOD}")"
CLIENT_GO="$(cd "${DIR}" && go list -m -f '{{.Version}}' k8s.io/client-go)"
if [[ ! "${CLIENT_GO}" =~ ^v0\.([0-9]+)\. ]]; then
	echo "build-helm: cannot read the k8s.io/client-go version (${CLIENT_GO})" >&2
	exit 1
fi
K8S_MINOR="${BASH_REMATCH[1]}"
LDFLAGS="-s -w -X ${MOD}/internal/version.version=${HELM_VERSION} -X ${MOD}/internal/version.gitTreeState=clean"
for pkg in "${MOD}/pkg/lint/rules" "${MOD}/pkg/chartutil"; do
	LDFLAGS+=" -X ${pkg}.k8sVersionMajor=1 -X ${pkg}.k8sVersionMinor=${K8S_MINOR}"
done

out="${DEST}/helm"
stamp_file="${STAMPS}/helm"
want="$({
	echo "go=${GO_VERSION}"
	echo "args=${PKG} ${LDFLAGS}"
	cat "${DIR}/go.mod" "${DIR}/go.sum"
} | sha256sum | cut -d' ' -f1)"
if [[ "${FORCE}" != "1" && -x "${out}" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${want}" ]]; then
	echo "helm: up to date (${out})"
	exit 0
fi
start=${SECONDS}
rm -f "${stamp_file}"
# As helm's Makefile builds it: static (CGO_ENABLED=0), -trimpath.
(cd "${DIR}" && CGO_ENABLED=0 go build -trimpath -ldflags "${LDFLAGS}" -o "${out}.tmp" "${PKG}")
mv -f "${out}.tmp" "${out}"
echo "${want}" >"${stamp_file}"
echo "helm: built ${out} ($((SECONDS - start))s)"

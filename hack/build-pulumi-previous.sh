#!/usr/bin/env bash
# Builds the previous release's pulumi CLI and engine host into DEST/pulumi-previous/: pulumi and
# pulumi-operator-engine (a symbolic link to it), for the upgrade test (stack/upgrade_test.go),
# which writes stacks with them and opens those with the current ones.
#
# What it builds is agent/cmd/pulumi, the way the Makefile builds bin/pulumi (the CLI's main
# package through hack/cli-overlay.sh's overlay, -trimpath, no cgo, the CLI's version stamped),
# but against the previous release's dependencies: hack/tools/pulumi-previous/agent.mod and
# agent.sum are agent/go.mod and agent/go.sum as that release had them, given to the go command
# with -modfile (the agent's own go.mod is not read). The agent's code is today's, which that
# release shipped unchanged; once the agent's code needs the newer Pulumi, this stops building
# and the test must start from a build of that release's commit instead.
#
# Usage: hack/build-pulumi-previous.sh [DEST]     (DEST defaults to <repo>/bin)
#
# Skipped when the binary exists and its stamp (DEST/.stamps/pulumi-previous) matches the Go
# version, agent.mod, agent.sum, the agent's Go files and hack/cli-overlay.sh it was built from.
# FORCE=1 rebuilds. A cold build takes several minutes on 2 cores (the whole pulumi CLI).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
MODFILE="${REPO_ROOT}/hack/tools/pulumi-previous/agent.mod"
OUT_DIR="${BUILD_DEST}/pulumi-previous"
OUT="${OUT_DIR}/pulumi"
STAMP="${BUILD_STAMPS}/pulumi-previous"
mkdir -p "${OUT_DIR}" "${REPO_ROOT}/.local"
export GOFLAGS="${GOFLAGS:+${GOFLAGS} }-modfile=${MODFILE}"

VERSION="$(cd agent && go list -m -f '{{.Version}}' github.com/pulumi/pulumi/pkg/v3)"
[[ "${VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || log::die "cannot read the pkg/v3 version of ${MODFILE} (${VERSION})"
want="$({
	echo "go=${GO_VERSION} version=${VERSION}"
	cat "${MODFILE}" "${MODFILE%.mod}.sum" hack/cli-overlay.sh
	git ls-files -co --exclude-standard -- 'agent/*.go' ':!:*_test.go' | sort | xargs cat
} | sha256sum | cut -d' ' -f1)"
if [[ "${FORCE}" != "1" && -x "${OUT}" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" ]]; then
	echo "pulumi-previous: up to date (${OUT}, ${VERSION})"
	exit 0
fi
start=${SECONDS}
rm -f "${STAMP}"
overlay="${REPO_ROOT}/.local/cli-overlay-previous.json"
hack/cli-overlay.sh "${overlay}"
(cd agent && CGO_ENABLED=0 go build -trimpath -overlay "${overlay}" \
	-ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=${VERSION}" \
	-o "${OUT}.tmp" ./cmd/pulumi)
mv -f "${OUT}.tmp" "${OUT}"
ln -sfn pulumi "${OUT_DIR}/pulumi-operator-engine"
echo "${want}" >"${STAMP}"
echo "pulumi-previous: built ${OUT} (${VERSION}, $((SECONDS - start))s)"

#!/usr/bin/env bash
# Builds the previous release's pulumi CLI and engine host into DEST/pulumi-previous/: pulumi and
# pulumi-operator-engine (a symbolic link to it), for the upgrade test (stack/upgrade_test.go),
# which writes stacks with them and opens those with the current ones.
#
# What it builds is agent/cmd/pulumi as this repository had it at PREVIOUS_COMMIT, the last commit
# that pinned the previous Pulumi release (pkg/v3 and sdk/v3 v3.255.0): that commit's agent/ and
# hack/cli-overlay.sh, taken with `git archive` into .local/pulumi-previous-src/, built the way the
# Makefile builds bin/pulumi (the CLI's main package through the overlay, -trimpath, no cgo, the
# CLI's version stamped) with that commit's agent/go.mod and go.sum. Today's agent code does not
# build against that release (the secrets provider it passes to the engine moved), so the
# source is the old commit's, not today's with old dependencies. Needs the repository's history
# (a shallow clone lacks the commit: `git fetch --unshallow`).
#
# Usage: hack/build-pulumi-previous.sh [DEST]     (DEST defaults to <repo>/bin)
#
# Skipped when the binary exists and its stamp (DEST/.stamps/pulumi-previous) matches the Go
# version and the commit it was built from. FORCE=1 rebuilds. A cold build takes several minutes
# on 2 cores (the whole pulumi CLI).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
# The last commit with Pulumi v3.255.0 in agent/go.mod.
PREVIOUS_COMMIT=04d79ac6efcca85fd0de5b30218f343ddb4e4c09
OUT_DIR="${BUILD_DEST}/pulumi-previous"
OUT="${OUT_DIR}/pulumi"
STAMP="${BUILD_STAMPS}/pulumi-previous"
SRC="${REPO_ROOT}/.local/pulumi-previous-src"

# Without the commit (a shallow clone) nothing can be built, but the rest of `make tools` still
# can: the reason goes to OUT_DIR/MISSING, which the upgrade test reports (testenv.PreviousPulumiCLI).
if ! git cat-file -e "${PREVIOUS_COMMIT}^{commit}" 2>/dev/null; then
	reason="commit ${PREVIOUS_COMMIT}, the previous release's source, is not in this clone (shallow? run \`git fetch --unshallow\`, then \`make tools\`)"
	mkdir -p "${OUT_DIR}" && echo "${reason}" >"${OUT_DIR}/MISSING"
	log::error "${reason}"
	exit 0
fi
rm -f "${OUT_DIR}/MISSING"
want="$(echo "go=${GO_VERSION} commit=${PREVIOUS_COMMIT}" | sha256sum | cut -d' ' -f1)"
if [[ "${FORCE}" != "1" && -x "${OUT}" && -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" ]]; then
	echo "pulumi-previous: up to date (${OUT})"
	exit 0
fi
start=${SECONDS}
rm -f "${STAMP}"
rm -rf "${SRC}" && mkdir -p "${SRC}" "${OUT_DIR}"
git archive "${PREVIOUS_COMMIT}" agent hack/cli-overlay.sh | tar -x -C "${SRC}"
VERSION="$(cd "${SRC}/agent" && go list -m -f '{{.Version}}' github.com/pulumi/pulumi/pkg/v3)"
[[ "${VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || log::die "cannot read the pkg/v3 version of ${PREVIOUS_COMMIT}'s agent/go.mod (${VERSION})"
sh "${SRC}/hack/cli-overlay.sh" "${SRC}/cli-overlay.json"
(cd "${SRC}/agent" && CGO_ENABLED=0 go build -trimpath -overlay "${SRC}/cli-overlay.json" \
	-ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=${VERSION}" \
	-o "${OUT}.tmp" ./cmd/pulumi)
mv -f "${OUT}.tmp" "${OUT}"
ln -sfn pulumi "${OUT_DIR}/pulumi-operator-engine"
echo "${want}" >"${STAMP}"
echo "pulumi-previous: built ${OUT} (${VERSION}, $((SECONDS - start))s)"

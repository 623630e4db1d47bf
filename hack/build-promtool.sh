#!/usr/bin/env bash
# Builds promtool (for the unit tests of the chart's PrometheusRule in config/: `promtool test
# rules`, `promtool check rules`) into DEST/promtool from the tools module hack/tools/promtool
# (github.com/prometheus/prometheus at the version pinned there by its `tool` directive and
# go.sum).
#
# Usage: hack/build-promtool.sh [DEST]     (DEST defaults to <repo>/bin)
#
# Skipped when DEST/promtool exists and its stamp file (DEST/.stamps/promtool) matches the go.mod,
# go.sum, Go version and flags it was built from. FORCE=1 rebuilds. A cold build takes a few
# minutes on 2 cores; the Go build cache makes later builds quick.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
DIR="${REPO_ROOT}/hack/tools/promtool"
MOD="github.com/prometheus/prometheus"

# The version Prometheus' own build (promu) injects; without it `promtool --version` says nothing.
# The Go module's v0.3MM.P is Prometheus 3.MM.P.
VERSION="$(build::module_version "${DIR}" "${MOD}")"
if [[ "${VERSION}" =~ ^v0\.3([0-9][0-9])\.([0-9]+)$ ]]; then
	VERSION="3.$((10#${BASH_REMATCH[1]})).${BASH_REMATCH[2]}"
fi
# remove_all_sd: Prometheus' own build tag that leaves out every service discovery but file, http
# and kubernetes (its plugins/ package), and with them the cloud SDKs (AWS, Azure, GCE, ...) that
# rule tests never use: most of a cold build's time.
CGO_ENABLED=0 build::go promtool "${DIR}" "${MOD}/cmd/promtool" "-s -w -X github.com/prometheus/common/version.Version=${VERSION}" -tags remove_all_sd

#!/usr/bin/env bash
# Builds the MinIO server (an S3-compatible object store, for the s3:// backend tests and
# hack/minio-up.sh) into DEST/minio from the tools module hack/tools/minio (github.com/minio/minio
# at the pseudo-version pinned there and in its go.sum).
#
# Usage: hack/build-minio.sh [DEST]     (DEST defaults to <repo>/bin)
#
# Skipped when DEST/minio exists and its stamp file (DEST/.stamps/minio) matches the go.mod,
# go.sum, Go version and flags it was built from. FORCE=1 rebuilds. A cold build takes several
# minutes on 2 cores; the Go build cache makes later builds quick.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
DIR="${REPO_ROOT}/hack/tools/minio"
PKG="github.com/minio/minio"

# The version information MinIO's Makefile injects (buildscripts/gen-ldflags.go), derived from the
# pinned pseudo-version v0.0.0-YYYYMMDDhhmmss-<commit>; without it `minio --version` says
# DEVELOPMENT.GOGET.
MOD_VERSION="$(build::module_version "${DIR}" "${PKG}")"
if [[ "${MOD_VERSION}" =~ ^v0\.0\.0-([0-9]{4})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{2})-([0-9a-f]{12})$ ]]; then
	m=("${BASH_REMATCH[@]}")
	VERSION="${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}Z"
	COMMIT="${m[7]}"
	LDFLAGS="-s -w -X ${PKG}/cmd.Version=${VERSION} -X ${PKG}/cmd.ReleaseTag=DEVELOPMENT.${VERSION//:/-}"
	LDFLAGS+=" -X ${PKG}/cmd.CommitID=${COMMIT} -X ${PKG}/cmd.ShortCommitID=${COMMIT} -X ${PKG}/cmd.CopyrightYear=${m[1]}"
else
	LDFLAGS="-s -w"
fi

# As MinIO's Makefile builds it: static (CGO_ENABLED=0), tag kqueue, -trimpath.
CGO_ENABLED=0 build::go minio "${DIR}" "${PKG}" "${LDFLAGS}" -tags kqueue

#!/usr/bin/env bash
# Loads image archives into the running real node (hack/realnode-up.sh): imports each TAR
# (a `docker save`, `buildah push docker-archive:` or OCI archive) into the node's containerd,
# namespace k8s.io (the one the kubelet's CRI uses), unpacked, so that pods using its names
# with imagePullPolicy Never or IfNotPresent run it. `make image` calls it for the images it
# builds. Nothing is pulled.
#
# Usage: hack/realnode-load.sh TAR...
#
# Environment: REALNODE_DIR [<repo>/.local/realnode]. Exits 0 when every archive was imported
# (an archive imported before and unchanged since is skipped), 1 when an import failed, 2 on
# bad usage, 4 when the node is not running (nothing to load into: not an error for callers
# that load only when a node runs).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
# shellcheck source=hack/realnode/lib.sh
source "${REPO_ROOT}/hack/realnode/lib.sh"

if (($# == 0)) || [[ "$1" == -h || "$1" == --help ]]; then
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
	(($# > 0)) || exit 2
	exit 0
fi
if ! realnode::paths_if_exists || ! realnode::pid containerd >/dev/null || [[ ! -S "${RN_SOCK}" ]]; then
	log::info "the real node is not running (hack/realnode-up.sh starts it; it imports .local/images/*.tar itself)"
	exit 4
fi
realnode::import "$@" || log::die "importing into the real node failed"

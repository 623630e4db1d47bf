#!/usr/bin/env bash
# The shared library of the hack/ scripts, laid out as Kubernetes' hack/lib: every script starts
#
#   REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
#   source "${REPO_ROOT}/hack/lib/init.sh"
#
# and then has log::* (log.sh), proc::* (process.sh: pid files, locks, ports, starting and
# stopping servers), util::* (util.sh: the --purge argument and directory of the *-down.sh
# scripts), build::* (build.sh: stamped `go build`s of the tools modules), cluster::*
# (cluster.sh: the local cluster's components and lock) and buildah::* (buildah.sh: the
# daemonless image builder, confined to .local/buildah). Sourcing defines functions and
# variables (REPO_ROOT, LOG_NAME, CLUSTER_COMPONENTS); it runs nothing else.

# Where the library's files are; REPO_ROOT for scripts that did not set it.
HACK_LIB="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="${REPO_ROOT:-$(cd "${HACK_LIB}/../.." && pwd)}"

# The Go toolchain of go.mod's toolchain line, as the Makefile exports it: a script run on its own
# (not through make) builds with the same Go, downloaded through the module proxy if need be.
GOTOOLCHAIN="$(awk '$1 == "toolchain" {print $2}' "${REPO_ROOT}/go.mod")"
export GOTOOLCHAIN

# shellcheck source=hack/lib/log.sh
source "${HACK_LIB}/log.sh"
# shellcheck source=hack/lib/process.sh
source "${HACK_LIB}/process.sh"
# shellcheck source=hack/lib/util.sh
source "${HACK_LIB}/util.sh"
# shellcheck source=hack/lib/build.sh
source "${HACK_LIB}/build.sh"
# shellcheck source=hack/lib/cluster.sh
source "${HACK_LIB}/cluster.sh"
# shellcheck source=hack/lib/buildah.sh
source "${HACK_LIB}/buildah.sh"

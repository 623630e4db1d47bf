#!/usr/bin/env bash
# Stops the local simulated cluster started by hack/cluster-up.sh.
#
# Usage: hack/cluster-down.sh [--purge]
#   --purge   also delete CLUSTER_DIR (etcd data, certificates, kubeconfig, logs)
#
# Environment: CLUSTER_DIR [<repo>/.local/cluster], CLUSTER_STOP_GRACE seconds between SIGTERM and
# SIGKILL [5]. Stops only processes this cluster started: those in CLUSTER_DIR/pids/, plus any
# etcd/kube-*/kwok process whose command line names CLUSTER_DIR (in case a pid file was lost).
# Exits 0 when nothing was running; non-zero if a process survives SIGKILL.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
CLUSTER_DIR="${CLUSTER_DIR:-${REPO_ROOT}/.local/cluster}"
GRACE="${CLUSTER_STOP_GRACE:-5}"
util::down_args "$@"
util::state_dir CLUSTER_DIR
PIDS="${CLUSTER_DIR}/pids"
cluster::lock

# Stop order: clients of the apiserver first, then the apiserver, then etcd.
GROUPS_ORDER=("kwok kube-scheduler kube-controller-manager" "kube-apiserver" "etcd")

# pids_of NAME: the recorded pid of NAME, plus NAME processes whose arguments mention CLUSTER_DIR.
pids_of() { proc::find "${PIDS}/$1.pid" "${CLUSTER_DIR}/" "$1"; }

stopped_any=0
failed=0
for group in "${GROUPS_ORDER[@]}"; do
	targets=()
	for name in ${group}; do
		for pid in $(pids_of "${name}"); do
			targets+=("${pid}:${name}")
		done
	done
	((${#targets[@]})) || continue
	stopped_any=1
	proc::stop TERM "${GRACE}" "${targets[@]}" || failed=1
	for name in ${group}; do
		[[ -n "$(pids_of "${name}")" ]] || rm -f "${PIDS}/${name}.pid"
	done
done

if ((failed)); then
	exit 1
fi
if ((stopped_any)); then
	log::info "stopped the cluster in ${CLUSTER_DIR}"
else
	log::info "nothing was running in ${CLUSTER_DIR}"
fi

if ((PURGE)); then
	util::purge "${CLUSTER_DIR}" "a cluster directory (no pids/, pki/ or etcd/)" pids pki etcd || exit 1
fi

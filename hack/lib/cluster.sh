#!/usr/bin/env bash
# What hack/cluster-up.sh and hack/cluster-down.sh share about the local simulated cluster
# (as Kubernetes' hack/lib/etcd.sh serves its scripts): its components and its lock.

# CLUSTER_COMPONENTS: the cluster's processes, each BIN_DIR/<name>, pid in CLUSTER_DIR/pids/<name>.pid.
CLUSTER_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# cluster::lock: one cluster-up/cluster-down at a time per CLUSTER_DIR (proc::lock on
# CLUSTER_DIR/.lock), exits 1 after 120 s. Exports CLUSTER_LOCK_HELD=1, so that the
# cluster-down.sh that cluster-up.sh runs does not wait for its caller's lock. The cluster's own
# processes never hold the lock (proc::start closes fd 9 for them); if they do (started by an
# older cluster-up.sh), they are ignored.
cluster::lock() {
	local rc=0
	[[ -z "${CLUSTER_LOCK_HELD:-}" ]] || return 0
	proc::lock "${CLUSTER_DIR}/.lock" "${CLUSTER_COMPONENTS[@]}" || rc=$?
	case "${rc}" in
	0) ;;
	3) log::info "warning: ${CLUSTER_DIR}/.lock is held by the cluster's own processes (started by an older cluster-up.sh): ignoring it" ;;
	*)
		log::info "could not lock ${CLUSTER_DIR}/.lock: another cluster-up/cluster-down is running"
		exit 1
		;;
	esac
	export CLUSTER_LOCK_HELD=1
}

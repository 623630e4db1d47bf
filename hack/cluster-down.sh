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
CLUSTER_DIR="${CLUSTER_DIR:-${REPO_ROOT}/.local/cluster}"
GRACE="${CLUSTER_STOP_GRACE:-5}"
PURGE=0
for arg in "$@"; do
	case "${arg}" in
	--purge) PURGE=1 ;;
	-h | --help)
		sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "cluster-down: unknown argument ${arg} (usage: hack/cluster-down.sh [--purge])" >&2
		exit 2
		;;
	esac
done

log() { echo "cluster-down: $*" >&2; }

if [[ ! -d "${CLUSTER_DIR}" ]]; then
	log "nothing to do: ${CLUSTER_DIR} does not exist"
	exit 0
fi
CLUSTER_DIR="$(cd "${CLUSTER_DIR}" && pwd)"
PIDS="${CLUSTER_DIR}/pids"

# One cluster-up/cluster-down at a time per CLUSTER_DIR. The cluster's own processes never hold
# the lock (fd 9 is closed for them); if they do (started by an older cluster-up.sh), ignore them.
lock_held_only_by_cluster() {
	local lock="${CLUSTER_DIR}/.lock" fd pid arg0 seen=0
	for fd in /proc/[0-9]*/fd/*; do
		[[ "${fd}" -ef "${lock}" ]] || continue
		pid="${fd#/proc/}"
		pid="${pid%%/*}"
		[[ "${pid}" == "$$" || "${pid}" == "${BASHPID}" ]] && continue
		arg0=""
		IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || continue
		case "${arg0##*/}" in
		etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kwok) seen=1 ;;
		*) return 1 ;;
		esac
	done
	((seen))
}
if [[ -z "${CLUSTER_LOCK_HELD:-}" ]] && command -v flock >/dev/null 2>&1; then
	exec 9>"${CLUSTER_DIR}/.lock"
	lock_deadline=$((SECONDS + 120))
	until flock -n 9; do
		if lock_held_only_by_cluster; then
			log "warning: ${CLUSTER_DIR}/.lock is held by the cluster's own processes (started by an older cluster-up.sh): ignoring it"
			break
		fi
		if ((SECONDS >= lock_deadline)); then
			log "could not lock ${CLUSTER_DIR}/.lock: another cluster-up/cluster-down is running"
			exit 1
		fi
		sleep 0.5
	done
	export CLUSTER_LOCK_HELD=1
fi

# Stop order: clients of the apiserver first, then the apiserver, then etcd.
GROUPS_ORDER=("kwok kube-scheduler kube-controller-manager" "kube-apiserver" "etcd")

# alive PID NAME: PID is a live (non-zombie) process whose argv[0] is NAME. Bash builtins only.
alive() {
	local pid="$1" name="$2" arg0="" stat=""
	[[ "${pid}" =~ ^[0-9]+$ && -r "/proc/${pid}/cmdline" ]] || return 1
	IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || return 1
	[[ "${arg0##*/}" == "${name}" ]] || return 1
	IFS= read -r stat 2>/dev/null <"/proc/${pid}/stat" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != "Z" && "${stat:0:1}" != "X" ]]
}

# pids_of NAME: the recorded pid of NAME, plus NAME processes whose arguments mention CLUSTER_DIR.
pids_of() {
	local name="$1" pid p
	local -a args
	{
		if [[ -f "${PIDS}/${name}.pid" ]]; then
			pid="$(<"${PIDS}/${name}.pid")" || true
			if alive "${pid}" "${name}"; then echo "${pid}"; fi
		fi
		for p in /proc/[0-9]*; do
			pid="${p#/proc/}"
			alive "${pid}" "${name}" || continue
			mapfile -d '' args 2>/dev/null <"${p}/cmdline" || continue
			if [[ "${args[*]}" == *"${CLUSTER_DIR}/"* ]]; then echo "${pid}"; fi
		done
	} | sort -u
}

stopped_any=0
all_stopped=()
failed=0
for group in "${GROUPS_ORDER[@]}"; do
	declare -A targets=()
	for name in ${group}; do
		for pid in $(pids_of "${name}"); do
			targets["${pid}"]="${name}"
		done
	done
	((${#targets[@]})) || { unset targets; continue; }
	for pid in "${!targets[@]}"; do
		log "stopping ${targets[${pid}]} (pid ${pid})"
		kill -TERM "${pid}" 2>/dev/null || true
	done
	stopped_any=1
	deadline=$((SECONDS + GRACE))
	while :; do
		remaining=0
		for pid in "${!targets[@]}"; do
			alive "${pid}" "${targets[${pid}]}" && remaining=1
		done
		((remaining)) || break
		if ((SECONDS >= deadline)); then
			for pid in "${!targets[@]}"; do
				if alive "${pid}" "${targets[${pid}]}"; then
					log "${targets[${pid}]} (pid ${pid}) ignored SIGTERM for ${GRACE}s: SIGKILL"
					kill -KILL "${pid}" 2>/dev/null || true
				fi
			done
			sleep 0.5
			for pid in "${!targets[@]}"; do
				if alive "${pid}" "${targets[${pid}]}"; then
					log "ERROR: ${targets[${pid}]} (pid ${pid}) is still running after SIGKILL"
					failed=1
				fi
			done
			break
		fi
		sleep 0.1
	done
	all_stopped+=("${!targets[@]}")
	for name in ${group}; do
		[[ -n "$(pids_of "${name}")" ]] || rm -f "${PIDS}/${name}.pid"
	done
	unset targets
done

# The processes are dead now, but until their parent (usually PID 1: they outlive cluster-up.sh)
# reaps them they show up as <defunct> in ps/pgrep. Give it a moment, so that callers checking
# `pgrep` right after see nothing; a zombie holds no resources, so this is not an error.
reap_deadline=$((SECONDS + 3))
for pid in "${all_stopped[@]}"; do
	while [[ -e "/proc/${pid}" ]] && ((SECONDS < reap_deadline)); do
		stat=""
		IFS= read -r stat 2>/dev/null <"/proc/${pid}/stat" || break
		stat="${stat##*) }"
		[[ "${stat:0:1}" == "Z" ]] || break
		sleep 0.1
	done
done

if ((failed)); then
	exit 1
fi
if ((stopped_any)); then
	log "stopped the cluster in ${CLUSTER_DIR}"
else
	log "nothing was running in ${CLUSTER_DIR}"
fi

if ((PURGE)); then
	# Refuse to delete a directory that does not look like a cluster directory.
	if [[ "${CLUSTER_DIR}" == "/" || ! (-d "${CLUSTER_DIR}/pids" || -d "${CLUSTER_DIR}/pki" || -d "${CLUSTER_DIR}/etcd") ]]; then
		log "ERROR: ${CLUSTER_DIR} does not look like a cluster directory (no pids/, pki/ or etcd/): not deleting it"
		exit 1
	fi
	rm -rf -- "${CLUSTER_DIR}"
	log "deleted ${CLUSTER_DIR}"
fi

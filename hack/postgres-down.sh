#!/usr/bin/env bash
# Stops the throwaway PostgreSQL server started by hack/postgres-up.sh.
#
# Usage: hack/postgres-down.sh [--purge]
#   --purge   also delete PG_DIR (the database, its log)
#
# Environment: PG_DIR [<repo>/.local/postgres], PG_BIN [/usr/lib/postgresql/15/bin], PG_OS_USER
# [postgres], PG_STOP_GRACE seconds to wait for a fast shutdown before SIGKILL [10]. Stops only
# the server of PG_DIR/data (its postmaster.pid, or a postgres process whose command line names
# that directory). Exits 0 when nothing was running; non-zero if the server survives SIGKILL.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_DIR="${PG_DIR:-${REPO_ROOT}/.local/postgres}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_OS_USER="${PG_OS_USER:-postgres}"
GRACE="${PG_STOP_GRACE:-10}"
PURGE=0
for arg in "$@"; do
	case "${arg}" in
	--purge) PURGE=1 ;;
	-h | --help)
		sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "postgres-down: unknown argument ${arg} (usage: hack/postgres-down.sh [--purge])" >&2
		exit 2
		;;
	esac
done

log() { echo "postgres-down: $*" >&2; }

if [[ ! -d "${PG_DIR}" ]]; then
	log "nothing to do: ${PG_DIR} does not exist"
	exit 0
fi
PG_DIR="$(cd "${PG_DIR}" && pwd)"
DATA="${PG_DIR}/data"

if command -v flock >/dev/null 2>&1; then
	exec 9>"${PG_DIR}/.lock"
	flock -w 120 9 || {
		log "could not lock ${PG_DIR}/.lock: another postgres-up/postgres-down is running"
		exit 1
	}
fi

# alive PID: PID is a live (non-zombie) postgres process.
alive() {
	local pid="$1" arg0="" stat=""
	[[ "${pid}" =~ ^[0-9]+$ && -r "/proc/${pid}/cmdline" ]] || return 1
	IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || return 1
	[[ "${arg0##*/}" == postgres || "${arg0}" == postgres:* ]] || return 1
	IFS= read -r stat 2>/dev/null <"/proc/${pid}/stat" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != "Z" && "${stat:0:1}" != "X" ]]
}

# postmaster_pids: the server of DATA: the pid in postmaster.pid, plus any postgres process
# started with `-D DATA` (in case postmaster.pid was lost).
postmaster_pids() {
	local pid p
	local -a args
	{
		if [[ -f "${DATA}/postmaster.pid" ]]; then
			pid="$(head -n 1 "${DATA}/postmaster.pid")" || true
			if alive "${pid}"; then echo "${pid}"; fi
		fi
		for p in /proc/[0-9]*; do
			pid="${p#/proc/}"
			alive "${pid}" || continue
			mapfile -d '' args 2>/dev/null <"${p}/cmdline" || continue
			if [[ " ${args[*]} " == *" ${DATA} "* ]]; then echo "${pid}"; fi
		done
	} | sort -u
}

# children_of PID...: the live processes whose parent is one of PID (the server's backends).
children_of() {
	local p ppid stat want=" $* "
	for p in /proc/[0-9]*; do
		IFS= read -r stat 2>/dev/null <"${p}/stat" || continue
		stat="${stat##*) }"
		ppid="$(cut -d' ' -f3 <<<"${stat}")"
		[[ "${want}" == *" ${ppid} "* ]] && alive "${p#/proc/}" && echo "${p#/proc/}"
	done
	return 0
}

mapfile -t pids < <(postmaster_pids)
if ((${#pids[@]} == 0)); then
	log "nothing was running in ${PG_DIR}"
else
	mapfile -t kids < <(children_of "${pids[@]}")
	log "stopping postgres (pid ${pids[*]})"
	# SIGINT is PostgreSQL's "fast" shutdown: abort transactions, disconnect clients, checkpoint.
	kill -INT "${pids[@]}" 2>/dev/null || true
	deadline=$((SECONDS + GRACE))
	while :; do
		remaining=()
		for pid in "${pids[@]}" "${kids[@]}"; do
			if alive "${pid}"; then remaining+=("${pid}"); fi
		done
		((${#remaining[@]})) || break
		if ((SECONDS >= deadline)); then
			log "postgres (pid ${remaining[*]}) did not stop within ${GRACE}s: SIGKILL"
			kill -KILL "${remaining[@]}" 2>/dev/null || true
			sleep 0.5
			for pid in "${remaining[@]}"; do
				if alive "${pid}"; then
					log "ERROR: postgres (pid ${pid}) is still running after SIGKILL"
					exit 1
				fi
			done
			rm -f "${DATA}/postmaster.pid"
			break
		fi
		sleep 0.1
	done
	# The postmaster outlives postgres-up.sh, so its parent (usually PID 1) reaps it; until then
	# it shows as <defunct> in pgrep. Give that a moment, so a `pgrep` right after sees nothing.
	reap_deadline=$((SECONDS + 3))
	for pid in "${pids[@]}"; do
		while [[ -e "/proc/${pid}" ]] && ((SECONDS < reap_deadline)); do sleep 0.1; done
	done
	log "stopped the server of ${DATA}"
fi

if ((PURGE)); then
	# Refuse to delete a directory that does not look like postgres-up.sh's.
	if [[ "${PG_DIR}" == "/" || ! (-f "${DATA}/PG_VERSION" || -f "${PG_DIR}/initdb.log" || -f "${PG_DIR}/postgres.log") ]]; then
		log "ERROR: ${PG_DIR} does not look like a hack/postgres-up.sh directory (no data/PG_VERSION, initdb.log or postgres.log): not deleting it"
		exit 1
	fi
	rm -rf -- "${PG_DIR}"
	log "deleted ${PG_DIR}"
fi

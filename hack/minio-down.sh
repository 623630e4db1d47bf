#!/usr/bin/env bash
# Stops the throwaway MinIO server started by hack/minio-up.sh.
#
# Usage: hack/minio-down.sh [--purge]
#   --purge   also delete MINIO_DIR (the bucket's objects, the log)
#
# Environment: MINIO_DIR [<repo>/.local/minio], MINIO_STOP_GRACE seconds between SIGTERM and
# SIGKILL [5]. Stops only the server of MINIO_DIR: the pid in MINIO_DIR/minio.pid, plus any minio
# process whose command line names MINIO_DIR (in case the pid file was lost). Exits 0 when
# nothing was running; non-zero if the server survives SIGKILL.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MINIO_DIR="${MINIO_DIR:-${REPO_ROOT}/.local/minio}"
GRACE="${MINIO_STOP_GRACE:-5}"
PURGE=0
for arg in "$@"; do
	case "${arg}" in
	--purge) PURGE=1 ;;
	-h | --help)
		sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "minio-down: unknown argument ${arg} (usage: hack/minio-down.sh [--purge])" >&2
		exit 2
		;;
	esac
done

log() { echo "minio-down: $*" >&2; }

if [[ ! -d "${MINIO_DIR}" ]]; then
	log "nothing to do: ${MINIO_DIR} does not exist"
	exit 0
fi
MINIO_DIR="$(cd "${MINIO_DIR}" && pwd)"
PID_FILE="${MINIO_DIR}/minio.pid"

if command -v flock >/dev/null 2>&1; then
	exec 9>"${MINIO_DIR}/.lock"
	flock -w 120 9 || {
		log "could not lock ${MINIO_DIR}/.lock: another minio-up/minio-down is running"
		exit 1
	}
fi

# alive PID: PID is a live (non-zombie) minio process.
alive() {
	local pid="$1" arg0="" stat=""
	[[ "${pid}" =~ ^[0-9]+$ && -r "/proc/${pid}/cmdline" ]] || return 1
	IFS= read -r -d '' arg0 2>/dev/null <"/proc/${pid}/cmdline" || [[ -n "${arg0}" ]] || return 1
	[[ "${arg0##*/}" == minio ]] || return 1
	IFS= read -r stat 2>/dev/null <"/proc/${pid}/stat" || return 1
	stat="${stat##*) }"
	[[ "${stat:0:1}" != "Z" && "${stat:0:1}" != "X" ]]
}

minio_pids() {
	local pid p
	local -a args
	{
		if [[ -f "${PID_FILE}" ]]; then
			pid="$(<"${PID_FILE}")" || true
			if alive "${pid}"; then echo "${pid}"; fi
		fi
		for p in /proc/[0-9]*; do
			pid="${p#/proc/}"
			alive "${pid}" || continue
			mapfile -d '' args 2>/dev/null <"${p}/cmdline" || continue
			if [[ "${args[*]}" == *"${MINIO_DIR}/"* ]]; then echo "${pid}"; fi
		done
	} | sort -u
}

mapfile -t pids < <(minio_pids)
if ((${#pids[@]} == 0)); then
	log "nothing was running in ${MINIO_DIR}"
else
	log "stopping minio (pid ${pids[*]})"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	deadline=$((SECONDS + GRACE))
	while :; do
		remaining=()
		for pid in "${pids[@]}"; do
			if alive "${pid}"; then remaining+=("${pid}"); fi
		done
		((${#remaining[@]})) || break
		if ((SECONDS >= deadline)); then
			log "minio (pid ${remaining[*]}) ignored SIGTERM for ${GRACE}s: SIGKILL"
			kill -KILL "${remaining[@]}" 2>/dev/null || true
			sleep 0.5
			for pid in "${remaining[@]}"; do
				if alive "${pid}"; then
					log "ERROR: minio (pid ${pid}) is still running after SIGKILL"
					exit 1
				fi
			done
			break
		fi
		sleep 0.1
	done
	# The server outlives minio-up.sh, so its parent (usually PID 1) reaps it; until then it
	# shows as <defunct> in pgrep. Give that a moment, so a `pgrep` right after sees nothing.
	reap_deadline=$((SECONDS + 3))
	for pid in "${pids[@]}"; do
		while [[ -e "/proc/${pid}" ]] && ((SECONDS < reap_deadline)); do sleep 0.1; done
	done
	rm -f "${PID_FILE}"
	log "stopped the server of ${MINIO_DIR}"
fi

if ((PURGE)); then
	# Refuse to delete a directory that does not look like minio-up.sh's.
	if [[ "${MINIO_DIR}" == "/" || ! (-d "${MINIO_DIR}/data" || -f "${MINIO_DIR}/minio.log") ]]; then
		log "ERROR: ${MINIO_DIR} does not look like a hack/minio-up.sh directory (no data/ or minio.log): not deleting it"
		exit 1
	fi
	rm -rf -- "${MINIO_DIR}"
	log "deleted ${MINIO_DIR}"
fi

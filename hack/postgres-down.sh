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
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
PG_DIR="${PG_DIR:-${REPO_ROOT}/.local/postgres}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_OS_USER="${PG_OS_USER:-postgres}"
GRACE="${PG_STOP_GRACE:-10}"
util::down_args "$@"
util::state_dir PG_DIR
DATA="${PG_DIR}/data"

if ! proc::lock "${PG_DIR}/.lock"; then
	log::info "could not lock ${PG_DIR}/.lock: another postgres-up/postgres-down is running"
	exit 1
fi

# children_of PID...: the live postgres processes whose parent is one of PID (the server's
# backends and auxiliary processes).
children_of() {
	local p ppid stat want=" $* "
	for p in /proc/[0-9]*; do
		IFS= read -r stat 2>/dev/null <"${p}/stat" || continue
		stat="${stat##*) }"
		ppid="$(cut -d' ' -f3 <<<"${stat}")"
		[[ "${want}" == *" ${ppid} "* ]] && proc::alive "${p#/proc/}" postgres && echo "${p#/proc/}"
	done
	return 0
}

# The server of DATA: the pid in postmaster.pid, plus any postgres process started with
# `-D DATA` (in case postmaster.pid was lost).
mapfile -t pids < <(proc::find "${DATA}/postmaster.pid" " ${DATA} " postgres)
if ((${#pids[@]} == 0)); then
	log::info "nothing was running in ${PG_DIR}"
else
	mapfile -t kids < <(children_of "${pids[@]}")
	# SIGINT is PostgreSQL's "fast" shutdown: abort transactions, disconnect clients, checkpoint.
	# Its children stop by themselves; they are only waited for.
	proc::stop INT "${GRACE}" "${pids[@]/%/:postgres}" "${kids[@]/%/:postgres:wait}" || exit 1
	# After a SIGKILL the server could not remove it.
	rm -f "${DATA}/postmaster.pid"
	log::info "stopped the server of ${DATA}"
fi

if ((PURGE)); then
	util::purge "${PG_DIR}" "a hack/postgres-up.sh directory (no data/PG_VERSION, initdb.log or postgres.log)" \
		data/PG_VERSION initdb.log postgres.log || exit 1
fi

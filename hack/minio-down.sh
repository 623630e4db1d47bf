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
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
MINIO_DIR="${MINIO_DIR:-${REPO_ROOT}/.local/minio}"
GRACE="${MINIO_STOP_GRACE:-5}"
util::down_args "$@"
util::state_dir MINIO_DIR
PID_FILE="${MINIO_DIR}/minio.pid"

if ! proc::lock "${MINIO_DIR}/.lock"; then
	log::info "could not lock ${MINIO_DIR}/.lock: another minio-up/minio-down is running"
	exit 1
fi

mapfile -t pids < <(proc::find "${PID_FILE}" "${MINIO_DIR}/" minio)
if ((${#pids[@]} == 0)); then
	log::info "nothing was running in ${MINIO_DIR}"
else
	proc::stop TERM "${GRACE}" "${pids[@]/%/:minio}" || exit 1
	rm -f "${PID_FILE}"
	log::info "stopped the server of ${MINIO_DIR}"
fi

if ((PURGE)); then
	util::purge "${MINIO_DIR}" "a hack/minio-up.sh directory (no data/ or minio.log)" data minio.log || exit 1
fi

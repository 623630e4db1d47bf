#!/usr/bin/env bash
# Starts a throwaway MinIO server (S3-compatible) for the s3:// backend tests: one drive in
# MINIO_DIR/data, the S3 API on 127.0.0.1:MINIO_PORT only, the web console off, and a bucket
# MINIO_BUCKET created through the S3 API (a SigV4-signed PUT Bucket by curl --aws-sigv4).
#
# Usage: hack/minio-up.sh           (stop it with hack/minio-down.sh [--purge])
#
# Environment (defaults in brackets):
#   MINIO_DIR            data (MINIO_DIR/data), log, pid file     [<repo>/.local/minio]
#   MINIO_PORT           S3 API port on 127.0.0.1                  [29000]
#   MINIO_CONSOLE_PORT   console port on 127.0.0.1 (the console is disabled; MinIO still wants
#                        an address for it, and would otherwise pick a random port on all
#                        interfaces)                               [MINIO_PORT+1]
#   MINIO_ROOT_USER      the root access key (>= 3 characters)     [pulumi]
#   MINIO_ROOT_PASSWORD  the root secret key (>= 8 characters)     [pulumi-s3-secret]
#   MINIO_BUCKET         bucket to create                          [pulumi-state]
#   MINIO_REGION         region the server reports and signs with  [us-east-1]
#   BIN_DIR              where bin/minio is; built there by hack/build-minio.sh if missing [<repo>/bin]
#   MINIO_TIMEOUT        seconds to wait for the server to start, and again for it to answer
#                        the bucket requests other than 503 (initializing) [60]
#
# Idempotent: when the server is already up it only makes sure the bucket exists.
# Prints, last, the environment the backend tests need:
#   export PULUMI_TEST_S3_URL='s3://BUCKET?endpoint=http://127.0.0.1:PORT&region=REGION&use_path_style=true'
#   export PULUMI_TEST_S3_ACCESS_KEY_ID=... PULUMI_TEST_S3_SECRET_ACCESS_KEY=...
# (the tests hand the keys to the pulumi CLI as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
MINIO_DIR="${MINIO_DIR:-${REPO_ROOT}/.local/minio}"
MINIO_PORT="${MINIO_PORT:-29000}"
MINIO_CONSOLE_PORT="${MINIO_CONSOLE_PORT:-$((MINIO_PORT + 1))}"
MINIO_ROOT_USER="${MINIO_ROOT_USER:-pulumi}"
MINIO_ROOT_PASSWORD="${MINIO_ROOT_PASSWORD:-pulumi-s3-secret}"
MINIO_BUCKET="${MINIO_BUCKET:-pulumi-state}"
MINIO_REGION="${MINIO_REGION:-us-east-1}"
BIN_DIR="${BIN_DIR:-${REPO_ROOT}/bin}"
TIMEOUT="${MINIO_TIMEOUT:-60}"

[[ "${MINIO_PORT}" =~ ^[0-9]+$ && "${MINIO_CONSOLE_PORT}" =~ ^[0-9]+$ ]] || log::die "MINIO_PORT and MINIO_CONSOLE_PORT must be port numbers"
((${#MINIO_ROOT_USER} >= 3)) || log::die "MINIO_ROOT_USER must have at least 3 characters"
((${#MINIO_ROOT_PASSWORD} >= 8)) || log::die "MINIO_ROOT_PASSWORD must have at least 8 characters"
# S3 bucket naming rules (the subset that matters here).
[[ "${MINIO_BUCKET}" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] || log::die "MINIO_BUCKET=${MINIO_BUCKET} is not a valid S3 bucket name"
# The credentials are printed in single quotes (for eval) and written into a curl config
# ("user = \"USER:PASSWORD\"").
[[ "${MINIO_ROOT_USER}${MINIO_ROOT_PASSWORD}" != *[\'\"\\]* && "${MINIO_ROOT_USER}" != *:* ]] ||
	log::die "MINIO_ROOT_USER/MINIO_ROOT_PASSWORD must not contain quotes or backslashes, MINIO_ROOT_USER no colon"
command -v curl >/dev/null 2>&1 || log::die "curl is not on PATH (apt-get install curl)"

MINIO="${BIN_DIR}/minio"
if [[ ! -x "${MINIO}" ]]; then
	log::info "no ${MINIO}: building it (hack/build-minio.sh, a few minutes when cold)"
	"${REPO_ROOT}/hack/build-minio.sh" "${BIN_DIR}" >&2
fi

mkdir -p "${MINIO_DIR}/data" "${MINIO_DIR}/certs"
MINIO_DIR="$(cd "${MINIO_DIR}" && pwd)"
chmod 700 "${MINIO_DIR}"
DATA="${MINIO_DIR}/data"
LOG_FILE="${MINIO_DIR}/minio.log"
PID_FILE="${MINIO_DIR}/minio.pid"
ENDPOINT="http://127.0.0.1:${MINIO_PORT}"

# One minio-up/minio-down at a time per MINIO_DIR. The server must not inherit the lock's fd.
proc::lock "${MINIO_DIR}/.lock" || log::die "could not lock ${MINIO_DIR}/.lock: another minio-up/minio-down is running"

# Ready for S3 requests: /minio/health/cluster answers 200 only once the object layer, the bucket
# metadata and IAM are initialized. (/minio/health/ready answers 200 before that, and a signed
# request sent then gets 503 "Server not initialized".)
ready() { curl -fsS -o /dev/null --max-time 2 "${ENDPOINT}/minio/health/cluster" 2>/dev/null; }

# s3 METHOD PATH: a SigV4-signed S3 request with the root credentials; prints the HTTP status.
# The credentials go to curl through a config on stdin, keeping them off its command line.
s3() {
	printf 'user = "%s:%s"\n' "${MINIO_ROOT_USER}" "${MINIO_ROOT_PASSWORD}" |
		curl -sS -K - -o "${MINIO_DIR}/last-response.xml" -w '%{http_code}' --max-time 10 \
			--aws-sigv4 "aws:amz:${MINIO_REGION}:s3" -X "$1" "${ENDPOINT}$2"
}

if pid="$(proc::pid_from_file "${PID_FILE}" minio)"; then
	ready || log::die "minio (pid ${pid}) is running but ${ENDPOINT} does not answer: see ${LOG_FILE}, or stop it with hack/minio-down.sh"
	log::info "already running (pid ${pid}, ${ENDPOINT})"
else
	for port in "${MINIO_PORT}" "${MINIO_CONSOLE_PORT}"; do
		if proc::port_in_use "${port}"; then
			log::die "port ${port} on 127.0.0.1 is in use by another program: set MINIO_PORT / MINIO_CONSOLE_PORT"
		fi
	done
	start=${SECONDS}
	# MINIO_UPDATE=off: no update check against dl.min.io at startup (this machine only ever
	# talks to 127.0.0.0/8). MINIO_BROWSER=off: no web console. The root credentials reach the
	# server through its environment, never its command line.
	proc::start "${LOG_FILE}" "${PID_FILE}" env -i PATH="${PATH}" HOME="${MINIO_DIR}" \
		MINIO_ROOT_USER="${MINIO_ROOT_USER}" MINIO_ROOT_PASSWORD="${MINIO_ROOT_PASSWORD}" \
		MINIO_UPDATE=off MINIO_BROWSER=off MINIO_SITE_REGION="${MINIO_REGION}" \
		"${MINIO}" server --quiet --anonymous \
		--address "127.0.0.1:${MINIO_PORT}" --console-address "127.0.0.1:${MINIO_CONSOLE_PORT}" \
		--certs-dir "${MINIO_DIR}/certs" "${DATA}"
	pid="${PROC_PID}"
	rc=0
	proc::wait_until "${pid}" "${TIMEOUT}" ready || rc=$?
	case "${rc}" in
	1) log::die "minio exited at startup: see ${LOG_FILE}: $(tail -n 5 "${LOG_FILE}")" ;;
	2)
		kill -TERM "${pid}" 2>/dev/null || true
		log::die "minio did not become ready on ${ENDPOINT} within ${TIMEOUT}s (stopped it): see ${LOG_FILE}"
		;;
	esac
	log::info "started (pid ${pid}, ${ENDPOINT}, $((SECONDS - start))s)"
fi

# s3_settled METHOD PATH: s3, asked again every 0.2 s while the server answers 503 (still
# initializing, or busy), for at most TIMEOUT seconds; prints the last HTTP status.
s3_settled() {
	local code deadline=$((SECONDS + TIMEOUT))
	while code="$(s3 "$1" "$2")" && [[ "${code}" == 503 ]] && ((SECONDS < deadline)); do
		sleep 0.2
	done
	[[ -n "${code}" ]] && echo "${code}"
}

# The bucket: HEAD says whether it exists; PUT creates it (200), a concurrent creator's 409 is fine.
code="$(s3_settled HEAD "/${MINIO_BUCKET}")" || log::die "cannot reach ${ENDPOINT}"
case "${code}" in
200) ;;
404)
	code="$(s3_settled PUT "/${MINIO_BUCKET}")" || log::die "cannot reach ${ENDPOINT}"
	[[ "${code}" == 200 || "${code}" == 409 ]] ||
		log::die "create bucket ${MINIO_BUCKET}: HTTP ${code}: $(cat "${MINIO_DIR}/last-response.xml")"
	log::info "created bucket ${MINIO_BUCKET}"
	;;
403) log::die "bucket ${MINIO_BUCKET}: HTTP 403: the server does not accept MINIO_ROOT_USER/MINIO_ROOT_PASSWORD (was MINIO_DIR created with other credentials? hack/minio-down.sh --purge)" ;;
*) log::die "bucket ${MINIO_BUCKET}: HTTP ${code}: $(cat "${MINIO_DIR}/last-response.xml" 2>/dev/null)" ;;
esac
rm -f "${MINIO_DIR}/last-response.xml"

log::info "ready: bucket ${MINIO_BUCKET} at ${ENDPOINT} (log ${LOG_FILE})"
echo "export PULUMI_TEST_S3_URL='s3://${MINIO_BUCKET}?endpoint=${ENDPOINT}&region=${MINIO_REGION}&use_path_style=true'"
echo "export PULUMI_TEST_S3_ACCESS_KEY_ID='${MINIO_ROOT_USER}' PULUMI_TEST_S3_SECRET_ACCESS_KEY='${MINIO_ROOT_PASSWORD}'"

#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 server of its own (not Debian's "main" cluster) for the
# postgres:// backend tests: a fresh initdb in PG_DIR, listening on 127.0.0.1:PG_PORT only, its
# unix socket in PG_DIR, a login role `pulumi` (password auth, scram-sha-256) owning a database
# `pulumi`. The pulumi CLI's postgres backend creates its table (pulumi_state) itself on first use.
#
# Usage: hack/postgres-up.sh           (stop it with hack/postgres-down.sh [--purge])
#
# Environment (defaults in brackets):
#   PG_DIR       data (PG_DIR/data), socket, log (PG_DIR/postgres.log)  [<repo>/.local/postgres]
#   PG_PORT      TCP port                                               [25432]
#   PG_LISTEN    addresses to listen on, comma-separated               [127.0.0.1]
#   PG_HBA_CIDR  another network allowed to log in with the password,
#                e.g. a real node's pod network (empty: 127.0.0.1 only) []
#   PG_USER      login role and database name                          [pulumi]
#   PG_PASSWORD  its password                                          [pulumi-pg-secret]
#   PG_BIN       PostgreSQL's programs                                 [/usr/lib/postgresql/15/bin]
#   PG_OS_USER   the system user the server runs as when this script runs as root
#                (PostgreSQL refuses to run as root)                   [postgres]
#   PG_TIMEOUT   seconds to wait for the server to start               [60]
#
# Idempotent: when the server is already up it only makes sure the role and database exist.
# Prints, last, `export PULUMI_TEST_POSTGRES_URL=postgres://USER:PASSWORD@127.0.0.1:PORT/DB?sslmode=disable`
# (the server has no TLS; sslmode=disable keeps lib/pq, the CLI's driver, from trying it).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
PG_DIR="${PG_DIR:-${REPO_ROOT}/.local/postgres}"
PG_PORT="${PG_PORT:-25432}"
PG_LISTEN="${PG_LISTEN:-127.0.0.1}"
PG_HBA_CIDR="${PG_HBA_CIDR:-}"
[[ "${PG_LISTEN}" =~ ^[0-9.,]+$ ]] || log::die "PG_LISTEN=${PG_LISTEN}: want IPv4 addresses, comma-separated"
[[ -z "${PG_HBA_CIDR}" || "${PG_HBA_CIDR}" =~ ^[0-9.]+/[0-9]+$ ]] || log::die "PG_HBA_CIDR=${PG_HBA_CIDR}: want an IPv4 network, e.g. 10.88.0.0/24"
PG_USER="${PG_USER:-pulumi}"
PG_PASSWORD="${PG_PASSWORD:-pulumi-pg-secret}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PG_OS_USER="${PG_OS_USER:-postgres}"
PG_TIMEOUT="${PG_TIMEOUT:-60}"

[[ "${PG_PORT}" =~ ^[0-9]+$ ]] || log::die "PG_PORT=${PG_PORT} is not a port number"
[[ "${PG_USER}" =~ ^[a-z_][a-z0-9_]*$ ]] || log::die "PG_USER=${PG_USER} must be a plain lower-case SQL identifier"

if [[ ! -x "${PG_BIN}/initdb" ]]; then
	[[ "$(id -u)" == 0 ]] || log::die "no PostgreSQL at ${PG_BIN}: install postgresql-15 (apt-get install postgresql-15) or set PG_BIN"
	log::info "installing postgresql-15 from Debian (no ${PG_BIN}/initdb)"
	# Only the programs are wanted: no "main" cluster started on port 5432.
	mkdir -p /etc/postgresql-common
	grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf ||
		echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
	[[ -x "${PG_BIN}/initdb" ]] || log::die "apt-get installed postgresql-15, but there is still no ${PG_BIN}/initdb"
fi

mkdir -p "${PG_DIR}"
PG_DIR="$(cd "${PG_DIR}" && pwd)"
DATA="${PG_DIR}/data"
LOG_FILE="${PG_DIR}/postgres.log"
# A unix socket path is limited to 107 bytes.
((${#PG_DIR} + 20 < 107)) || log::die "PG_DIR=${PG_DIR} is too long for a unix socket path: choose a shorter one"

# as_server CMD...: run CMD as the user the server runs as.
if [[ "$(id -u)" == 0 ]]; then
	id "${PG_OS_USER}" >/dev/null 2>&1 || log::die "PostgreSQL refuses to run as root and there is no user ${PG_OS_USER} (set PG_OS_USER)"
	chown "${PG_OS_USER}:" "${PG_DIR}"
	chmod 700 "${PG_DIR}"
	runuser -u "${PG_OS_USER}" -- test -w "${PG_DIR}" ||
		log::die "user ${PG_OS_USER} cannot reach ${PG_DIR} (a parent directory is not searchable by it): choose another PG_DIR"
	as_server() { runuser -u "${PG_OS_USER}" -- "$@"; }
else
	as_server() { "$@"; }
fi

# One postgres-up/postgres-down at a time per PG_DIR. The server must not inherit the lock's fd.
proc::lock "${PG_DIR}/.lock" || log::die "could not lock ${PG_DIR}/.lock: another postgres-up/postgres-down is running"

if [[ ! -f "${DATA}/PG_VERSION" ]]; then
	[[ ! -e "${DATA}" ]] || [[ -z "$(ls -A "${DATA}")" ]] || log::die "${DATA} exists but is no PostgreSQL data directory: remove it or choose another PG_DIR"
	log::info "initdb ${DATA}"
	# Superuser `postgres` over the unix socket only (trust: the socket's directory is private to
	# the server's user); TCP on 127.0.0.1 needs a password.
	as_server "${PG_BIN}/initdb" -D "${DATA}" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host=scram-sha-256 >"${PG_DIR}/initdb.log" 2>&1 ||
		log::die "initdb failed: see ${PG_DIR}/initdb.log: $(tail -n 3 "${PG_DIR}/initdb.log")"
	# A throwaway test server: durability is not wanted, speed is.
	cat >>"${DATA}/postgresql.conf" <<-EOF

		# hack/postgres-up.sh: throwaway test server
		listen_addresses = '127.0.0.1'
		unix_socket_directories = '${PG_DIR}'
		fsync = off
		synchronous_commit = off
		full_page_writes = off
		max_connections = 100
		shared_buffers = 32MB
		logging_collector = off
	EOF
fi

# Another network's password logins (scram-sha-256, as initdb's own host lines), before the start.
if [[ -n "${PG_HBA_CIDR}" ]] && ! grep -qF "host all all ${PG_HBA_CIDR} scram-sha-256" "${DATA}/pg_hba.conf"; then
	echo "host all all ${PG_HBA_CIDR} scram-sha-256" | as_server tee -a "${DATA}/pg_hba.conf" >/dev/null
fi

# The port and the addresses are passed on each start, so that they may change between runs of
# the same PG_DIR.
running_port() {
	# postmaster.pid, line 4: the port the running server listens on.
	[[ -f "${DATA}/postmaster.pid" ]] && as_server "${PG_BIN}/pg_ctl" -D "${DATA}" status >/dev/null 2>&1 &&
		sed -n 4p "${DATA}/postmaster.pid"
}

if port="$(running_port)"; then
	[[ "${port}" == "${PG_PORT}" ]] || log::die "a server of ${DATA} is already running on port ${port}, not ${PG_PORT}: stop it with hack/postgres-down.sh"
	log::info "already running (pid $(head -n 1 "${DATA}/postmaster.pid"), 127.0.0.1:${PG_PORT})"
else
	if proc::port_in_use "${PG_PORT}"; then
		log::die "port ${PG_PORT} on 127.0.0.1 is in use by another program: set PG_PORT"
	fi
	start=${SECONDS}
	touch "${LOG_FILE}"
	[[ "$(id -u)" != 0 ]] || chown "${PG_OS_USER}:" "${LOG_FILE}"
	as_server "${PG_BIN}/pg_ctl" -D "${DATA}" -l "${LOG_FILE}" -w -t "${PG_TIMEOUT}" \
		-o "-p ${PG_PORT} -c listen_addresses=${PG_LISTEN}" start >/dev/null 9>&- ||
		log::die "the server did not start: see ${LOG_FILE}: $(tail -n 5 "${LOG_FILE}")"
	log::info "started (pid $(head -n 1 "${DATA}/postmaster.pid"), ${PG_LISTEN} port ${PG_PORT}, $((SECONDS - start))s)"
fi

# The role and database, (re)set on every run so that a changed PG_PASSWORD takes effect. The SQL
# goes through stdin, keeping the password off every command line.
sql_literal() { printf "'%s'" "${1//\'/\'\'}"; }
as_server "${PG_BIN}/psql" -X -q -v ON_ERROR_STOP=1 -h "${PG_DIR}" -p "${PG_PORT}" -U postgres -d postgres >/dev/null <<EOF ||
SELECT format('CREATE ROLE %I LOGIN', '${PG_USER}') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${PG_USER}')\gexec
ALTER ROLE ${PG_USER} LOGIN PASSWORD $(sql_literal "${PG_PASSWORD}");
SELECT format('CREATE DATABASE %I OWNER %I', '${PG_USER}', '${PG_USER}') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '${PG_USER}')\gexec
EOF
	log::die "could not create role and database ${PG_USER}: see ${LOG_FILE}"

# Check what the tests will use: a password login over TCP.
PGPASSWORD="${PG_PASSWORD}" "${PG_BIN}/psql" -X -q -w -h 127.0.0.1 -p "${PG_PORT}" -U "${PG_USER}" -d "${PG_USER}" \
	-c 'SELECT 1' >/dev/null || log::die "cannot log in as ${PG_USER} on 127.0.0.1:${PG_PORT}"

# urlenc S: S percent-encoded for the userinfo of a URL (all but RFC 3986 unreserved characters).
urlenc() {
	local LC_ALL=C s="$1" out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c="${s:i:1}"
		case "${c}" in
		[A-Za-z0-9._~-]) out+="${c}" ;;
		*) out+="$(printf '%%%02X' "'${c}")" ;;
		esac
	done
	printf '%s' "${out}"
}
log::info "ready: database ${PG_USER} on 127.0.0.1:${PG_PORT} (log ${LOG_FILE})"
echo "export PULUMI_TEST_POSTGRES_URL='postgres://${PG_USER}:$(urlenc "${PG_PASSWORD}")@127.0.0.1:${PG_PORT}/${PG_USER}?sslmode=disable'"

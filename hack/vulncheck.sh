#!/usr/bin/env bash
# `make vulncheck`: Go's vulnerability scanner, govulncheck, on every Go module that goes into
# what the project ships or runs (source mode: the root module, agent/ with the pinned CLI's main
# package, agent/protocol/, hack/bench/) and on the shipped binaries (binary mode:
# bin/pulumi-operator and bin/pulumi, which is also the engine host), offline, against a database
# made from a pinned copy of Go's vulnerability database. Fails when any scan finds a
# vulnerability that the code calls (govulncheck's "Your code is affected by ..."), unless
# hack/vulncheck-accepted.txt accepts it with a reason.
#
# The tools and the database, each pinned in a tools module:
#   govulncheck   hack/tools/govulncheck (golang.org/x/vuln), built into BIN
#   the database  hack/tools/vulndb: golang.org/x/vulndb at a pinned version, a module the Go
#                 module proxy serves, whose data/osv holds one OSV file per vulnerability; its
#                 own cmd/indexdb writes from them the layout `govulncheck -db file://DIR` reads
#                 (index/db.json, index/modules.json, index/vulns.json, ID/<id>.json). Made once
#                 per version into .local/vulndb/<version>/ and reused (seconds to make).
# The hack/tools modules other than these are not scanned: they build the local cluster and the
# tests' servers (etcd, kube-*, kwok, MinIO, helm, ...), which never leave the machine that runs
# the tests and serve only 127.0.0.1.
#
# hack/vulncheck-accepted.txt: one accepted vulnerability a line, "<ID> <reason>" (an ID such as
# GO-2026-1234, then why it cannot be fixed and why it does not matter here); # starts a
# comment. A line without a reason, and an ID that no scan finds any more, fail the check, so
# that the list holds only what is still needed.
#
# Usage: hack/vulncheck.sh [BIN]     (BIN defaults to <repo>/bin; it must hold the binaries that
#        `make build` writes). Needs jq. Writes each scan's JSON to .local/vulncheck/<name>.json.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
build::init "${1:-${REPO_ROOT}/bin}"
command -v jq >/dev/null 2>&1 || log::die "jq is not on PATH (Debian package jq)"
ACCEPTED="${REPO_ROOT}/hack/vulncheck-accepted.txt"
OUT="${REPO_ROOT}/.local/vulncheck"
mkdir -p "${OUT}"

# The tools, from their pinned modules.
build::go govulncheck hack/tools/govulncheck golang.org/x/vuln/cmd/govulncheck "-s -w" >&2
build::go indexdb hack/tools/vulndb golang.org/x/vulndb/cmd/indexdb "-s -w" >&2

# The database: golang.org/x/vulndb's data/osv at the pinned version, indexed by its own tool.
DB_VERSION="$(build::module_version hack/tools/vulndb golang.org/x/vulndb)"
DB="${REPO_ROOT}/.local/vulndb/${DB_VERSION}"
if [[ ! -f "${DB}/index/db.json" ]]; then
	src="$(cd hack/tools/vulndb && go mod download -json golang.org/x/vulndb | jq -r .Dir)"
	[[ -d "${src}/data/osv" ]] || log::die "golang.org/x/vulndb@${DB_VERSION} has no data/osv (${src})"
	rm -rf "${DB}.tmp" && mkdir -p "$(dirname "${DB}")"
	"${BUILD_DEST}/indexdb" -vulns "${src}/data/osv" -out "${DB}.tmp"
	[[ -f "${DB}.tmp/index/db.json" ]] || log::die "indexdb wrote no index/db.json"
	rm -rf "${DB}" && mv "${DB}.tmp" "${DB}"
	log::info "database of golang.org/x/vulndb@${DB_VERSION}: $(find "${DB}/ID" -name '*.json' | wc -l) entries in ${DB}"
fi

# The scans: NAME, the directory to run in, then govulncheck's arguments.
scans=(
	"root|.|./..."
	"agent|agent|./... github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
	"agent-protocol|agent/protocol|./..."
	"hack-bench|hack/bench|./..."
	"bin-pulumi-operator|.|-mode binary ${BUILD_DEST}/pulumi-operator"
	"bin-pulumi|.|-mode binary ${BUILD_DEST}/pulumi"
)

# The accepted IDs; a line without a reason is an error.
declare -A accepted=()
if [[ -f "${ACCEPTED}" ]]; then
	while read -r id reason; do
		[[ -z "${id}" || "${id}" == \#* ]] && continue
		[[ -n "${reason}" ]] || log::die "${ACCEPTED}: ${id} has no reason"
		accepted["${id}"]=1
	done <"${ACCEPTED}"
fi

status=0
declare -A seen=()
printf '%-22s %7s %9s %9s  %s\n' scan called imported required "called, not accepted" >&2
for scan in "${scans[@]}"; do
	IFS='|' read -r name dir args <<<"${scan}"
	# shellcheck disable=SC2086 # args is a list of words
	if ! (cd "${dir}" && nice "${BUILD_DEST}/govulncheck" -db "file://${DB}" -format json ${args}) >"${OUT}/${name}.json" 2>"${OUT}/${name}.err"; then
		cat "${OUT}/${name}.err" >&2
		log::error "${name}: govulncheck failed"
		status=1
		continue
	fi
	# Each vulnerability at the most precise level a finding reached: called (a trace down to a
	# function), imported (to a package), required (to a module only).
	levels="$(jq -rs '[.[] | select(.finding) | .finding
		| {osv, level: (if .trace[0].function then 3 elif .trace[0].package then 2 else 1 end)}]
		| group_by(.osv)[] | [.[0].osv, (map(.level) | max)] | @tsv' "${OUT}/${name}.json")"
	called=() imported=0 required=0 bad=()
	while read -r id level; do
		[[ -z "${id}" ]] && continue
		case "${level}" in
		3) called+=("${id}") ;;
		2) imported=$((imported + 1)) ;;
		1) required=$((required + 1)) ;;
		esac
	done <<<"${levels}"
	for id in "${called[@]}"; do
		seen["${id}"]=1
		[[ -n "${accepted[${id}]:-}" ]] || bad+=("${id}")
	done
	printf '%-22s %7d %9d %9d  %s\n' "${name}" "${#called[@]}" "${imported}" "${required}" "${bad[*]:-}" >&2
	if ((${#bad[@]} > 0)); then
		status=1
	fi
done
for id in "${!accepted[@]}"; do
	if [[ -z "${seen[${id}]:-}" ]]; then
		log::error "${ACCEPTED}: ${id} is called in no scan any more: remove it"
		status=1
	fi
done
if ((status != 0)); then
	log::error "called vulnerabilities found (details: ${BUILD_DEST}/govulncheck -db file://${DB} ./... in the module, or the JSON in ${OUT})"
	exit 1
fi
log::info "no called vulnerability (database golang.org/x/vulndb@${DB_VERSION})"

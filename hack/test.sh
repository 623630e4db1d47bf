#!/usr/bin/env bash
# The project's test command (`make test`): starts a local simulated cluster of its own
# (.local/test-cluster, ports apart from `make cluster`'s), a PostgreSQL and a MinIO server, runs
# every Go test against them and the pinned pulumi CLI, stops them all, and prints every skipped
# test with its reason.
#
# Usage: hack/test.sh [go test args...]   (default ./...)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

export CLUSTER_DIR="${REPO_ROOT}/.local/test-cluster"
# Every port a script of ours listens on is below Linux's range of ephemeral ports
# (net.ipv4.ip_local_port_range, 32768-60999 by default): a port in that range can be held by
# an outgoing connection, or its TIME_WAIT, at the moment a server starts, and the server then
# fails to bind ("Address already in use").
export CLUSTER_ETCD_PORT=24790 CLUSTER_ETCD_PEER_PORT=24800 CLUSTER_APISERVER_PORT=24443
export CLUSTER_CONTROLLER_MANAGER_PORT=24257 CLUSTER_SCHEDULER_PORT=24259 CLUSTER_KWOK_PORT=24250

# PostgreSQL and MinIO for the postgres:// and s3:// backend tests (stack/backend_test.go), on
# ports apart from the defaults of hack/postgres-up.sh / hack/minio-up.sh (25432, 29000-29001).
export PG_DIR="${REPO_ROOT}/.local/test-postgres" PG_PORT=25442
export MINIO_DIR="${REPO_ROOT}/.local/test-minio" MINIO_PORT=29010 MINIO_CONSOLE_PORT=29011

teardown() {
	hack/cluster-down.sh --purge >/dev/null 2>&1 || true
	hack/postgres-down.sh --purge >/dev/null 2>&1 || true
	hack/minio-down.sh --purge >/dev/null 2>&1 || true
}
test_start=$(date +%s)
teardown
trap teardown EXIT
hack/cluster-up.sh
# Each prints `export PULUMI_TEST_...=...`; assigned first so that set -e sees a failure
# (eval "$(cmd)" would hide it).
backend_env="$(hack/postgres-up.sh)"
eval "${backend_env}"
backend_env="$(hack/minio-up.sh)"
eval "${backend_env}"

export PULUMI_OPERATOR_TEST_KUBECONFIG="${CLUSTER_DIR}/kubeconfig"
export PULUMI_OPERATOR_PULUMI="${REPO_ROOT}/bin/pulumi"
log="${REPO_ROOT}/.local/test.log"
mkdir -p "$(dirname "${log}")"

# The default (and ./..., what `make test` passes) is every package but test/e2e/realnode: its tests
# need a real node and run under `make e2e-real` (hack/e2e-real.sh), which starts one.
if [[ $# -eq 0 || "$*" == "./..." ]]; then
	mapfile -t pkgs < <(go list ./... | grep -v '/e2e/realnode$')
	set -- "${pkgs[@]}"
	all=1
fi
status=0
go test -count=1 -timeout 30m -v "$@" >"${log}" 2>&1 || status=$?
# The engine host and its protocol are in the agent module and its protocol module (Makefile
# build), which ./... does not reach; built with the CLI's flags (-trimpath, no cgo) so that it
# reuses the CLI's packages.
if [[ -n "${all:-}" ]]; then
	(cd agent && CGO_ENABLED=0 go test -trimpath -count=1 -v ./...) >>"${log}" 2>&1 || status=$?
	(cd agent/protocol && go test -count=1 -v ./...) >>"${log}" 2>&1 || status=$?
	# The benchmark and the soak are a module of their own (hack/bench/go.mod), which ./... does
	# not reach either.
	(cd hack/bench && go test -count=1 -v ./...) >>"${log}" 2>&1 || status=$?
fi
# Package results and failures in full; passing test lines only as a count.
grep -E '^(ok|FAIL|---|panic:|\s+\S+_test\.go:[0-9]+:)|^\s+--- ' "${log}" | grep -v -- '--- PASS' || true

passed=$(grep -cE '^\s*--- PASS' "${log}" || true)
failed=$(grep -cE '^\s*--- FAIL' "${log}" || true)
skipped=$(grep -cE '^\s*--- SKIP' "${log}" || true)
if [[ "${skipped}" -gt 0 ]]; then
	echo
	echo "================ SKIPPED (${skipped}) ================"
	grep -E '^\s*--- SKIP|_test\.go:[0-9]+: SKIP' "${log}" || true
	echo "======================================================"
fi
if grep -q '^FAIL' "${log}" && [[ "${failed}" -eq 0 ]]; then
	failed=1 # a package that failed to build or panicked outside a test
fi
echo
echo "full log: ${log}"
# CI_START (epoch seconds, set by .ci/run) measures the whole CI run, tool builds included.
if [[ -n "${CI_START:-}" ]]; then
	echo "took $(($(date +%s) - CI_START))s since .ci/run started"
else
	echo "took $(($(date +%s) - test_start))s"
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit "${status}"

#!/usr/bin/env bash
# `make bench`: starts a local simulated cluster of its own (.local/bench-cluster, ports apart
# from `make cluster`'s and `make test`'s), runs hack/bench against it with the operator built
# by `make build` and the pinned pulumi CLI, and stops and purges the cluster. Prints a table of
# every figure against its target; writes .local/bench/results.json and docs/benchmarks.md.
# Most of a run is creating the 1000 idle objects; docs/benchmarks.md says how long the last run
# took. When an earlier run's results are there, the doc shows how far apart the two runs are
# (--previous). The bench is a module of its own (hack/bench/go.mod), built from there.
#
# Usage: hack/bench/run.sh [bench flags...]   (e.g. --phases latency,drift,change --samples 7;
#                                              `cd hack/bench && go run . -h` lists them)
# Exit status: 0 the run finished (whatever the figures say), 1 something broke, 3 SKIP: the
# Kubernetes provider plugin is not installed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${REPO_ROOT}"

export CLUSTER_DIR="${REPO_ROOT}/.local/bench-cluster"
export CLUSTER_ETCD_PORT=63790 CLUSTER_ETCD_PEER_PORT=63800 CLUSTER_APISERVER_PORT=61443
export CLUSTER_CONTROLLER_MANAGER_PORT=61257 CLUSTER_SCHEDULER_PORT=61259 CLUSTER_KWOK_PORT=61250
OUT="${BENCH_OUT:-${REPO_ROOT}/.local/bench}" # make bench-scale: .local/bench-scale
mkdir -p "${OUT}"

go build -C hack/bench -o "${OUT}/bench" .
status=0
"${OUT}/bench" --preflight || status=$?
if [[ "${status}" -ne 0 ]]; then
	exit "${status}" # 3: SKIP, the reason is printed
fi

# The postgres phase measures figures 1 and 5 again on a PostgreSQL backend of its own.
# Its port is below the ephemeral range, as hack/test.sh says why.
export PG_DIR="${REPO_ROOT}/.local/bench-postgres" PG_PORT=25452
teardown() {
	hack/cluster-down.sh --purge >/dev/null 2>&1 || true
	hack/postgres-down.sh --purge >/dev/null 2>&1 || true
}
teardown
trap teardown EXIT
pg_env="$(hack/postgres-up.sh)"
eval "${pg_env}"
# A cluster-up right after stopping a busy cluster can fail (etcd exiting at start, nothing
# logged); one more attempt after a clean stop gets past it.
if ! hack/cluster-up.sh; then
	echo "bench: cluster-up failed; stopping what is left and trying once more" >&2
	teardown
	sleep 3
	hack/cluster-up.sh
fi

# BENCH_PREVIOUS: the results.json to compare with (make bench-upgrade: the previous release's
# run); by default this directory's last run.
previous=()
if [[ -n "${BENCH_PREVIOUS:-}" ]]; then
	previous=(--previous "${BENCH_PREVIOUS}")
elif [[ -f "${OUT}/results.json" ]]; then
	cp "${OUT}/results.json" "${OUT}/previous-results.json"
	previous=(--previous "${OUT}/previous-results.json")
fi
# BENCH_BIN: the directory of the binaries to measure (pulumi-operator, pulumi and the engine
# host beside it, pulumi-home/ with the plugins); make bench-upgrade points it at the previous
# release's. BENCH_DOCS: the doc to write ("" for none).
BIN_DIR="${BENCH_BIN:-${REPO_ROOT}/bin}"
"${OUT}/bench" "${previous[@]}" --repo "${REPO_ROOT}" --kubeconfig "${CLUSTER_DIR}/kubeconfig" --cluster-dir "${CLUSTER_DIR}" \
	--operator "${BIN_DIR}/pulumi-operator" --pulumi "${BIN_DIR}/pulumi" --out "${OUT}" \
	--postgres-url "${PULUMI_TEST_POSTGRES_URL}" --docs "${BENCH_DOCS-${REPO_ROOT}/docs/benchmarks.md}" "$@" 2>&1 | tee "${OUT}/bench.log"
exit "${PIPESTATUS[0]}"

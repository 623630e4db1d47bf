#!/usr/bin/env bash
# Runs the in-process engine experiment (README.md): starts a local simulated cluster of its own
# with hack/cluster-up.sh (CLUSTER_DIR <out>/cluster, the same ports as `make test`'s cluster, so
# never run both at once), builds this module, runs `inprocess-engine bench` against it, prints
# the summary table (summarize.py) and stops and purges the cluster on exit. Each run starts from
# empty state and work directories (the previous cluster is gone, so its stacks would be stale).
#
# Usage: hack/experiments/inprocess-engine/run.sh [bench flags...]
#        (default: -warmup 1 -samples 5 -prefix m; later flags win, e.g. -samples 3 or -only B)
# Environment: INPROC_OUT output directory [<repo>/.local/inprocess-engine];
#              INPROC_TIMEOUT seconds the bench may take before it is killed [900].
# Needs: make tools and make plugins (bin/pulumi, bin/pulumi-home with the Kubernetes provider),
# go and python3. Writes <out>/results.json, bench.err (per-operation log), goroutines.txt.
set -euo pipefail

EXP_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${EXP_DIR}/../../.." && pwd)"
OUT="${INPROC_OUT:-${REPO_ROOT}/.local/inprocess-engine}"
TIMEOUT="${INPROC_TIMEOUT:-900}"
mkdir -p "${OUT}"
OUT="$(cd "${OUT}" && pwd)"

export CLUSTER_DIR="${OUT}/cluster"
export CLUSTER_ETCD_PORT=43790 CLUSTER_ETCD_PEER_PORT=43800 CLUSTER_APISERVER_PORT=46443
export CLUSTER_CONTROLLER_MANAGER_PORT=46257 CLUSTER_SCHEDULER_PORT=46259 CLUSTER_KWOK_PORT=46250

if [[ ! -x "${REPO_ROOT}/bin/pulumi" ]] || ! compgen -G "${REPO_ROOT}/bin/pulumi-home/plugins/resource-kubernetes-v*" >/dev/null; then
	echo "run.sh: needs bin/pulumi and the Kubernetes provider plugin in bin/pulumi-home: run make tools plugins" >&2
	exit 1
fi
for port in "${CLUSTER_ETCD_PORT}" "${CLUSTER_APISERVER_PORT}"; do
	if (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then
		echo "run.sh: port ${port} is in use (is make test's cluster running?); not starting a second cluster" >&2
		exit 1
	fi
done

teardown() {
	"${REPO_ROOT}/hack/cluster-down.sh" --purge >/dev/null 2>&1 || true
}
trap teardown EXIT

echo "run.sh: building (CGO_ENABLED=0 go build -trimpath)" >&2
(cd "${EXP_DIR}" && CGO_ENABLED=0 go build -trimpath -o "${OUT}/inprocess-engine" .)

rm -rf "${OUT:?}"/state-cli "${OUT:?}"/state-inproc "${OUT:?}"/work-cli "${OUT:?}"/work-inproc
"${REPO_ROOT}/hack/cluster-up.sh"

export INPROC_REPO="${REPO_ROOT}" INPROC_OUT="${OUT}"
# shellcheck source=hack/experiments/inprocess-engine/env.sh
source "${EXP_DIR}/env.sh"
status=0
INPROC_GOROUTINES="${OUT}/goroutines.txt" timeout --kill-after=30 "${TIMEOUT}" \
	"${OUT}/inprocess-engine" bench -repo "${REPO_ROOT}" -out "${OUT}" -kubeconfig "${CLUSTER_DIR}/kubeconfig" \
	-results "${OUT}/results.json" -warmup 1 -samples 5 -prefix m "$@" 2> >(tee "${OUT}/bench.err" >&2) || status=$?
if [[ "${status}" -ne 0 ]]; then
	echo "run.sh: bench failed (exit ${status}; 124 = killed after ${TIMEOUT}s); log in ${OUT}/bench.err" >&2
	exit "${status}"
fi
python3 "${EXP_DIR}/summarize.py" "${OUT}/results.json"
echo "results: ${OUT}/results.json, log: ${OUT}/bench.err"

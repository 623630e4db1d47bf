#!/usr/bin/env bash
# `make soak`: starts a local simulated cluster of its own (.local/soak-cluster, ports apart from
# the others'), runs hack/bench/soak against it with the operator built by `make build` and the
# pinned pulumi CLI, and stops and purges the cluster. Writes .local/soak/soak.json and the soak
# section of docs/benchmarks.md, which says how long the last run took. The soak is a package of
# the bench's module (hack/bench/go.mod), built from there.
#
# Usage: hack/bench/soak/run.sh [soak flags...]   (e.g. --updates 500;
#                                                  `cd hack/bench && go run ./soak -h` lists them)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "${REPO_ROOT}"

export CLUSTER_DIR="${REPO_ROOT}/.local/soak-cluster"
# Ports below the ephemeral range, as hack/test.sh says why.
export CLUSTER_ETCD_PORT=21790 CLUSTER_ETCD_PEER_PORT=21800 CLUSTER_APISERVER_PORT=21443
export CLUSTER_CONTROLLER_MANAGER_PORT=21257 CLUSTER_SCHEDULER_PORT=21259 CLUSTER_KWOK_PORT=21250
OUT="${REPO_ROOT}/.local/soak"
mkdir -p "${OUT}"
go build -C hack/bench -o "${OUT}/soak" ./soak

teardown() { hack/cluster-down.sh --purge >/dev/null 2>&1 || true; }
teardown
trap teardown EXIT
hack/cluster-up.sh
"${OUT}/soak" --repo "${REPO_ROOT}" --kubeconfig "${CLUSTER_DIR}/kubeconfig" --operator "${REPO_ROOT}/bin/pulumi-operator" \
	--pulumi "${REPO_ROOT}/bin/pulumi" --out "${OUT}" --docs "${REPO_ROOT}/docs/benchmarks.md" "$@" 2>&1 | tee "${OUT}/soak.log"
exit "${PIPESTATUS[0]}"

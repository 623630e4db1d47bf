#!/usr/bin/env bash
# `make e2e-real`: the operator in a cluster for real. Starts a real node (hack/realnode-up.sh:
# containerd, runc, a CNI bridge, kubelet, kube-proxy, CoreDNS, its own control plane), loads
# the images `make image` built (.local/images/*.tar), runs the tests of test/e2e/realnode against
# it (the Helm chart and `make deploy` installs, the sample's life on real pods), and always
# stops the node again (hack/realnode-down.sh, which checks that nothing is left).
#
# Usage: hack/e2e-real.sh [go test flags...]     (`make e2e-real` builds tools and images first;
#        e.g. -run TestHelmInstall, or -run '^$' -bench BenchmarkFirstGET -benchtime 1x)
#
# A host that cannot run a node (not root, no cgroups, packages not installable) prints one line
# "SKIP: <reason>" and exits 0; with REALNODE_REQUIRED=1 it fails instead.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
LOG_NAME=e2e-real

export REALNODE_DIR="${REALNODE_DIR:-${REPO_ROOT}/.local/realnode}"
start=$(date +%s)
up_status=0
hack/realnode-up.sh || up_status=$?
if [[ ${up_status} -eq 3 ]]; then
	# realnode-up.sh printed "SKIP: <reason>".
	if [[ "${REALNODE_REQUIRED:-0}" == "1" ]]; then
		log::die "REALNODE_REQUIRED=1 and this host cannot run a node"
	fi
	echo "================ SKIPPED: make e2e-real (no real node on this host, see above) ================"
	exit 0
fi
if [[ ${up_status} -ne 0 ]]; then
	hack/realnode-down.sh || true
	log::die "hack/realnode-up.sh failed (${up_status})"
fi
trap 'hack/realnode-down.sh' EXIT

export PULUMI_OPERATOR_REALNODE_KUBECONFIG="${REALNODE_DIR}/kubeconfig"
export PULUMI_OPERATOR_REALNODE_DIR="${REALNODE_DIR}"
export PULUMI_OPERATOR_REALNODE_REQUIRED=1
log="${REPO_ROOT}/.local/e2e-real.log"
status=0
go test -count=1 -timeout 40m -v ./test/e2e/realnode/ "$@" >"${log}" 2>&1 || status=$?
# What was checked: every test's log lines, and the results.
grep -E '^(=== RUN|--- |ok|FAIL|panic:|Benchmark)|^\s+\S+_test\.go:[0-9]+:' "${log}" || true
passed=$(grep -cE '^\s*--- PASS' "${log}" || true)
failed=$(grep -cE '^\s*--- FAIL' "${log}" || true)
skipped=$(grep -cE '^\s*--- SKIP' "${log}" || true)
echo
echo "full log: ${log}"
echo "e2e-real: ${passed} passed, ${failed} failed, ${skipped} skipped in $(($(date +%s) - start))s"
exit "${status}"

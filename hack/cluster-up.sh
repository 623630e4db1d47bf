#!/usr/bin/env bash
# Starts a local simulated Kubernetes cluster: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok (fake nodes and pods), all on 127.0.0.1, plus one fake Node.
# Nothing here ever sends traffic outside 127.0.0.0/8: service and pod addresses are virtual.
#
# Usage: hack/cluster-up.sh            (stop it with hack/cluster-down.sh [--purge])
#
# Environment (defaults in brackets):
#   CLUSTER_DIR                      state, logs, pids, kubeconfig  [<repo>/.local/cluster]
#   BIN_DIR                          binaries from hack/build-tools.sh; built there if missing [<repo>/bin]
#   CLUSTER_ETCD_PORT                etcd client port               [23790]
#   CLUSTER_ETCD_PEER_PORT           etcd peer port                 [23800]
#   CLUSTER_APISERVER_PORT           kube-apiserver secure port     [26443]
#   CLUSTER_CONTROLLER_MANAGER_PORT  kube-controller-manager secure (healthz) port [26257]
#   CLUSTER_SCHEDULER_PORT           kube-scheduler secure (healthz) port          [26259]
#   CLUSTER_KWOK_PORT                kwok server (healthz, fake kubelet) port      [26250]
#   CLUSTER_NODE_NAME                name of the fake Node          [kwok-node-0]
#   CLUSTER_SERVICE_CIDR             virtual Service range          [10.96.0.0/16]
#   CLUSTER_POD_CIDR                 virtual Pod IPs handed out by kwok [10.244.0.1/16]
#   CLUSTER_TIMEOUT                  seconds to wait for each step  [60]
#   CLUSTER_CONTROLLER_MANAGER_QPS   kube-controller-manager's --kube-api-qps (burst twice it) [100]
#   CLUSTER_CONTROLLER_MANAGER_VMODULE  its --vmodule: the Deployment controller
#                                    log each sync, so a test that waits for a rollout can say
#                                    what it did [deployment_controller=4]
#   CLUSTER_KEEP_ON_FAILURE=1        leave processes running when up fails (default: stop them)
#
# Output: $CLUSTER_DIR/kubeconfig (admin token, group system:masters, verified against the
# generated CA), logs in $CLUSTER_DIR/logs/<component>.log, pids in $CLUSTER_DIR/pids/.
# Idempotent: when the cluster is already up and healthy it says so and exits 0.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
CLUSTER_DIR="${CLUSTER_DIR:-${REPO_ROOT}/.local/cluster}"
BIN_DIR="${BIN_DIR:-${REPO_ROOT}/bin}"
ETCD_PORT="${CLUSTER_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${CLUSTER_ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${CLUSTER_APISERVER_PORT:-26443}"
KCM_PORT="${CLUSTER_CONTROLLER_MANAGER_PORT:-26257}"
SCHEDULER_PORT="${CLUSTER_SCHEDULER_PORT:-26259}"
KWOK_PORT="${CLUSTER_KWOK_PORT:-26250}"
NODE_NAME="${CLUSTER_NODE_NAME:-kwok-node-0}"
SERVICE_CIDR="${CLUSTER_SERVICE_CIDR:-10.96.0.0/16}"
POD_CIDR="${CLUSTER_POD_CIDR:-10.244.0.1/16}"
TIMEOUT="${CLUSTER_TIMEOUT:-60}"
# kube-controller-manager's client-side rate limit is one budget for every namespace: at its
# default (20 requests a second) one namespace whose Deployments scale in a loop fills it, and
# every other namespace's rollouts queue behind that churn, with no operator involved
# (test/tenants TestFairShare's control run; docs/benchmarks.md "Tenants" has the figures).
# Clusters shared by tenants raise it, as this one does.
KCM_API_QPS="${CLUSTER_CONTROLLER_MANAGER_QPS:-100}"
KCM_VMODULE="${CLUSTER_CONTROLLER_MANAGER_VMODULE:-deployment_controller=4}"

mkdir -p "${CLUSTER_DIR}"
CLUSTER_DIR="$(cd "${CLUSTER_DIR}" && pwd)"
PKI="${CLUSTER_DIR}/pki"
LOGS="${CLUSTER_DIR}/logs"
PIDS="${CLUSTER_DIR}/pids"
KUBECONFIG_FILE="${CLUSTER_DIR}/kubeconfig"
APISERVER_URL="https://127.0.0.1:${APISERVER_PORT}"
mkdir -p "${PKI}" "${LOGS}" "${PIDS}" "${CLUSTER_DIR}/etcd"
chmod 700 "${PKI}" "${CLUSTER_DIR}/etcd"

cluster::lock

# ---------------------------------------------------------------------------------------------
# Process helpers
# ---------------------------------------------------------------------------------------------

# pid_of NAME: the pid recorded for NAME if that process is alive (not a zombie) and is NAME.
pid_of() { proc::pid_from_file "${PIDS}/$1.pid" "$1"; }

fail() {
	local component="$1"
	shift
	log::error "$*"
	if [[ -n "${component}" && -f "${LOGS}/${component}.log" ]]; then
		echo "----- last 40 lines of ${LOGS}/${component}.log -----" >&2
		tail -n 40 "${LOGS}/${component}.log" >&2
		echo "-----" >&2
	fi
	if [[ "${CLUSTER_KEEP_ON_FAILURE:-0}" != "1" ]]; then
		log::info "stopping what was started (CLUSTER_KEEP_ON_FAILURE=1 keeps it running)"
		CLUSTER_DIR="${CLUSTER_DIR}" "${REPO_ROOT}/hack/cluster-down.sh" >&2 || true
	fi
	exit 1
}

# start NAME ARGS...: start BIN_DIR/NAME detached (proc::start), logging to LOGS/NAME.log, pid in
# PIDS/NAME.pid.
start() {
	local name="$1"
	shift
	echo "===== $(date -u +%Y-%m-%dT%H:%M:%SZ) starting ${name}" >>"${LOGS}/${name}.log"
	proc::start "${LOGS}/${name}.log" "${PIDS}/${name}.pid" "${BIN_DIR}/${name}" "$@"
	log::info "started ${name} (pid ${PROC_PID})"
}

# wait_for NAME DESCRIPTION COMMAND...: poll COMMAND until it succeeds, NAME dies, or TIMEOUT.
wait_for() {
	local name="$1" what="$2" pid rc=0
	shift 2
	pid="$(cat "${PIDS}/${name}.pid" 2>/dev/null)" || true
	proc::wait_until "${pid}" "${TIMEOUT}" "$@" || rc=$?
	case "${rc}" in
	1) fail "${name}" "${name} exited while waiting for ${what}" ;;
	2) fail "${name}" "timed out after ${TIMEOUT}s waiting for ${what}" ;;
	esac
}

# ---------------------------------------------------------------------------------------------
# API helpers (curl with the admin token, verified against the cluster CA)
# ---------------------------------------------------------------------------------------------
api() {
	# The apiserver pretty-prints JSON for a curl User-Agent; ask for compact JSON.
	curl --silent --show-error --fail --max-time 5 --cacert "${PKI}/ca.crt" --user-agent cluster-up.sh \
		-H "Authorization: Bearer $(cat "${PKI}/admin.token")" "$@"
}
apiserver_ready() { [[ "$(api "${APISERVER_URL}/readyz")" == "ok" ]]; }
healthz_ok() { [[ "$(curl --silent --fail --max-time 5 --cacert "${PKI}/ca.crt" "$1")" == "ok" ]]; }
healthz_insecure_ok() { [[ "$(curl --silent --fail --max-time 5 --insecure "$1")" == "ok" ]]; }
etcd_healthy() { curl --silent --fail --max-time 5 "http://127.0.0.1:${ETCD_PORT}/health" | grep -q '"health":"true"'; }

node_ready() {
	local node
	node="$(api "${APISERVER_URL}/api/v1/nodes/${NODE_NAME}" | tr -d '[:space:]')" || return 1
	# NodeCondition serialises type before status; the taints are the only place these keys occur.
	grep -q '"type":"Ready","status":"True"' <<<"${node}" &&
		! grep -q 'node.kubernetes.io/not-ready' <<<"${node}" &&
		! grep -q 'node.kubernetes.io/unreachable' <<<"${node}"
}
default_sa_exists() { api "${APISERVER_URL}/api/v1/namespaces/default/serviceaccounts/default" >/dev/null; }

all_running() {
	local c
	for c in "${CLUSTER_COMPONENTS[@]}"; do
		pid_of "${c}" >/dev/null || return 1
	done
}

# ---------------------------------------------------------------------------------------------
# Already up?
# ---------------------------------------------------------------------------------------------
if all_running && [[ -f "${KUBECONFIG_FILE}" && -f "${PKI}/admin.token" ]] && apiserver_ready && node_ready; then
	echo "cluster already up and healthy in ${CLUSTER_DIR}"
	echo "cluster ready: export KUBECONFIG=${KUBECONFIG_FILE}"
	exit 0
fi
for c in "${CLUSTER_COMPONENTS[@]}"; do
	if pid_of "${c}" >/dev/null; then
		log::info "cluster in ${CLUSTER_DIR} is partly running or unhealthy: restarting it"
		CLUSTER_DIR="${CLUSTER_DIR}" "${REPO_ROOT}/hack/cluster-down.sh" >&2
		break
	fi
done

# ---------------------------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------------------------
for c in "${CLUSTER_COMPONENTS[@]}"; do
	if [[ ! -x "${BIN_DIR}/${c}" ]]; then
		log::info "${BIN_DIR}/${c} is missing: running hack/build-tools.sh ${BIN_DIR} (the first build takes minutes)"
		"${REPO_ROOT}/hack/build-tools.sh" "${BIN_DIR}" >&2
		break
	fi
done
BIN_DIR="$(cd "${BIN_DIR}" && pwd)"
for tool in curl openssl setsid; do
	command -v "${tool}" >/dev/null 2>&1 || { log::info "${tool} is required"; exit 1; }
done

# ---------------------------------------------------------------------------------------------
# Certificates, keys, token, kubeconfig (generated once, kept with the state)
# ---------------------------------------------------------------------------------------------
# sign_cert NAME CN SANS: PKI/NAME.{key,crt}, a serving certificate signed by the cluster CA.
sign_cert() {
	local name="$1" cn="$2" sans="$3"
	[[ -s "${PKI}/${name}.crt" && -s "${PKI}/${name}.key" ]] && return 0
	openssl genrsa -out "${PKI}/${name}.key" 2048 2>/dev/null
	openssl req -new -key "${PKI}/${name}.key" -subj "/CN=${cn}" -out "${PKI}/${name}.csr" 2>/dev/null
	printf '%s\n' \
		"basicConstraints=critical,CA:FALSE" \
		"keyUsage=critical,digitalSignature,keyEncipherment" \
		"extendedKeyUsage=serverAuth" \
		"subjectAltName=${sans}" >"${PKI}/${name}.ext"
	openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
		-CAcreateserial -days 3650 -sha256 -extfile "${PKI}/${name}.ext" -out "${PKI}/${name}.crt" 2>/dev/null
	rm -f "${PKI}/${name}.csr" "${PKI}/${name}.ext"
}

if [[ ! -s "${PKI}/ca.crt" || ! -s "${PKI}/ca.key" ]]; then
	log::info "generating the cluster CA, certificates and service-account key in ${PKI}"
	rm -f "${PKI}"/*.crt "${PKI}"/*.key
	openssl genrsa -out "${PKI}/ca.key" 2048 2>/dev/null
	openssl req -x509 -new -key "${PKI}/ca.key" -subj "/CN=pulumi-operator-local-ca" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "${PKI}/ca.crt" 2>/dev/null
fi
# 10.96.0.1 is the first address of the default service range: the `kubernetes` Service's ClusterIP.
sign_cert apiserver kube-apiserver "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
sign_cert kwok kwok "DNS:localhost,DNS:${NODE_NAME},IP:127.0.0.1"
if [[ ! -s "${PKI}/sa.key" || ! -s "${PKI}/sa.pub" ]]; then
	openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
	openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
fi
if [[ ! -s "${PKI}/admin.token" ]]; then
	openssl rand -hex 32 >"${PKI}/admin.token"
fi
TOKEN="$(cat "${PKI}/admin.token")"
printf '%s,admin,admin,"system:masters"\n' "${TOKEN}" >"${PKI}/tokens.csv"
chmod 600 "${PKI}"/*.key "${PKI}/admin.token" "${PKI}/tokens.csv"

umask_old="$(umask)"
umask 077
cat >"${KUBECONFIG_FILE}.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pulumi-operator-local
  cluster:
    server: ${APISERVER_URL}
    certificate-authority-data: $(base64 -w0 <"${PKI}/ca.crt")
users:
- name: admin
  user:
    token: ${TOKEN}
contexts:
- name: pulumi-operator-local
  context:
    cluster: pulumi-operator-local
    user: admin
    namespace: default
current-context: pulumi-operator-local
EOF
mv -f "${KUBECONFIG_FILE}.tmp" "${KUBECONFIG_FILE}"
umask "${umask_old}"

# ---------------------------------------------------------------------------------------------
# Start
# ---------------------------------------------------------------------------------------------
START=${SECONDS}

# Every port must be free before anything starts.
for port_var in CLUSTER_ETCD_PORT:${ETCD_PORT} CLUSTER_ETCD_PEER_PORT:${ETCD_PEER_PORT} \
	CLUSTER_APISERVER_PORT:${APISERVER_PORT} CLUSTER_CONTROLLER_MANAGER_PORT:${KCM_PORT} \
	CLUSTER_SCHEDULER_PORT:${SCHEDULER_PORT} CLUSTER_KWOK_PORT:${KWOK_PORT}; do
	if proc::port_in_use "${port_var#*:}"; then
		fail "" "port 127.0.0.1:${port_var#*:} is already in use by another process: set ${port_var%%:*} to move it"
	fi
done

# --unsafe-no-fsync: a throw-away test cluster; data still survives process restarts (page cache).
start etcd \
	--name=local \
	--data-dir="${CLUSTER_DIR}/etcd" \
	--listen-client-urls="http://127.0.0.1:${ETCD_PORT}" \
	--advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
	--listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
	--initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
	--initial-cluster="local=http://127.0.0.1:${ETCD_PEER_PORT}" \
	--initial-cluster-state=new \
	--unsafe-no-fsync \
	--log-level=warn
wait_for etcd "etcd to be healthy on 127.0.0.1:${ETCD_PORT}" etcd_healthy

start kube-apiserver \
	--etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
	--bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 \
	--secure-port="${APISERVER_PORT}" \
	--cert-dir="${PKI}/apiserver-generated" \
	--tls-cert-file="${PKI}/apiserver.crt" \
	--tls-private-key-file="${PKI}/apiserver.key" \
	--client-ca-file="${PKI}/ca.crt" \
	--token-auth-file="${PKI}/tokens.csv" \
	--authorization-mode=Node,RBAC \
	--service-account-issuer=https://kubernetes.default.svc \
	--service-account-key-file="${PKI}/sa.pub" \
	--service-account-signing-key-file="${PKI}/sa.key" \
	--service-cluster-ip-range="${SERVICE_CIDR}" \
	--endpoint-reconciler-type=none \
	--allow-privileged=true
wait_for kube-apiserver "kube-apiserver to be ready on ${APISERVER_URL}" apiserver_ready

start kube-controller-manager \
	--kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-kubeconfig="${KUBECONFIG_FILE}" \
	--authorization-kubeconfig="${KUBECONFIG_FILE}" \
	--bind-address=127.0.0.1 \
	--secure-port="${KCM_PORT}" \
	--leader-elect=false \
	--controllers='*,-node-ipam-controller,-service-lb-controller,-node-route-controller,-cloud-node-lifecycle-controller' \
	--service-account-private-key-file="${PKI}/sa.key" \
	--root-ca-file="${PKI}/ca.crt" \
	--cluster-signing-cert-file="${PKI}/ca.crt" \
	--cluster-signing-key-file="${PKI}/ca.key" \
	--service-cluster-ip-range="${SERVICE_CIDR}" \
	--kube-api-qps="${KCM_API_QPS}" \
	--kube-api-burst="$((KCM_API_QPS * 2))" \
	--vmodule="${KCM_VMODULE}"

start kube-scheduler \
	--kubeconfig="${KUBECONFIG_FILE}" \
	--authentication-kubeconfig="${KUBECONFIG_FILE}" \
	--authorization-kubeconfig="${KUBECONFIG_FILE}" \
	--bind-address=127.0.0.1 \
	--secure-port="${SCHEDULER_PORT}" \
	--leader-elect=false

# kwok plays the kubelet of every Node annotated kwok.x-k8s.io/node=fake. Its server (healthz, and
# the kubelet endpoint the apiserver would use for logs/exec) listens on 127.0.0.1 only, and the
# node's address is 127.0.0.1 so that nothing is ever sent to a virtual address.
# --node-lease-duration-seconds makes kwok renew a Lease per node, as a kubelet does: without
# it the node-lifecycle controller sees only sparse status updates, marks the node NotReady now
# and then (node-monitor-grace-period), and the pods it marks unready stay so.
start_kwok() {
	start kwok \
		--kubeconfig="${KUBECONFIG_FILE}" \
		--node-lease-duration-seconds=40 \
		--manage-all-nodes=false \
		--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
		--cidr="${POD_CIDR}" \
		--node-ip=127.0.0.1 \
		--node-port="${KWOK_PORT}" \
		--server-address="127.0.0.1:${KWOK_PORT}" \
		--tls-cert-file="${PKI}/kwok.crt" \
		--tls-private-key-file="${PKI}/kwok.key"
}
start_kwok

# The fake Node. Creating it again after a restart answers 409 Conflict, which is fine.
node_json="$(
	cat <<EOF
{
  "apiVersion": "v1",
  "kind": "Node",
  "metadata": {
    "name": "${NODE_NAME}",
    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
    "labels": {
      "type": "kwok",
      "kubernetes.io/hostname": "${NODE_NAME}",
      "kubernetes.io/os": "linux",
      "kubernetes.io/arch": "amd64",
      "kubernetes.io/role": "agent",
      "node-role.kubernetes.io/agent": ""
    }
  },
  "status": {
    "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
    "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
    "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"}
  }
}
EOF
)"
create_out="$(curl --silent --show-error --max-time 10 --cacert "${PKI}/ca.crt" -H "Authorization: Bearer ${TOKEN}" \
	-H 'Content-Type: application/json' -X POST --data-binary "${node_json}" \
	-w '\n%{http_code}' "${APISERVER_URL}/api/v1/nodes")" || fail kube-apiserver "could not create Node ${NODE_NAME}"
case "${create_out##*$'\n'}" in
201) log::info "created Node ${NODE_NAME}" ;;
409) log::info "Node ${NODE_NAME} already exists" ;;
*) fail kube-apiserver "creating Node ${NODE_NAME} failed: ${create_out}" ;;
esac

wait_for kube-controller-manager "kube-controller-manager healthz on 127.0.0.1:${KCM_PORT}" \
	healthz_insecure_ok "https://127.0.0.1:${KCM_PORT}/healthz"
wait_for kube-scheduler "kube-scheduler healthz on 127.0.0.1:${SCHEDULER_PORT}" \
	healthz_insecure_ok "https://127.0.0.1:${SCHEDULER_PORT}/healthz"
# kwok can die as it starts, with "fatal error: concurrent map writes": its workers set up their
# CEL environments at once, and the type cache of the library it uses for them
# (github.com/wzshiming/easycel, whose newest release is the one kwok pins) is an unguarded map.
# Such a kwok is started again, twice at most; any other exit fails as before.
for attempt in 1 2 3; do
	rc=0 what="kwok healthz on 127.0.0.1:${KWOK_PORT}"
	pid="$(cat "${PIDS}/kwok.pid")"
	proc::wait_until "${pid}" "${TIMEOUT}" healthz_ok "https://127.0.0.1:${KWOK_PORT}/healthz" || rc=$?
	if ((rc == 0)); then
		what="Node ${NODE_NAME} to be Ready without the not-ready taint"
		proc::wait_until "${pid}" "${TIMEOUT}" node_ready || rc=$?
	fi
	if ((rc != 1 || attempt == 3)) || ! proc::last_start_says "${LOGS}/kwok.log" 'fatal error: concurrent map writes'; then
		break
	fi
	log::info "kwok died as it started (its start race: concurrent map writes); starting it again (attempt $((attempt + 1)) of 3)"
	start_kwok
done
case "${rc}" in
1) fail kwok "kwok exited while waiting for ${what}" ;;
2) fail kwok "timed out after ${TIMEOUT}s waiting for ${what}" ;;
esac
wait_for kube-controller-manager "ServiceAccount default/default" default_sa_exists
wait_for kube-apiserver "kube-apiserver to be ready" apiserver_ready

log::info "up in $((SECONDS - START))s (etcd 127.0.0.1:${ETCD_PORT}, apiserver ${APISERVER_URL}, logs in ${LOGS})"
echo "cluster ready: export KUBECONFIG=${KUBECONFIG_FILE}"

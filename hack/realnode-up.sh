#!/usr/bin/env bash
# Starts ONE REAL Kubernetes node on this machine with its own control plane, so that the
# end-to-end tests (test/e2e/realnode, `make e2e-real`) run real pods: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd (Debian package) + runc + the CNI bridge
# plugin, kubelet, kube-proxy (iptables mode) and CoreDNS (Service kube-dns 10.96.0.10). Node
# name `realnode`; pods on bridge rn0 (10.88.0.0/24, host side 10.88.0.1 = node address =
# apiserver https://10.88.0.1:6443); Services 10.96.0.0/16; etcd on 127.0.0.1:32379-32381.
# hack/realnode-down.sh stops it and puts the machine back as it was.
#
# Usage: hack/realnode-up.sh      (root; stop it with hack/realnode-down.sh [--purge])
#
# Environment (defaults in brackets):
#   REALNODE_DIR               state, config, PKI, logs, pids, image archives, kubeconfig [<repo>/.local/realnode]
#   BIN_DIR                    binaries from hack/build-tools.sh; built there if missing [<repo>/bin]
#   REALNODE_IMPORT_DIR        every *.tar here is imported at start, as REALNODE_DIR/images/*.tar [<repo>/.local/images]
#   REALNODE_TIMEOUT           seconds to wait for each step [90]
#   REALNODE_KEEP_ON_FAILURE=1 leave everything running when up fails (default: realnode-down.sh)
#
# Output: REALNODE_DIR/kubeconfig (admin, certificates embedded), component logs in
# REALNODE_DIR/logs/<component>.log, and the seconds from start to node Ready. Idempotent: when
# the node is already up and healthy it says so (importing only image archives that changed)
# and exits 0; leftovers of an earlier run are cleaned up with realnode-down.sh first.
# Exit codes: 0 up, 1 failed (what was started is stopped again), 3 this host cannot run a node
# (not root, no cgroups, packages not installable): one line "SKIP: <reason>" on stdout.
#
# Containment (nothing this node runs can reach an address outside the machine): pods get no
# default route (only 10.96.0.0/16 via 10.88.0.1), an nft table "inet realnode" drops whatever
# is forwarded from rn0 to another interface, 10.96.0.0/16 is routed into rn0 on the host,
# containerd's registry traffic goes to a dead loopback proxy (127.0.0.1:9), pods' upstream DNS
# is their own loopback and CoreDNS has no `forward`. Images are never pulled: the pause and
# CoreDNS images are built locally (buildah, --pull=never) and imported with every other archive.
set -Eeuo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
# shellcheck source=hack/realnode/lib.sh
source "${REPO_ROOT}/hack/realnode/lib.sh"
BIN_DIR="${BIN_DIR:-${REPO_ROOT}/bin}"
IMPORT_DIR="${REALNODE_IMPORT_DIR:-${REPO_ROOT}/.local/images}"
TIMEOUT="${REALNODE_TIMEOUT:-90}"
T0="${EPOCHREALTIME}"

# elapsed: seconds since the script started, one decimal.
elapsed() { awk -v a="${T0}" -v b="${EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }'; }

# skip REASON: this host cannot run a node; callers (hack/e2e-real.sh) turn exit 3 into a SKIP.
skip() {
	echo "SKIP: $*"
	exit 3
}

# ---------------------------------------------------------------------------------------------
# Can this host run a node at all?
# ---------------------------------------------------------------------------------------------
[[ "$(id -u)" == 0 ]] || skip "a real node needs root (containerd, runc, network namespaces, iptables); this is uid $(id -u)"
if [[ ! -f /sys/fs/cgroup/cgroup.controllers && ! -d /sys/fs/cgroup/memory ]]; then
	skip "no cgroup file system under /sys/fs/cgroup (the kubelet and runc need cgroups)"
fi
cap_eff="$(awk '/^CapEff:/ { print $2 }' /proc/self/status)"
# CAP_NET_ADMIN (12): the bridge, veths, iptables; CAP_SYS_ADMIN (21): mounts, namespaces.
if (((0x${cap_eff} >> 12 & 1) == 0 || (0x${cap_eff} >> 21 & 1) == 0)); then
	skip "this process lacks CAP_NET_ADMIN or CAP_SYS_ADMIN (CapEff ${cap_eff}): no bridge, mounts or namespaces"
fi
# packages_present: the Debian packages' programs are all there.
packages_present() {
	local p
	for p in containerd containerd-shim-runc-v2 ctr runc iptables nft conntrack; do
		command -v "${p}" >/dev/null 2>&1 || return 1
	done
	for p in bridge host-local loopback; do
		[[ -x "/usr/lib/cni/${p}" ]] || return 1
	done
}
if ! packages_present; then
	command -v apt-get >/dev/null 2>&1 || skip "containerd, runc, the CNI plugins, iptables, nft or conntrack are missing and there is no apt-get to install them"
	log::info "installing containerd runc containernetworking-plugins iptables nftables conntrack (Debian packages)"
	pkgs=(containerd runc containernetworking-plugins iptables nftables conntrack)
	# The packages' services are never started here: this script runs containerd itself.
	apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; } ||
		skip "could not install the Debian packages ${pkgs[*]}"
	packages_present || skip "the Debian packages ${pkgs[*]} are installed but their programs are missing"
fi
for tool in ip curl openssl setsid sha256sum; do
	command -v "${tool}" >/dev/null 2>&1 || log::die "${tool} is required"
done
# No component may talk to the outside through a proxy from the caller's environment.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy NO_PROXY no_proxy

realnode::paths
realnode::lock
((${#RN_SOCK} < 100)) || log::die "REALNODE_DIR ${REALNODE_DIR} is too long: containerd's socket path must stay under 108 bytes"

# ---------------------------------------------------------------------------------------------
# Already up? Left over from an earlier run?
# ---------------------------------------------------------------------------------------------
all_running() {
	local c
	for c in "${RN_COMPONENTS[@]}"; do
		realnode::pid "${c}" >/dev/null || return 1
	done
}
# import_all: every image archive of REALNODE_DIR/images and IMPORT_DIR (realnode::import skips
# those already imported unchanged).
import_all() {
	local -a tars=()
	shopt -s nullglob
	tars=("${RN_IMAGES}"/*.tar "${IMPORT_DIR}"/*.tar)
	shopt -u nullglob
	((${#tars[@]} == 0)) || realnode::import "${tars[@]}"
}
if all_running && [[ -f "${RN_KUBECONFIG}" ]] && realnode::api_ready && realnode::node_ready && realnode::dns_ready; then
	import_all || log::die "importing image archives into the running node failed"
	log::info "the real node is already up and healthy in ${REALNODE_DIR}"
	echo "real node ready: export KUBECONFIG=${RN_KUBECONFIG}"
	exit 0
fi
leftover=""
for c in "${RN_COMPONENTS[@]}"; do
	[[ -z "$(realnode::pids "${c}")" ]] || leftover="${c} is running"
done
[[ -n "${leftover}" || ! -d "${RN_STATE}" ]] || leftover="${RN_STATE} exists"
[[ -n "${leftover}" || ! -d "${RN_BASELINE}" ]] || leftover="${RN_BASELINE} exists (an earlier run was not stopped cleanly)"
[[ -n "${leftover}" ]] || ! ip link show "${RN_BRIDGE}" >/dev/null 2>&1 || leftover="interface ${RN_BRIDGE} exists"
if [[ -n "${leftover}" ]]; then
	log::info "the node in ${REALNODE_DIR} is partly running or left over (${leftover}): running realnode-down.sh first"
	"${REPO_ROOT}/hack/realnode-down.sh" >&2 || log::die "realnode-down.sh could not clean up; fix what it reports, then retry"
fi

# ---------------------------------------------------------------------------------------------
# Binaries, images, and a free network
# ---------------------------------------------------------------------------------------------
missing=()
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns; do
	[[ -x "${BIN_DIR}/${b}" ]] || missing+=("${b}")
done
if ((${#missing[@]})); then
	log::info "missing in ${BIN_DIR}: ${missing[*]}: running hack/build-tools.sh (a cold build takes many minutes)"
	ONLY="${missing[*]}" "${REPO_ROOT}/hack/build-tools.sh" "${BIN_DIR}" >&2
fi
BIN_DIR="$(cd "${BIN_DIR}" && pwd)"

# The pause and CoreDNS images, rebuilt only when the binary or Containerfile changed.
mkdir -p "${RN_IMAGES}/.bin"
(cd "${REPO_ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${RN_IMAGES}/.bin/pause" ./hack/realnode/pause)
realnode::image "${RN_PAUSE_IMAGE}" "${REPO_ROOT}/hack/realnode/pause/Containerfile" "${RN_IMAGES}/.bin/pause"
realnode::image "${RN_COREDNS_IMAGE}" "${REPO_ROOT}/hack/realnode/coredns/Containerfile" "${BIN_DIR}/coredns"

for port in "${RN_LOCAL_PORTS[@]}"; do
	if proc::port_in_use "${port}"; then
		log::die "port ${port} is in use by another process (the node needs ${RN_LOCAL_PORTS[*]})"
	fi
done
for ipt in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
	if "${ipt}-save" 2>/dev/null | grep -qE '^:(KUBE|CNI)-'; then
		log::die "${ipt} holds KUBE-*/CNI-* chains: another Kubernetes node runs on this host, or an earlier run left them (hack/realnode-down.sh removes them)"
	fi
done
if clash="$(ip -o route show | awk '$1 ~ /^10\.(88|96)\./ || $1 == "10.0.0.0/8" { print }')" && [[ -n "${clash}" ]]; then
	log::die "the node's ranges ${RN_CLUSTER_CIDR} / ${RN_SERVICE_CIDR} are already routed on this host: ${clash}"
fi

# ---------------------------------------------------------------------------------------------
# From here on, any failure (fail, log::die, an unexpected error, a signal) shows the logs,
# stops what was started (realnode-down.sh) and exits 1.
# ---------------------------------------------------------------------------------------------
up_done=0
fail_component=""
import_pid=""
# fail COMPONENT MESSAGE...: logs MESSAGE and exits 1; on_exit shows COMPONENT's log.
fail() {
	fail_component="$1"
	shift
	log::error "$*"
	exit 1
}
on_exit() {
	local rc=$? l
	((up_done == 0)) || return 0
	trap - ERR INT TERM
	[[ -z "${import_pid}" ]] || kill "${import_pid}" 2>/dev/null || true
	if [[ -n "${fail_component}" && -s "${RN_LOGS}/${fail_component}.log" ]]; then
		echo "----- last 40 lines of ${RN_LOGS}/${fail_component}.log" >&2
		tail -n 40 "${RN_LOGS}/${fail_component}.log" >&2
	else
		for l in "${RN_LOGS}"/*.log; do
			[[ -s "${l}" ]] || continue
			echo "----- last 8 lines of ${l}" >&2
			tail -n 8 "${l}" >&2
		done
	fi
	if [[ "${REALNODE_KEEP_ON_FAILURE:-0}" != 1 ]]; then
		log::info "stopping what was started (REALNODE_KEEP_ON_FAILURE=1 keeps it running)"
		"${REPO_ROOT}/hack/realnode-down.sh" >&2 || true
	fi
	log::error "realnode-up.sh failed (exit ${rc}) after $(elapsed)s"
	exit 1
}
trap on_exit EXIT
trap 'log::error "failed at line ${LINENO}: ${BASH_COMMAND}"' ERR
trap 'fail "" "interrupted"' INT TERM

mkdir -p "${RN_STATE}" "${RN_PIDS}" "${RN_BASELINE}" "${RN_CONFIG}/cni" "${RN_STATE}/containerd" \
	"${RN_STATE}/kubelet" "${RN_STATE}/pod-logs" "${RN_STATE}/cni-ipam" "${RN_STATE}/etcd" "${RN_PKI}"
chmod 700 "${RN_PKI}" "${RN_STATE}/etcd"
if [[ -d "${RN_LOGS}" ]]; then
	rm -rf "${RN_LOGS}.previous"
	mv "${RN_LOGS}" "${RN_LOGS}.previous"
	mkdir -p "${RN_LOGS}"
	mv "${RN_LOGS}.previous" "${RN_LOGS}/previous"
fi
mkdir -p "${RN_LOGS}"

# 0. Baseline: what realnode-down.sh must put back.
for k in "${RN_SYSCTLS[@]}"; do
	if v="$(sysctl -n "${k}" 2>/dev/null)"; then echo "${k}=${v}"; fi
done >"${RN_BASELINE}/sysctl"
for p in "${RN_HOST_PATHS[@]}"; do
	if [[ -e "${p}" ]]; then echo "${p}"; fi
done >"${RN_BASELINE}/paths-existing"
nft list tables >"${RN_BASELINE}/nft-tables" 2>/dev/null || true
ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1 >"${RN_BASELINE}/links"
awk '{ print $5 }' /proc/self/mountinfo >"${RN_BASELINE}/mounts"
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
	if [[ -d "${d}" ]]; then echo "${d}"; fi
done >"${RN_BASELINE}/cgroups"

# 1. Host network: the bridge first (the apiserver binds its address), the service range routed
#    into it (never out of the default route), the egress guard, forwarding on.
ip link add "${RN_BRIDGE}" type bridge
ip addr add "${RN_NODE_IP}/24" dev "${RN_BRIDGE}"
ip link set "${RN_BRIDGE}" up
ip route add "${RN_SERVICE_CIDR}" dev "${RN_BRIDGE}"
nft -f - <<EOF
table inet ${RN_NFT_TABLE} {
  chain forward {
    type filter hook forward priority -10; policy accept;
    iifname "${RN_BRIDGE}" oifname != "${RN_BRIDGE}" counter drop comment "pods may only talk to pods, services and the node"
  }
}
EOF
[[ -d /proc/sys/net/bridge ]] || modprobe br_netfilter 2>/dev/null || log::info "warning: no br_netfilter: a pod may not reach a ClusterIP served by a pod on the same bridge"
sysctl -qw net.ipv4.ip_forward=1
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
sysctl -qw net.bridge.bridge-nf-call-ip6tables=1 2>/dev/null || true

# 2. PKI, made once and kept in REALNODE_DIR/pki: EC P-256 CA and certificates, RSA
#    service-account key, one kubeconfig per component.
if [[ ! -s "${RN_PKI}/ca.crt" || ! -s "${RN_PKI}/kubelet.kubeconfig" ]]; then
	log::info "generating the node's CA, certificates and kubeconfigs in ${RN_PKI}"
	(
		cd "${RN_PKI}"
		rm -f ./*.crt ./*.key ./*.kubeconfig ./*.srl sa.pub
		openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
		openssl req -x509 -new -key ca.key -subj "/CN=pulumi-operator-realnode-ca" -days 3650 -sha256 \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
			-out ca.crt 2>/dev/null
		# cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
		cert() {
			openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
			openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
			{
				echo "basicConstraints=critical,CA:FALSE"
				echo "keyUsage=critical,digitalSignature,keyEncipherment"
				echo "extendedKeyUsage=$3"
				if [[ -n "${4:-}" ]]; then echo "subjectAltName=$4"; fi
			} >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
				-extfile "$1.ext" -out "$1.crt" 2>/dev/null
			rm -f "$1.csr" "$1.ext"
		}
		cert apiserver "/CN=kube-apiserver" serverAuth \
			"DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:${RN_NODE_IP},IP:${RN_KUBERNETES_SVC_IP}"
		cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
		cert admin "/O=system:masters/CN=realnode-admin" clientAuth
		cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
		cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
		cert kube-proxy "/CN=system:kube-proxy" clientAuth
		cert kubelet "/O=system:nodes/CN=system:node:${RN_NODE_NAME}" clientAuth
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
		for u in admin kube-controller-manager kube-scheduler kube-proxy kubelet; do
			cat >"${u}.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster: {server: "${RN_APISERVER}", certificate-authority: "${RN_PKI}/ca.crt"}
users:
- name: ${u}
  user: {client-certificate: "${RN_PKI}/${u}.crt", client-key: "${RN_PKI}/${u}.key"}
contexts:
- name: ${u}@realnode
  context: {cluster: realnode, user: ${u}, namespace: default}
current-context: ${u}@realnode
EOF
		done
		chmod 600 ./*.key ./*.kubeconfig
	)
fi
# The admin kubeconfig for users and tests: certificates embedded, so it stands alone.
(
	umask 077
	cat >"${RN_KUBECONFIG}.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster:
    server: ${RN_APISERVER}
    certificate-authority-data: $(base64 -w0 <"${RN_PKI}/ca.crt")
users:
- name: realnode-admin
  user:
    client-certificate-data: $(base64 -w0 <"${RN_PKI}/admin.crt")
    client-key-data: $(base64 -w0 <"${RN_PKI}/admin.key")
contexts:
- name: realnode
  context: {cluster: realnode, user: realnode-admin, namespace: default}
current-context: realnode
EOF
	mv -f "${RN_KUBECONFIG}.tmp" "${RN_KUBECONFIG}"
)

# 3. Configuration, for machines with cgroup v1, no systemd, no CAP_SYS_RESOURCE and no
#    registry, and with no iptables chains from the kubelet.
cat >"${RN_CONFIG}/containerd.toml" <<EOF
# containerd 1.6 (Debian 12): own root, state and socket under ${RN_STATE}; CRI for the kubelet.
version = 2
root = "${RN_STATE}/containerd/root"
state = "${RN_STATE}/containerd/state"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "${RN_SOCK}"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "${RN_STATE}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${RN_PAUSE_IMAGE}"
  # No CAP_SYS_RESOURCE on such machines: never ask runc to lower an oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${RN_CONFIG}/cni"
    max_conf_num = 1
EOF

# No default route in pods: the pod subnet is on-link, the service range goes via the node.
cat >"${RN_CONFIG}/cni/10-realnode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${RN_BRIDGE}",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "${RN_STATE}/cni-ipam",
        "ranges": [[{"subnet": "${RN_POD_SUBNET}", "gateway": "${RN_NODE_IP}"}]],
        "routes": [{"dst": "${RN_SERVICE_CIDR}"}]
      }
    }
  ]
}
EOF

# Pods with dnsPolicy Default (and CoreDNS itself) get this file: their own loopback only.
echo "nameserver 127.0.0.1" >"${RN_CONFIG}/resolv.conf"

cat >"${RN_CONFIG}/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false            # cgroup v1 machines: the kubelet refuses them otherwise
cgroupDriver: cgroupfs         # no systemd
containerRuntimeEndpoint: unix://${RN_SOCK}
address: ${RN_NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${RN_PKI}/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [${RN_DNS_SVC_IP}]
resolvConf: ${RN_CONFIG}/resolv.conf
podLogsDir: ${RN_STATE}/pod-logs
oomScoreAdj: 0                 # no CAP_SYS_RESOURCE: it cannot lower it to the default -999
makeIPTablesUtilChains: false  # no KUBE-FIREWALL / KUBE-IPTABLES-HINT / canary chains
failSwapOn: false
imageGCHighThresholdPercent: 100 # never garbage-collect the imported images
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 4s
serializeImagePulls: false
EOF

cat >"${RN_CONFIG}/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${RN_PKI}/kube-proxy.kubeconfig
hostnameOverride: ${RN_NODE_NAME}
mode: iptables
bindAddress: ${RN_NODE_IP}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: ${RN_CLUSTER_CIDR}
detectLocalMode: ClusterCIDR
nodePortAddresses: ["${RN_NODE_IP}/32"]
oomScoreAdj: 0                 # no CAP_SYS_RESOURCE
iptables:
  localhostNodePorts: false    # leaves net.ipv4.conf.all.route_localnet alone
  masqueradeAll: false
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:                     # 0: leave the host's conntrack sysctls alone
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF

# ---------------------------------------------------------------------------------------------
# 4. Start: each process detached, log in logs/, pid in state/pids/.
# ---------------------------------------------------------------------------------------------
# start NAME COMMAND...: proc::start COMMAND as component NAME.
start() {
	local name="$1"
	shift
	echo "===== $(date -u +%Y-%m-%dT%H:%M:%SZ) starting ${name}" >>"${RN_LOGS}/${name}.log"
	proc::start "${RN_LOGS}/${name}.log" "${RN_PIDS}/${name}.pid" "$@"
	log::info "started ${name} (pid ${PROC_PID}) at $(elapsed)s"
}

# wait_for NAME WHAT COMMAND...: polls COMMAND until it succeeds; fails when NAME exits or after
# TIMEOUT seconds.
wait_for() {
	local name="$1" what="$2" rc=0
	shift 2
	proc::wait_until "$(cat "${RN_PIDS}/${name}.pid")" "${TIMEOUT}" "$@" || rc=$?
	case "${rc}" in
	0) log::info "${what}: ok at $(elapsed)s" ;;
	1) fail "${name}" "${name} exited while waiting for ${what}" ;;
	*) fail "${name}" "timed out after ${TIMEOUT}s waiting for ${what}" ;;
	esac
}

etcd_healthy() { curl --silent --max-time 2 "http://127.0.0.1:${RN_ETCD_PORT}/health" | grep -q '"health":"true"'; }
kube_proxy_healthy() { curl --silent --fail --max-time 2 http://127.0.0.1:10256/healthz >/dev/null; }
default_sa_exists() { realnode::api /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1; }

start etcd "${BIN_DIR}/etcd" --name=realnode --data-dir="${RN_STATE}/etcd" \
	--listen-client-urls="http://127.0.0.1:${RN_ETCD_PORT}" --advertise-client-urls="http://127.0.0.1:${RN_ETCD_PORT}" \
	--listen-peer-urls="http://127.0.0.1:${RN_ETCD_PEER_PORT}" --initial-advertise-peer-urls="http://127.0.0.1:${RN_ETCD_PEER_PORT}" \
	--initial-cluster="realnode=http://127.0.0.1:${RN_ETCD_PEER_PORT}" --initial-cluster-state=new \
	--listen-metrics-urls="http://127.0.0.1:${RN_ETCD_METRICS_PORT}" --unsafe-no-fsync --log-level=warn

# containerd's registry traffic goes to a dead loopback proxy: an image that was not imported
# fails at once ("proxyconnect tcp: dial tcp 127.0.0.1:9") and is never fetched from anywhere.
start containerd env HTTP_PROXY="${RN_DEAD_PROXY}" HTTPS_PROXY="${RN_DEAD_PROXY}" NO_PROXY= \
	"$(command -v containerd)" --config "${RN_CONFIG}/containerd.toml"

wait_for etcd "etcd healthy on 127.0.0.1:${RN_ETCD_PORT}" etcd_healthy

start kube-apiserver "${BIN_DIR}/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:${RN_ETCD_PORT}" \
	--bind-address="${RN_NODE_IP}" --advertise-address="${RN_NODE_IP}" --secure-port="${RN_APISERVER_PORT}" \
	--cert-dir="${RN_STATE}/apiserver-certs" \
	--tls-cert-file="${RN_PKI}/apiserver.crt" --tls-private-key-file="${RN_PKI}/apiserver.key" \
	--client-ca-file="${RN_PKI}/ca.crt" \
	--kubelet-client-certificate="${RN_PKI}/apiserver-kubelet-client.crt" \
	--kubelet-client-key="${RN_PKI}/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP \
	--authorization-mode=Node,RBAC \
	--enable-admission-plugins=NodeRestriction \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="${RN_PKI}/sa.pub" --service-account-signing-key-file="${RN_PKI}/sa.key" \
	--service-cluster-ip-range="${RN_SERVICE_CIDR}" \
	--allow-privileged=true --profiling=false

# While the apiserver starts: the sandbox and DNS images first (the kubelet needs them), every
# other archive in the background (an operator image is hundreds of MB).
wait_for containerd "containerd serving on ${RN_SOCK}" realnode::ctr version
realnode::import "${RN_IMAGES}/pause.tar" "${RN_IMAGES}/coredns.tar" 2>>"${RN_LOGS}/import.log" ||
	fail import "importing the pause and CoreDNS images failed"
import_all 2>>"${RN_LOGS}/import.log" &
import_pid=$!

wait_for kube-apiserver "kube-apiserver ready on ${RN_APISERVER}" realnode::api_ready

start kube-controller-manager "${BIN_DIR}/kube-controller-manager" \
	--kubeconfig="${RN_PKI}/kube-controller-manager.kubeconfig" \
	--authentication-kubeconfig="${RN_PKI}/kube-controller-manager.kubeconfig" \
	--authorization-kubeconfig="${RN_PKI}/kube-controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false \
	--controllers='*,-service-lb-controller,-node-route-controller,-cloud-node-lifecycle-controller' \
	--allocate-node-cidrs=true --cluster-cidr="${RN_CLUSTER_CIDR}" --node-cidr-mask-size=24 \
	--service-cluster-ip-range="${RN_SERVICE_CIDR}" \
	--use-service-account-credentials=true \
	--service-account-private-key-file="${RN_PKI}/sa.key" --root-ca-file="${RN_PKI}/ca.crt" \
	--cluster-signing-cert-file="${RN_PKI}/ca.crt" --cluster-signing-key-file="${RN_PKI}/ca.key"

start kube-scheduler "${BIN_DIR}/kube-scheduler" \
	--kubeconfig="${RN_PKI}/kube-scheduler.kubeconfig" \
	--authentication-kubeconfig="${RN_PKI}/kube-scheduler.kubeconfig" \
	--authorization-kubeconfig="${RN_PKI}/kube-scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false

start kubelet "${BIN_DIR}/kubelet" --config="${RN_CONFIG}/kubelet-config.yaml" \
	--kubeconfig="${RN_PKI}/kubelet.kubeconfig" --root-dir="${RN_STATE}/kubelet" \
	--node-ip="${RN_NODE_IP}" --hostname-override="${RN_NODE_NAME}" --v=1

start kube-proxy "${BIN_DIR}/kube-proxy" --config="${RN_CONFIG}/kube-proxy-config.yaml" --v=1

# CoreDNS: its objects go in now; the scheduler places the pod once the node is Ready.
# create_manifest FILE: POSTs each document of FILE (YAML) to its collection; 409 (exists) is
# fine; other failures are retried for up to 10 s (kube-system may not exist yet).
create_manifest() {
	local file="$1" doc kind ns path code tries
	local dir="${RN_STATE}/manifests"
	rm -rf "${dir}"
	mkdir -p "${dir}"
	sed "s|@COREDNS_IMAGE@|${RN_COREDNS_IMAGE}|g" "${file}" |
		awk -v dir="${dir}" 'BEGIN { n = 0; f = sprintf("%s/%02d.yaml", dir, n) }
			/^---$/ { n++; f = sprintf("%s/%02d.yaml", dir, n); next }
			{ print > f }'
	for doc in "${dir}"/*.yaml; do
		kind="$(awk '/^kind:/ { print $2; exit }' "${doc}")"
		[[ -n "${kind}" ]] || continue
		ns="$(awk '/^  namespace:/ { print $2; exit }' "${doc}")"
		case "${kind}" in
		ServiceAccount | ConfigMap | Service) path="/api/v1/namespaces/${ns}/${kind,,}s" ;;
		Deployment) path="/apis/apps/v1/namespaces/${ns}/deployments" ;;
		ClusterRole | ClusterRoleBinding) path="/apis/rbac.authorization.k8s.io/v1/${kind,,}s" ;;
		*) fail "" "${file}: no API path known for kind ${kind}" ;;
		esac
		for ((tries = 0; ; tries++)); do
			code="$(realnode::api "${path}" -X POST -H 'Content-Type: application/yaml' \
				--data-binary "@${doc}" -o "${doc}.out" -w '%{http_code}' 2>/dev/null)" || true
			[[ "${code}" == 201 || "${code}" == 409 ]] && break
			((tries < 50)) || fail kube-apiserver "creating ${kind} from ${file} failed (HTTP ${code}): $(cat "${doc}.out" 2>/dev/null)"
			sleep 0.2
		done
	done
}
create_manifest "${REPO_ROOT}/hack/realnode/coredns/coredns.yaml"

wait_for kubelet "node ${RN_NODE_NAME} Ready" realnode::node_ready
node_ready_at="$(elapsed)"
wait_for kube-controller-manager "ServiceAccount default/default" default_sa_exists
wait_for kube-proxy "kube-proxy healthz" kube_proxy_healthy
wait_for kubelet "CoreDNS available (Service kube-dns ${RN_DNS_SVC_IP})" realnode::dns_ready
wait "${import_pid}" || fail import "importing the image archives failed"
up_done=1
trap - ERR INT TERM
log::info "$(realnode::ctr images ls -q | grep -c -v -e '^sha256:' -e '@sha256:' || true) images in containerd (namespace k8s.io)"

log::info "node ${RN_NODE_NAME} Ready after ${node_ready_at}s; up in $(elapsed)s (apiserver ${RN_APISERVER}, logs in ${RN_LOGS})"
echo "real node ready: export KUBECONFIG=${RN_KUBECONFIG}"

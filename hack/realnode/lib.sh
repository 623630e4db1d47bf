#!/usr/bin/env bash
# What hack/realnode-up.sh, realnode-down.sh and realnode-load.sh share about the real node
# (as hack/lib/cluster.sh serves the simulated cluster): where its files are, its addresses and
# ports, the machine settings it changes and realnode-down.sh puts back, its processes, its
# lock, the API and containerd clients, and the images it builds. Sourced after
# hack/lib/init.sh; defines variables and functions, runs nothing.
#
# Layout of REALNODE_DIR (default <repo>/.local/realnode):
#   state/      everything a running node writes: etcd, containerd's root and state (its
#               socket), the kubelet's root, pod logs, CNI IPAM, pids; deleted by realnode-down.sh
#   baseline/   the machine as it was before realnode-up.sh (sysctls, host paths, nft tables,
#               links, mounts); realnode-down.sh restores from it and removes it when clean
#   pki/        CA, certificates, keys and per-component kubeconfigs (made once, kept)
#   config/     containerd, CNI, kubelet and kube-proxy configuration (rewritten by every up)
#   logs/       component logs of the current or last run (logs/previous: the run before)
#   images/     the pause and CoreDNS image archives (rebuilt when their inputs change) and
#               any other *.tar to import at start
#   kubeconfig  admin kubeconfig (certificates embedded), present while the node is up

# shellcheck disable=SC2034 # the RN_* settings are read by the scripts that source this file
REALNODE_DIR="${REALNODE_DIR:-${REPO_ROOT}/.local/realnode}"

# Addresses. The bridge's host address is the node address and the apiserver's: a Service
# endpoint may not be a loopback address, and pods reach the API through the `kubernetes`
# Service. Everything else listens on 127.0.0.1. The ports stay clear of the simulated cluster's
# (hack/cluster-up.sh: 23790, 23800, 26443, 26257, 26259, 26250).
RN_NODE_NAME=realnode
RN_BRIDGE=rn0
RN_NODE_IP=10.88.0.1
RN_POD_SUBNET=10.88.0.0/24   # host-local IPAM range of the node's pods
RN_CLUSTER_CIDR=10.88.0.0/16 # kube-controller-manager gives the node podCIDR 10.88.0.0/24
RN_SERVICE_CIDR=10.96.0.0/16
RN_KUBERNETES_SVC_IP=10.96.0.1
RN_DNS_SVC_IP=10.96.0.10
RN_ETCD_PORT=32379
RN_ETCD_PEER_PORT=32380
RN_ETCD_METRICS_PORT=32381
RN_APISERVER_PORT=6443
RN_APISERVER="https://${RN_NODE_IP}:${RN_APISERVER_PORT}"
# Local ports the components bind (127.0.0.1): kube-controller-manager, kube-scheduler,
# kubelet healthz, kube-proxy metrics and healthz. 6443 and 10250 (on 10.88.0.1) also clash
# with a listener on 0.0.0.0, which a connection to 127.0.0.1 finds.
RN_LOCAL_PORTS=("${RN_ETCD_PORT}" "${RN_ETCD_PEER_PORT}" "${RN_ETCD_METRICS_PORT}" 10257 10259 10248 10249 10256 "${RN_APISERVER_PORT}" 10250)
RN_NFT_TABLE=realnode # nft table "inet realnode": the egress guard
# containerd's registry traffic goes here: a dead loopback port (nothing may be pulled).
RN_DEAD_PROXY=http://127.0.0.1:9

# Image names: local only (imagePullPolicy Never), built by realnode::image.
RN_PAUSE_IMAGE=localhost/pulumi-operator/realnode/pause:1.0
RN_COREDNS_VERSION="$(sed -n 's|^\tgithub.com/coredns/coredns \(v[0-9.]*\).*|\1|p' "${REPO_ROOT}/hack/tools/coredns/go.mod" 2>/dev/null | head -n1)"
RN_COREDNS_IMAGE="localhost/pulumi-operator/realnode/coredns:${RN_COREDNS_VERSION:-unknown}"

# The processes realnode-up.sh starts, in start order; realnode-down.sh stops them in groups.
RN_COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

# Sysctls that realnode-up.sh, the kubelet or kube-proxy may change; realnode-down.sh writes
# back the values recorded before. (The kubelet sets vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1; up sets ip_forward and bridge-nf-call-*.)
RN_SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
	net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.netfilter.nf_conntrack_max
	net.netfilter.nf_conntrack_tcp_timeout_established net.netfilter.nf_conntrack_tcp_timeout_close_wait)
# Host paths containerd 1.6, the kubelet and libcni write whatever their configured roots;
# realnode-down.sh removes each one that did not exist before.
RN_HOST_PATHS=(/var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni /run/containerd /run/netns /opt/containerd /etc/cni)

# realnode::paths: makes REALNODE_DIR absolute (creating it) and sets the paths below it.
realnode::paths() {
	mkdir -p "${REALNODE_DIR}"
	REALNODE_DIR="$(cd "${REALNODE_DIR}" && pwd)"
	realnode::_set_paths
}

# realnode::paths_if_exists: as realnode::paths without creating REALNODE_DIR; fails when it
# does not exist.
realnode::paths_if_exists() {
	[[ -d "${REALNODE_DIR}" ]] || return 1
	REALNODE_DIR="$(cd "${REALNODE_DIR}" && pwd)"
	realnode::_set_paths
}

realnode::_set_paths() {
	RN_STATE="${REALNODE_DIR}/state"
	RN_PIDS="${RN_STATE}/pids"
	RN_BASELINE="${REALNODE_DIR}/baseline"
	RN_PKI="${REALNODE_DIR}/pki"
	RN_CONFIG="${REALNODE_DIR}/config"
	RN_LOGS="${REALNODE_DIR}/logs"
	RN_IMAGES="${REALNODE_DIR}/images"
	RN_KUBECONFIG="${REALNODE_DIR}/kubeconfig"
	RN_SOCK="${RN_STATE}/containerd/containerd.sock"
}

# realnode::lock: one realnode-up/realnode-down at a time per REALNODE_DIR (proc::lock on
# REALNODE_DIR/.lock, 120 s), as cluster::lock. Exports REALNODE_LOCK_HELD=1 so that the
# realnode-down.sh that realnode-up.sh runs does not wait for its caller's lock.
realnode::lock() {
	local rc=0
	[[ -z "${REALNODE_LOCK_HELD:-}" ]] || return 0
	proc::lock "${REALNODE_DIR}/.lock" "${RN_COMPONENTS[@]}" || rc=$?
	case "${rc}" in
	0 | 3) ;;
	*) log::die "could not lock ${REALNODE_DIR}/.lock: another realnode-up/realnode-down is running" ;;
	esac
	export REALNODE_LOCK_HELD=1
}

# realnode::pid NAME: the recorded pid of component NAME when that process is alive and is NAME.
realnode::pid() { proc::pid_from_file "${RN_PIDS}/$1.pid" "$1"; }

# realnode::pids NAME: every live NAME process of this node: the recorded pid plus any NAME
# process whose arguments mention REALNODE_DIR (a lost pid file).
realnode::pids() { proc::find "${RN_PIDS}/$1.pid" "${REALNODE_DIR}/" "$1"; }

# realnode::api PATH [CURL_ARG...]: a request to the node's apiserver as the admin (client
# certificate, server verified against the node's CA); 5 s at most. Prints the body; fails on
# a connection error or an HTTP status >= 400.
realnode::api() {
	local path="$1"
	shift
	curl --silent --show-error --fail --max-time 5 --user-agent realnode \
		--cacert "${RN_PKI}/ca.crt" --cert "${RN_PKI}/admin.crt" --key "${RN_PKI}/admin.key" \
		"$@" "${RN_APISERVER}${path}"
}

# realnode::api_ready: the apiserver answers /readyz with "ok".
realnode::api_ready() { [[ "$(realnode::api /readyz 2>/dev/null)" == ok ]]; }

# realnode::node_ready: Node realnode has condition Ready=True.
realnode::node_ready() {
	realnode::api "/api/v1/nodes/${RN_NODE_NAME}" 2>/dev/null | tr -d '[:space:]' |
		grep -q '"type":"Ready","status":"True"'
}

# realnode::dns_ready: Deployment kube-system/coredns has an available replica.
realnode::dns_ready() {
	realnode::api /apis/apps/v1/namespaces/kube-system/deployments/coredns 2>/dev/null | tr -d '[:space:]' |
		grep -qE '"availableReplicas":[1-9]'
}

# realnode::ctr ARG...: ctr against the node's containerd, namespace k8s.io (the CRI plugin's).
realnode::ctr() { ctr --address "${RN_SOCK}" --namespace k8s.io "$@"; }

# realnode::import TAR...: imports image archives (docker save / buildah docker-archive or OCI)
# into the node's containerd and unpacks them for the CRI. An archive whose path, size and
# modification time are those of its last import into this containerd is skipped (marker in
# state/imported). Logs each image name; returns 1 if an import failed.
realnode::import() {
	local tar key stamp want out failed=0
	mkdir -p "${RN_STATE}/imported"
	for tar in "$@"; do
		[[ -f "${tar}" ]] || { log::error "no such image archive: ${tar}"; failed=1; continue; }
		tar="$(cd "$(dirname "${tar}")" && pwd)/$(basename "${tar}")"
		key="$(sha256sum <<<"${tar}" | cut -c1-16)"
		stamp="${RN_STATE}/imported/${key}"
		want="$(stat -c '%s %Y' "${tar}") ${tar}"
		if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
			log::info "skipped ${tar}: imported before and unchanged since"
			continue
		fi
		if ! out="$(realnode::ctr images import "${tar}" 2>&1)"; then
			log::error "importing ${tar}: ${out}"
			failed=1
			continue
		fi
		echo "${want}" >"${stamp}"
		log::info "imported $(awk '/^unpacking /{print $2}' <<<"${out}" | tr '\n' ' ')from ${tar##*/}"
	done
	return "${failed}"
}

# realnode::image NAME CONTAINERFILE FILE...: makes REALNODE_DIR/images/<base of NAME>.tar, a
# docker archive of image NAME built with buildah (hack/lib/buildah.sh, --pull=never) from
# CONTAINERFILE with a build context holding only FILEs, unless the archive exists and its stamp
# (images/.stamps/<base>) is the SHA-256 of NAME, CONTAINERFILE and the FILEs it was built from.
realnode::image() {
	local name="$1" containerfile="$2" base want ctx f start=${SECONDS} run_dir_existed=0 built=0
	shift 2
	base="${name##*/}"
	base="${base%%:*}"
	want="$({
		echo "${name}"
		cat "${containerfile}"
		sha256sum "$@" | cut -d' ' -f1
	} | sha256sum | cut -d' ' -f1)"
	mkdir -p "${RN_IMAGES}/.stamps"
	if [[ -f "${RN_IMAGES}/${base}.tar" && "$(cat "${RN_IMAGES}/.stamps/${base}" 2>/dev/null)" == "${want}" ]]; then
		return 0
	fi
	if [[ -z "${BUILDAH_DIR:-}" ]]; then buildah::init; fi
	# buildah::init installs netavark only together with buildah; its containers.conf needs it.
	if [[ ! -x /usr/lib/podman/netavark ]]; then
		log::info "installing netavark (Debian package; buildah's network backend)"
		apt-get install -y -qq --no-install-recommends netavark >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends netavark >/dev/null 2>&1; } ||
			log::die "could not install netavark: install the Debian package netavark"
	fi
	# buildah's network library makes /run/containers/networks whatever containers.conf says.
	[[ ! -e /run/containers ]] || run_dir_existed=1
	ctx="$(mktemp -d "${REALNODE_DIR}/build.XXXXXX")"
	for f in "$@"; do cp -p "${f}" "${ctx}/"; done
	rm -f "${RN_IMAGES}/.stamps/${base}" "${RN_IMAGES}/${base}.tar"
	# The previous build of NAME would stay in buildah's storage as an untagged image.
	buildah rmi "${name}" >/dev/null 2>&1 || true
	if buildah build --pull=never --quiet -f "${containerfile}" -t "${name}" "${ctx}" >"${ctx}.log" 2>&1 &&
		buildah push --quiet "${name}" "docker-archive:${RN_IMAGES}/${base}.tar.tmp:${name}" >>"${ctx}.log" 2>&1; then
		built=1
	fi
	if ((!run_dir_existed)) && [[ -d /run/containers ]]; then
		find /run/containers -depth -type d -empty -delete 2>/dev/null || true
	fi
	if ((!built)); then
		cat "${ctx}.log" >&2
		rm -rf "${ctx}" "${ctx}.log" "${RN_IMAGES}/${base}.tar.tmp"
		log::die "building image ${name} failed"
	fi
	mv -f "${RN_IMAGES}/${base}.tar.tmp" "${RN_IMAGES}/${base}.tar"
	echo "${want}" >"${RN_IMAGES}/.stamps/${base}"
	rm -rf "${ctx}" "${ctx}.log"
	log::info "built image ${name} into ${RN_IMAGES}/${base}.tar ($((SECONDS - start))s)"
}

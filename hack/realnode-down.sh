#!/usr/bin/env bash
# Stops the real node started by hack/realnode-up.sh and puts the machine back exactly as it
# was, then checks for leftovers against the machine as realnode-up.sh found it.
#
# Usage: hack/realnode-down.sh [--purge]
#   --purge   also delete REALNODE_DIR (PKI, config, logs, the pause/CoreDNS image archives);
#             archives elsewhere (<repo>/.local/images) are not touched
# Environment: REALNODE_DIR [<repo>/.local/realnode], REALNODE_STOP_GRACE seconds between
# SIGTERM and SIGKILL [10]. Safe when nothing (or only part) is running. Exits 1 when anything
# is left (the check names it; the baseline is kept for the next run).
#
# In order: pods deleted through the API (so the kubelet and containerd tear down their network:
# CNI DEL, veths, netns), the processes by recorded pid (TERM, then KILL), leftover containerd
# tasks, shims and pod processes, mounts, veths, the rn0 bridge, the nft table "inet realnode",
# every KUBE-*/CNI-* iptables chain and the rules jumping to them (v4 and v6, nft and legacy;
# other rules stay), the empty nft tables iptables-nft created, conntrack entries of the node's
# ranges, the recorded sysctls, the kubepods cgroups, libcni's cache entries, the host paths
# that did not exist before, REALNODE_DIR/state and the kubeconfig.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
# shellcheck source=hack/realnode/lib.sh
source "${REPO_ROOT}/hack/realnode/lib.sh"
GRACE="${REALNODE_STOP_GRACE:-10}"
util::down_args "$@"
if realnode::paths_if_exists; then
	realnode::lock
else
	# No directory: nothing recorded, but the machine is still checked for leftovers by name.
	realnode::_set_paths
fi
START=${SECONDS}
problems=0

# baseline_has FILE LINE: LINE is in baseline FILE (false when there is no baseline).
baseline_has() { [[ -f "${RN_BASELINE}/$1" ]] && grep -qxF -- "$2" "${RN_BASELINE}/$1"; }

# stop_components NAME...: stops every live process of the named components (proc::stop).
stop_components() {
	local name pid
	local -a targets=()
	for name in "$@"; do
		for pid in $(realnode::pids "${name}"); do targets+=("${pid}:${name}"); done
	done
	((${#targets[@]})) || return 0
	proc::stop TERM "${GRACE}" "${targets[@]}" || problems=1
	for name in "$@"; do rm -f "${RN_PIDS}/${name}.pid"; done
}

# ours_kubepods: the kubepods cgroup trees that the node's kubelet made (absent before up).
ours_kubepods() {
	local d
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
		[[ -d "${d}" ]] && ! baseline_has cgroups "${d}" && echo "${d}"
	done
	return 0
}

# 1. Pods: with the controllers and the scheduler stopped nothing recreates them; deleting them
#    through the API makes the kubelet stop them for real (CNI DEL, netns removed, volumes
#    unmounted). Bounded: 45 s.
if [[ -n "$(realnode::pids kube-apiserver)" && -n "$(realnode::pids kubelet)" && -n "$(realnode::pids containerd)" ]]; then
	stop_components kube-controller-manager kube-scheduler
	if namespaces="$(realnode::api /api/v1/pods 2>/dev/null | grep -o '"namespace":"[^"]*"' | cut -d'"' -f4 | sort -u)"; then
		log::info "deleting all pods through the API (the kubelet stops them and tears down their network)"
		for ns in ${namespaces}; do
			realnode::api "/api/v1/namespaces/${ns}/pods?gracePeriodSeconds=1" -X DELETE -o /dev/null 2>/dev/null ||
				log::info "warning: could not delete the pods of namespace ${ns}"
		done
		deadline=$((SECONDS + 45))
		while ((SECONDS < deadline)); do
			if realnode::api /api/v1/pods 2>/dev/null | grep -q '"items":\[\]' && [[ -z "$(realnode::ctr tasks ls -q 2>/dev/null)" ]]; then
				break
			fi
			sleep 0.3
		done
		((SECONDS < deadline)) || log::info "warning: pods did not all stop within 45 s: killing what is left"
	fi
fi

# 2. The processes, clients of the apiserver first.
stop_components kube-proxy kubelet kube-controller-manager kube-scheduler
stop_components kube-apiserver
stop_components etcd

# 3. What containerd still runs (the kubelet was gone, or pods did not stop): kill and delete
#    the tasks, stop containerd, then end by pid any shim of our socket and any process left in
#    the kubepods cgroups.
if [[ -n "$(realnode::pids containerd)" ]]; then
	for t in $(realnode::ctr tasks ls -q 2>/dev/null); do realnode::ctr tasks kill -s SIGKILL "${t}" >/dev/null 2>&1; done
	for ((i = 0; i < 50; i++)); do
		[[ -z "$(realnode::ctr tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"')" ]] && break
		sleep 0.2
	done
	for t in $(realnode::ctr tasks ls -q 2>/dev/null); do realnode::ctr tasks delete -f "${t}" >/dev/null 2>&1; done
fi
stop_components containerd
shims=()
for pid in $(proc::find /dev/null " ${RN_SOCK} " containerd-shim-runc-v2); do shims+=("${pid}:containerd-shim-runc-v2"); done
((${#shims[@]} == 0)) || proc::stop KILL 2 "${shims[@]}" || problems=1
for d in $(ours_kubepods); do
	while read -r f; do
		while read -r pid; do
			log::info "killing pod process ${pid} (${f%/cgroup.procs})"
			kill -KILL "${pid}" 2>/dev/null
		done <"${f}"
	done < <(find "${d}" -name cgroup.procs 2>/dev/null)
done

# 4. Mounts made since up under the node's state, the kubelet's and containerd's host
#    directories and /run/netns/cni-*, deepest first.
is_ours_mount() {
	[[ "$1" == "${RN_STATE}"/* || "$1" == /var/lib/kubelet* || "$1" == /run/containerd* ||
		"$1" == /run/netns/cni-* || "$1" == /var/run/netns/cni-* ]] && ! baseline_has mounts "$1"
}
for pass in 1 2 3; do
	left=0
	while read -r m; do
		is_ours_mount "${m}" || continue
		umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || left=1
	done < <(awk '{ print $5 }' /proc/self/mountinfo | sed 's/\\040/ /g' | sort -ru)
	((left)) || break
done

# 5. Network: veths on the bridge, the bridge (its routes go with it), the nft guard.
if ip link show "${RN_BRIDGE}" >/dev/null 2>&1; then
	for v in $(ip -o link show master "${RN_BRIDGE}" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
		ip link del "${v}" 2>/dev/null
	done
	ip link del "${RN_BRIDGE}" && log::info "deleted bridge ${RN_BRIDGE}"
fi
if nft list table inet "${RN_NFT_TABLE}" >/dev/null 2>&1; then
	nft delete table inet "${RN_NFT_TABLE}" && log::info "deleted nft table inet ${RN_NFT_TABLE}"
fi

# 6. iptables, surgically (other rules on the machine stay): delete the rules that jump to a
#    KUBE-*/CNI-* chain, then flush and delete those chains. `*-save` never creates a table
#    (listing with `iptables-legacy -t X -S` would).
clean_iptables() { # IPTABLES-COMMAND (iptables-nft, ip6tables-legacy, ...)
	local ipt="$1" dump table line chain pass
	dump="$("${ipt}-save" 2>/dev/null)" || return 0
	grep -qE '(KUBE|CNI)-' <<<"${dump}" || return 0
	table=""
	while IFS= read -r line; do
		case "${line}" in
		\**) table="${line#\*}" ;;
		"-A "*)
			chain="${line#-A }"
			chain="${chain%% *}"
			[[ "${chain}" == KUBE-* || "${chain}" == CNI-* ]] && continue
			[[ "${line}" =~ \ -[jg]\ (KUBE|CNI)- ]] || continue
			# The saved rule is shell-quoted (comments): eval splits it as iptables-save wrote it.
			eval "${ipt} -w 5 -t ${table} -D ${line#-A }" || problems=1
			;;
		esac
	done <<<"${dump}"
	for pass in flush delete; do
		table=""
		while IFS= read -r line; do
			case "${line}" in
			\**) table="${line#\*}" ;;
			:KUBE-* | :CNI-*)
				chain="${line#:}"
				chain="${chain%% *}"
				if [[ "${pass}" == flush ]]; then
					"${ipt}" -w 5 -t "${table}" -F "${chain}" || problems=1
				else
					"${ipt}" -w 5 -t "${table}" -X "${chain}" || problems=1
				fi
				;;
			esac
		done <<<"${dump}"
	done
	log::info "removed the KUBE-*/CNI-* chains and the rules jumping to them ($ipt)"
}
for ipt in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
	command -v "${ipt}-save" >/dev/null 2>&1 && clean_iptables "${ipt}"
done
# iptables-nft leaves the tables it made (filter/nat/mangle with empty base chains): delete
# those that were not there before and hold no rule.
if [[ -f "${RN_BASELINE}/nft-tables" ]]; then
	while read -r _ family name; do
		[[ "${family}" == ip || "${family}" == ip6 ]] || continue
		[[ "${name}" == filter || "${name}" == nat || "${name}" == mangle ]] || continue
		baseline_has nft-tables "table ${family} ${name}" && continue
		if ! nft list table "${family}" "${name}" | grep -vE '^\s*(table|chain|type|policy|\}|$)' | grep -q .; then
			nft delete table "${family}" "${name}" && log::info "deleted the empty nft table ${family} ${name} (made by iptables-nft)"
		else
			log::error "nft table ${family} ${name} was made during the run but holds rules: left alone"
			problems=1
		fi
	done < <(nft list tables 2>/dev/null)
fi
if command -v conntrack >/dev/null 2>&1; then
	for r in "-s ${RN_CLUSTER_CIDR}" "-d ${RN_CLUSTER_CIDR}" "-d ${RN_SERVICE_CIDR}" "--reply-src ${RN_CLUSTER_CIDR}"; do
		# shellcheck disable=SC2086 # r is an option and its value
		conntrack -D ${r} >/dev/null 2>&1
	done
fi

# 7. Sysctls back to their recorded values.
if [[ -f "${RN_BASELINE}/sysctl" ]]; then
	while IFS='=' read -r k v; do
		[[ "$(sysctl -n "${k}" 2>/dev/null)" == "${v}" ]] && continue
		if sysctl -qw "${k}=${v}"; then log::info "restored ${k}=${v}"; else problems=1; fi
	done <"${RN_BASELINE}/sysctl"
fi

# 8. The kubepods cgroup trees of the kubelet (cgroupfs driver), deepest first.
for d in $(ours_kubepods); do
	find "${d}" -depth -type d -exec rmdir {} \; 2>/dev/null
	[[ -d "${d}" ]] && log::error "could not remove ${d}"
done

# 9. Host paths that did not exist before up (containerd 1.6, the kubelet and libcni write
#    there whatever their roots). Shared ones lose only the node's entries and go only if empty
#    then; /run/containerd only if no other containerd runs.
if [[ -f "${RN_BASELINE}/paths-existing" ]]; then
	# libcni's result cache: <network>-<sandbox id>-<interface>; the node's networks are
	# "realnode" (pods) and "cni-loopback" (containerd's lo), the latter only for the node's
	# sandboxes (their ids are directories in containerd's CRI state). CNI DEL removes them
	# when pods stop properly; after a crash they stay.
	rm -f /var/lib/cni/results/realnode-* 2>/dev/null
	for f in /var/lib/cni/results/cni-loopback-*-lo; do
		id="${f#/var/lib/cni/results/cni-loopback-}"
		id="${id%-lo}"
		[[ -n "${id}" && -d "${RN_STATE}/containerd/root/io.containerd.grpc.v1.cri/sandboxes/${id}" ]] && rm -f "${f}"
	done
	for p in /run/netns/cni-*; do
		[[ -e "${p}" ]] && ! grep -q " ${p} " /proc/self/mountinfo && rm -f "${p}"
	done
	for p in "${RN_HOST_PATHS[@]}"; do
		baseline_has paths-existing "${p}" && continue
		[[ -e "${p}" ]] || continue
		case "${p}" in
		/var/lib/cni | /run/netns | /etc/cni)
			find "${p}" -depth -type d -empty -delete 2>/dev/null
			if [[ -e "${p}" ]]; then log::info "left ${p}: it holds entries that are not the node's"; fi
			;;
		/run/containerd)
			if pgrep -x containerd >/dev/null; then
				log::info "left ${p}: another containerd runs"
			else
				rm -rf --one-file-system "${p}"
			fi
			;;
		*) rm -rf --one-file-system "${p}" ;;
		esac
	done
fi
if [[ -d "${RN_STATE}" ]]; then
	if grep -qF " ${RN_STATE}/" /proc/self/mountinfo; then
		log::error "mounts are left under ${RN_STATE}: not deleting it"
		problems=1
	else
		rm -rf --one-file-system "${RN_STATE}"
	fi
fi
rm -f "${RN_KUBECONFIG}"

# 10. Leftovers check: everything the node made, against the machine as up found it.
# ancestors: this script's pid and its parents' (never reported as leftovers).
ancestors=" "
pid=$$
while [[ "${pid}" =~ ^[0-9]+$ && "${pid}" != 0 ]]; do
	ancestors+="${pid} "
	pid="$(awk '/^PPid:/ { print $2 }' "/proc/${pid}/status" 2>/dev/null)"
done
left_processes() {
	local p pid
	local -a args
	for p in /proc/[0-9]*; do
		pid="${p#/proc/}"
		[[ "${ancestors}" == *" ${pid} "* ]] && continue
		proc::running "${pid}" || continue
		mapfile -d '' args 2>/dev/null <"${p}/cmdline" || continue
		((${#args[@]})) || continue
		# The node's components and shims name REALNODE_DIR in their arguments.
		[[ " ${RN_COMPONENTS[*]} containerd-shim-runc-v2 " == *" ${args[0]##*/} "* ]] || continue
		[[ " ${args[*]} " == *"${REALNODE_DIR}/"* ]] && echo "${pid}:${args[0]##*/}"
	done
	for d in $(ours_kubepods); do
		find "${d}" -name cgroup.procs -exec cat {} + 2>/dev/null | sed 's/$/:in-kubepods/'
	done
	return 0
}
left_mounts() { awk '{ print $5 }' /proc/self/mountinfo | while read -r m; do if is_ours_mount "${m}" || [[ "${m}" == "${REALNODE_DIR}"/* ]]; then echo "${m}"; fi; done; }
left_links() {
	ip -o link show | awk -F': ' '{ print $2 }' | cut -d@ -f1 | while read -r l; do
		if [[ "${l}" == "${RN_BRIDGE}" ]] || { [[ -f "${RN_BASELINE}/links" ]] && ! baseline_has links "${l}"; } ||
			{ [[ ! -f "${RN_BASELINE}/links" ]] && [[ "${l}" == veth* ]]; }; then
			echo "${l}"
		fi
	done
}
left_iptables() {
	local ipt
	for ipt in iptables-nft ip6tables-nft iptables-legacy ip6tables-legacy; do
		"${ipt}-save" 2>/dev/null | grep -E '(KUBE|CNI)-' | sed "s/^/${ipt}: /"
	done
	return 0
}
left_nft() {
	nft list tables 2>/dev/null | while read -r t; do
		if [[ "${t}" == "table inet ${RN_NFT_TABLE}" ]] || { [[ -f "${RN_BASELINE}/nft-tables" ]] && ! baseline_has nft-tables "${t}"; }; then
			echo "${t}"
		fi
	done
}
left_paths() {
	local p
	[[ -f "${RN_BASELINE}/paths-existing" ]] || return 0
	for p in "${RN_HOST_PATHS[@]}"; do
		if [[ -e "${p}" ]] && ! baseline_has paths-existing "${p}"; then echo "${p}"; fi
	done
	[[ ! -e "${RN_STATE}" ]] || echo "${RN_STATE}"
}
left_sysctls() {
	local k v
	[[ -f "${RN_BASELINE}/sysctl" ]] || return 0
	while IFS='=' read -r k v; do
		[[ "$(sysctl -n "${k}" 2>/dev/null)" == "${v}" ]] || echo "${k}=$(sysctl -n "${k}" 2>/dev/null) (was ${v})"
	done <"${RN_BASELINE}/sysctl"
}
echo "== realnode-down: leftovers check ($([[ -f "${RN_BASELINE}/links" ]] && echo "against the baseline of ${RN_BASELINE}" || echo "no baseline: by name only")) =="
leftovers=0
for check in processes mounts links iptables nft cgroups paths sysctls; do
	case "${check}" in
	cgroups) found="$(ours_kubepods)" ;;
	*) found="$("left_${check}")" ;;
	esac
	if [[ -z "${found}" ]]; then
		printf '%-10s none\n' "${check}:"
	else
		leftovers=1
		printf '%-10s LEFT: %s\n' "${check}:" "$(tr '\n' ' ' <<<"${found}")"
	fi
done
if ((leftovers || problems)); then
	log::error "the machine is not back as it was (see above); the baseline stays in ${RN_BASELINE} for the next realnode-down.sh"
	exit 1
fi
rm -rf "${RN_BASELINE}"
if ((PURGE)) && [[ -d "${REALNODE_DIR}" ]]; then
	log::info "stopped the real node and put the machine back as it was ($((SECONDS - START))s)"
	util::purge "${REALNODE_DIR}" "a real node directory (no pki/, config/ or images/)" pki config images || exit 1
else
	log::info "stopped the real node and put the machine back as it was ($((SECONDS - START))s; logs kept in ${RN_LOGS})"
fi

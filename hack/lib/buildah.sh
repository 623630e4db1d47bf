#!/usr/bin/env bash
# buildah, confined to the project: the daemonless image builder (Debian package) that
# `make image` and the real node's images use when there is no Docker engine. Every piece of
# its state (image storage, run state, temporary files, network settings) stays under
# BUILDAH_DIR; nothing is pulled: short names resolve only against local storage, and builds
# run with --pull=never.

# buildah::init [DIR]: installs buildah (and netavark, so that apt does not pick the CNI plugins
# for it) when it is missing, writes its configuration under DIR (default
# <repo>/.local/buildah) and exports the variables that point buildah there (CONTAINERS_*,
# BUILDAH_ISOLATION=chroot: RUN steps need no OCI runtime, TMPDIR). Needs root.
buildah::init() {
	BUILDAH_DIR="${1:-${REPO_ROOT}/.local/buildah}"
	# netavark is checked on its own: a buildah installed without it fails every build with
	# "could not find netavark" under the containers.conf below.
	if ! command -v buildah >/dev/null 2>&1 || [[ ! -x /usr/lib/podman/netavark ]]; then
		log::info "installing buildah and netavark (Debian packages)"
		apt-get install -y -qq --no-install-recommends buildah netavark >/dev/null ||
			{ apt-get update -qq && apt-get install -y -qq --no-install-recommends buildah netavark >/dev/null; } ||
			log::die "could not install buildah: install the Debian packages buildah and netavark"
	fi
	# buildah's network library creates /run/containers/networks on every build whatever
	# containers.conf says; buildah::cleanup removes it again when it was not there before.
	BUILDAH_RUN_DIR_EXISTED=0
	[[ ! -e /run/containers ]] || BUILDAH_RUN_DIR_EXISTED=1
	mkdir -p "${BUILDAH_DIR}/containers/networks" "${BUILDAH_DIR}/tmp"
	BUILDAH_DIR="$(cd "${BUILDAH_DIR}" && pwd)"
	cat >"${BUILDAH_DIR}/containers/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "${BUILDAH_DIR}/storage"
runroot = "${BUILDAH_DIR}/runroot"
[storage.options.overlay]
mountopt = "nodev"
CONF
	cat >"${BUILDAH_DIR}/containers/registries.conf" <<CONF
# No search registries: short names resolve only against local storage; nothing is pulled.
unqualified-search-registries = []
short-name-mode = "permissive"
CONF
	cat >"${BUILDAH_DIR}/containers/containers.conf" <<CONF
# Keep the network backend's state out of /etc/cni and /etc/containers (builds use --network host).
[network]
network_backend = "netavark"
network_config_dir = "${BUILDAH_DIR}/containers/networks"
CONF
	export CONTAINERS_STORAGE_CONF="${BUILDAH_DIR}/containers/storage.conf"
	export CONTAINERS_REGISTRIES_CONF="${BUILDAH_DIR}/containers/registries.conf"
	export CONTAINERS_CONF="${BUILDAH_DIR}/containers/containers.conf"
	export BUILDAH_ISOLATION=chroot
	export TMPDIR="${BUILDAH_DIR}/tmp"
}

# buildah::cleanup: removes the empty /run/containers tree a build made, when buildah::init found
# none (call it when the builds are done, e.g. from an EXIT trap).
buildah::cleanup() {
	if [[ "${BUILDAH_RUN_DIR_EXISTED:-1}" == "0" && -d /run/containers ]]; then
		find /run/containers -depth -type d -empty -delete 2>/dev/null || true
	fi
}

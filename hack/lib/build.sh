#!/usr/bin/env bash
# Stamped `go build`s of the tools modules under hack/tools (hack/build-tools.sh, build-helm.sh,
# build-minio.sh). Each module is its own go.mod, so the dependency graphs never meet; a binary
# is rebuilt only when what it was built from changed, told by a stamp file beside it.

# build::init DEST: sets BUILD_DEST (DEST, created, absolute), BUILD_STAMPS (BUILD_DEST/.stamps),
# FORCE (from the environment, default 0) and GO_VERSION; exits 1 when go is not on PATH.
build::init() {
	mkdir -p "$1"
	BUILD_DEST="$(cd "$1" && pwd)"
	BUILD_STAMPS="${BUILD_DEST}/.stamps"
	mkdir -p "${BUILD_STAMPS}"
	FORCE="${FORCE:-0}"
	command -v go >/dev/null 2>&1 || {
		log::info "go is not on PATH"
		exit 1
	}
	GO_VERSION="$(go env GOVERSION)"
}

# build::module_version DIR MODULE: the version of MODULE in the tools module DIR's build list.
build::module_version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build::go NAME MODULE_DIR PACKAGE LDFLAGS [GO_BUILD_FLAG...]: builds PACKAGE of the module in
# MODULE_DIR into BUILD_DEST/NAME (-trimpath: independent of where the checkout and module cache
# are), unless FORCE=1 is unset and the stamp BUILD_STAMPS/NAME is the SHA-256 of the Go
# version, PACKAGE, LDFLAGS, go.mod and go.sum it was built from. The stamp leaves out
# GO_BUILD_FLAGs and the environment (CGO_ENABLED=0 ...), as it always has, so existing stamps
# stay valid. Prints "NAME: up to date (PATH)" or "NAME: built PATH (Ns)".
build::go() {
	local name="$1" dir="$2" pkg="$3" ldflags="$4"
	shift 4
	local out="${BUILD_DEST}/${name}" stamp_file="${BUILD_STAMPS}/${name}" want start
	want="$({
		echo "go=${GO_VERSION}"
		echo "args=${pkg} ${ldflags}"
		cat "${dir}/go.mod" "${dir}/go.sum"
	} | sha256sum | cut -d' ' -f1)"
	if [[ "${FORCE}" != "1" && -x "${out}" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${want}" ]]; then
		echo "${name}: up to date (${out})"
		return 0
	fi
	start=${SECONDS}
	rm -f "${stamp_file}"
	(cd "${dir}" && go build "$@" -trimpath -ldflags "${ldflags}" -o "${out}.tmp" "${pkg}")
	mv -f "${out}.tmp" "${out}"
	echo "${want}" >"${stamp_file}"
	echo "${name}: built ${out} ($((SECONDS - start))s)"
}

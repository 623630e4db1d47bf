#!/usr/bin/env bash
# Local stand-ins for the Dockerfile's base images, for machines that reach no registry
# (`make image` without a Docker engine). Built with buildah (hack/lib/buildah.sh) from this
# machine's files and Debian packages, never pulled, and passed to the Dockerfile through its
# build arguments:
#
#   BUILD_IMAGE    localhost/pulumi-operator/build-base:<go version>  (for golang:1.26) FROM scratch:
#                  busybox-static (Debian package) for /bin/sh, the host's Go toolchain
#                  (/usr/local/go, `go env GOROOT`), the host's CA bundle (TLS to the Go module
#                  proxy may go through a proxy whose CA only the host knows) and its GOPROXY,
#                  GOSUMDB and GOFLAGS. Only the build stage uses it; no image users get holds it.
#   RUNTIME_IMAGE  localhost/pulumi-operator/static-base:nonroot  (for gcr.io/distroless/static-
#                  debian12:nonroot) FROM scratch: the users of distroless (root 0, nonroot 65532,
#                  nobody), /home/nonroot 0700 owned by 65532, /tmp 1777, Debian's CA bundle
#                  (/usr/share/ca-certificates, the ca-certificates package, not the host's
#                  additions), USER 65532, WORKDIR /home/nonroot: what distroless's
#                  common/BUILD.bazel makes.
#
# Usage: hack/image-bases.sh     prints "BUILD_IMAGE=... RUNTIME_IMAGE=..." on its last line
# Each image is rebuilt only when what it is made from changed (a stamp in .local/image-bases).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
LOG_NAME=image-bases
buildah::init
trap buildah::cleanup EXIT
WORK="${REPO_ROOT}/.local/image-bases"
mkdir -p "${WORK}"

if [[ ! -x /bin/busybox ]] || ! file -b /bin/busybox 2>/dev/null | grep -q static; then
	log::info "installing busybox-static (Debian package: the build image's /bin/sh)"
	apt-get install -y -qq --no-install-recommends busybox-static >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends busybox-static >/dev/null; } ||
		log::die "could not install busybox-static"
fi
if [[ ! -d /usr/share/ca-certificates/mozilla ]]; then
	apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null || log::die "could not install ca-certificates"
fi

GOROOT="$(go env GOROOT)"
GOVER="$(go env GOVERSION)"
BUILD_IMAGE="localhost/pulumi-operator/build-base:${GOVER}"
RUNTIME_IMAGE="localhost/pulumi-operator/static-base:nonroot"

# image NAME DIR: buildah build of DIR/Containerfile as NAME unless DIR/stamp matches the
# stamp of the previous build and the image exists.
image() {
	local name="$1" dir="$2" want
	want="$(cat "${dir}/stamp.in" | sha256sum | cut -d' ' -f1)"
	if [[ -f "${dir}/stamp" && "$(cat "${dir}/stamp")" == "${want}" ]] && buildah inspect --type image "${name}" >/dev/null 2>&1; then
		log::info "${name}: up to date"
		return 0
	fi
	local t0=${SECONDS}
	buildah build -q --pull=never --isolation chroot --network host --layers=false -t "${name}" "${dir}" >/dev/null
	echo "${want}" >"${dir}/stamp"
	log::info "${name}: built ($((SECONDS - t0))s)"
}

# The build image.
B="${WORK}/build"
rm -rf "${B}/rootfs" && mkdir -p "${B}/rootfs/bin" "${B}/rootfs/tmp" "${B}/rootfs/etc/ssl/certs" "${B}/rootfs/root" "${B}/rootfs/go"
cp /bin/busybox "${B}/rootfs/bin/busybox"
for a in sh ls cp mv rm mkdir cat env chmod chown ln tar gzip true false echo; do ln -s busybox "${B}/rootfs/bin/${a}"; done
chmod 1777 "${B}/rootfs/tmp"
cp /etc/ssl/certs/ca-certificates.crt "${B}/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"${B}/rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' >"${B}/rootfs/etc/group"
cat >"${B}/Containerfile" <<CF
# A stand-in for golang:${GOVER#go} (hack/image-bases.sh): busybox's shell and the host's Go.
FROM scratch
COPY rootfs/ /
COPY --from=goroot . /usr/local/go
ENV PATH=/go/bin:/usr/local/go/bin:/bin GOPATH=/go GOTOOLCHAIN=local HOME=/root \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    GOPROXY=$(go env GOPROXY) GOSUMDB=$(go env GOSUMDB) GOFLAGS=$(go env GOFLAGS)
WORKDIR /go
CF
# COPY --from a directory needs a build context of that name: the Containerfile is built with
# --build-context goroot=GOROOT below.
{ echo "${GOVER} $(go env GOPROXY GOSUMDB GOFLAGS | tr '\n' ' ')"; cat "${B}/Containerfile"; sha256sum /bin/busybox /etc/ssl/certs/ca-certificates.crt; } >"${B}/stamp.in"
want="$(sha256sum <"${B}/stamp.in" | cut -d' ' -f1)"
if [[ -f "${B}/stamp" && "$(cat "${B}/stamp")" == "${want}" ]] && buildah inspect --type image "${BUILD_IMAGE}" >/dev/null 2>&1; then
	log::info "${BUILD_IMAGE}: up to date"
else
	t0=${SECONDS}
	buildah build -q --pull=never --isolation chroot --network host --build-context "goroot=${GOROOT}" -t "${BUILD_IMAGE}" "${B}" >/dev/null
	echo "${want}" >"${B}/stamp"
	log::info "${BUILD_IMAGE}: built ($((SECONDS - t0))s)"
fi

# The runtime image.
R="${WORK}/static"
rm -rf "${R}/rootfs" "${R}/home" && mkdir -p "${R}/rootfs/tmp" "${R}/rootfs/etc/ssl/certs" "${R}/rootfs/root" "${R}/home/nonroot"
chmod 1777 "${R}/rootfs/tmp"
chmod 0700 "${R}/rootfs/root" "${R}/home/nonroot"
# Debian's Mozilla bundle only (what ca-certificates generates), never this host's additions.
find /usr/share/ca-certificates/mozilla -name '*.crt' -print0 | sort -z | xargs -0 cat >"${R}/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"${R}/rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n' >"${R}/rootfs/etc/group"
cat >"${R}/Containerfile" <<'CF'
# A stand-in for gcr.io/distroless/static-debian12:nonroot (hack/image-bases.sh).
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 home/ /home/
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532:65532
WORKDIR /home/nonroot
CF
{ cat "${R}/Containerfile" "${R}/rootfs/etc/passwd" "${R}/rootfs/etc/group"; sha256sum "${R}/rootfs/etc/ssl/certs/ca-certificates.crt"; } >"${R}/stamp.in"
image "${RUNTIME_IMAGE}" "${R}"

echo "BUILD_IMAGE=${BUILD_IMAGE} RUNTIME_IMAGE=${RUNTIME_IMAGE}"

#!/usr/bin/env bash
# `make image`: the operator image (the Dockerfile's default target, `operator`) and the http
# server's (`--target http-server`), from the project's own Dockerfile, as docker archives in
# .local/images/ (pulumi-operator.tar, http-server.tar) under the names the chart, config/default
# and the operator's default spec.image use:
#   ghcr.io/pulumi-operator/pulumi-operator:<appVersion>, ghcr.io/pulumi-operator/http-server:<same>
# With a Docker engine (`docker info` answers) it runs `docker build` with the Dockerfile's
# defaults. Without one it uses buildah (daemonless, Debian package; hack/lib/buildah.sh) with
# --pull=never: the base images are local stand-ins (hack/image-bases.sh) passed as BUILD_IMAGE
# and RUNTIME_IMAGE, the host's Go module and build caches are mounted into the build stage (a
# rebuild compiles only what changed; nothing of them lands in an image), and the build
# downloads nothing but Go modules the host does not have.
#
# The provider plugin: PULUMI_KUBERNETES_PLUGIN_FILE (an archive or binary, as for `make
# plugins`), copied into .local/plugins/ in the build context and passed as the build argument
# of the same name, so `pulumi plugin install --file` downloads nothing. Without it, a file
# already in .local/plugins/ is used; with neither, the build downloads the official release.
#
# Ends by loading both archives into the real node when it runs (hack/realnode-load.sh).
# Usage: hack/image-build.sh
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
LOG_NAME=image

VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/pulumi-operator/Chart.yaml)"
[[ -n "${VERSION}" ]] || log::die "no appVersion in charts/pulumi-operator/Chart.yaml"
OPERATOR="ghcr.io/pulumi-operator/pulumi-operator:${VERSION}"
HTTP_SERVER="ghcr.io/pulumi-operator/http-server:${VERSION}"
PLUGIN_VERSION="$(awk '$1 == "github.com/pulumi/pulumi-kubernetes/sdk/v4" {print $2}' go.mod)"
OUT="${REPO_ROOT}/.local/images"
mkdir -p "${OUT}" .local/plugins

args=()
plugin=""
if [[ -n "${PULUMI_KUBERNETES_PLUGIN_FILE:-}" ]]; then
	[[ -f "${PULUMI_KUBERNETES_PLUGIN_FILE}" ]] || log::die "PULUMI_KUBERNETES_PLUGIN_FILE=${PULUMI_KUBERNETES_PLUGIN_FILE}: no such file"
	plugin=".local/plugins/$(basename "${PULUMI_KUBERNETES_PLUGIN_FILE}")"
	cmp -s "${PULUMI_KUBERNETES_PLUGIN_FILE}" "${plugin}" 2>/dev/null || cp "${PULUMI_KUBERNETES_PLUGIN_FILE}" "${plugin}"
else
	plugin="$(ls .local/plugins/pulumi-resource-kubernetes-"${PLUGIN_VERSION}"-* 2>/dev/null | head -1 || true)"
fi
if [[ -n "${plugin}" ]]; then
	args+=(--build-arg "PULUMI_KUBERNETES_PLUGIN_FILE=${plugin}")
	log::info "provider plugin from ${plugin} (nothing downloaded)"
else
	log::info "no PULUMI_KUBERNETES_PLUGIN_FILE: the build downloads the provider plugin ${PLUGIN_VERSION}"
fi

start=${SECONDS}
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
	docker build "${args[@]}" -t "${OPERATOR}" .
	docker build "${args[@]}" --target http-server -t "${HTTP_SERVER}" .
	docker save -o "${OUT}/pulumi-operator.tar" "${OPERATOR}"
	docker save -o "${OUT}/http-server.tar" "${HTTP_SERVER}"
else
	bases="$(hack/image-bases.sh | tail -1)"
	buildah::init
	trap buildah::cleanup EXIT
	for kv in ${bases}; do args+=(--build-arg "${kv}"); done
	# buildah 1.28 leaves TARGETOS/TARGETARCH empty unless given.
	args+=(--build-arg "TARGETOS=$(go env GOOS)" --build-arg "TARGETARCH=$(go env GOARCH)")
	args+=(--pull=never --isolation chroot --network host --layers
		-v "$(go env GOMODCACHE):/go/pkg/mod" -v "$(go env GOCACHE):/root/.cache/go-build")
	t0=${SECONDS}
	buildah build -q "${args[@]}" --target operator -t "${OPERATOR}" -f Dockerfile . >/dev/null
	log::info "${OPERATOR}: built ($((SECONDS - t0))s)"
	t0=${SECONDS}
	buildah build -q "${args[@]}" --target http-server -t "${HTTP_SERVER}" -f Dockerfile . >/dev/null
	log::info "${HTTP_SERVER}: built ($((SECONDS - t0))s)"
	for pair in "pulumi-operator.tar=${OPERATOR}" "http-server.tar=${HTTP_SERVER}"; do
		f="${OUT}/${pair%%=*}" ref="${pair#*=}"
		rm -f "${f}.tmp"
		buildah push -q "${ref}" "docker-archive:${f}.tmp:${ref}" >/dev/null
		mv -f "${f}.tmp" "${f}"
	done
	# Layers of earlier builds that no image uses any more.
	buildah rmi --prune >/dev/null 2>&1 || true
fi
log::info "images in ${OUT} ($((SECONDS - start))s): $(cd "${OUT}" && du -h pulumi-operator.tar http-server.tar | tr '\t\n' '  ')"

# The operator image's size against its budget, IMAGE_MAX_MB (MB = 1,000,000 bytes, the unit
# `docker images` shows; uncompressed: a docker archive holds its layers as plain tars). Most of
# it is three binaries: the provider plugin (the release's own, stripped already), the pinned CLI
# that is also the engine host, and the operator (-s -w); docs/design/engine-host.md ("The
# image") says what each weighs and why. A build over the budget fails, so that a new
# dependency or a lost -s -w is seen here and not in users' pulls.
# Why the budget is what it is, and when it last moved: docs/design/engine-host.md, "The image,
# and what still needs the CLI in the cluster".
IMAGE_MAX_MB="${IMAGE_MAX_MB:-400}"
image_bytes=$(stat -c %s "${OUT}/pulumi-operator.tar")
image_mb=$(( (image_bytes + 999999) / 1000000 ))
if (( image_mb > IMAGE_MAX_MB )); then
	log::die "the operator image is ${image_mb} MB (${image_bytes} bytes), over its budget IMAGE_MAX_MB=${IMAGE_MAX_MB}: see what grew (\`du -b bin/*\` after \`make build\`), or raise the budget in hack/image-build.sh with the reason"
fi
log::info "operator image: ${image_mb} MB, $(( (image_bytes + 1048575) / 1048576 )) MiB (budget ${IMAGE_MAX_MB} MB)"

if [[ -x hack/realnode-load.sh ]]; then
	status=0
	hack/realnode-load.sh "${OUT}/pulumi-operator.tar" "${OUT}/http-server.tar" || status=$?
	case "${status}" in
	0) log::info "loaded into the real node" ;;
	4) ;; # no node running: it imports .local/images/*.tar when it starts
	*) log::die "loading the images into the real node failed (${status})" ;;
	esac
fi

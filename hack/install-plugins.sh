#!/usr/bin/env bash
# Installs the Pulumi plugins the project runs with into its own Pulumi home, DEST/pulumi-home
# (plugins under DEST/pulumi-home/plugins/), with the pinned CLI DEST/pulumi:
#   resource kubernetes  at the version of github.com/pulumi/pulumi-kubernetes/sdk/v4 in go.mod
#                        (required: every up, preview, refresh and destroy needs it)
#   language go          at the Makefile's PULUMI_GO_LANGUAGE_VERSION (optional: only the plain
#                        `pulumi` CLI running this project as a `runtime: go` program needs it)
#
# The operator and its commands use DEST/pulumi-home when they run the pulumi CLI DEST/pulumi and
# PULUMI_HOME is not set (stack.DefaultPulumiHome), so `make run`, `make test` and bin/pulumi-operator
# find what this script installed.
#
# Where each plugin comes from, first match wins:
#   PULUMI_KUBERNETES_PLUGIN_FILE   a plugin tarball or binary: `pulumi plugin install --file`, no
#   PULUMI_GO_LANGUAGE_PLUGIN_FILE  network (the air-gapped install; CI sets both: .ci/run)
#   otherwise                       `pulumi plugin install` downloads the official release
#
# Exit status: non-zero when the Kubernetes provider cannot be installed, unless PLUGINS_REQUIRED=0
# (`make tools` outside CI), which prints the same error and goes on: the operator then reports
# PluginMissing and the tests that need the plugin SKIP. The Go language host is never required.
#
# Idempotent: a plugin already installed at the wanted version (and, when installed from a file,
# from a file with the same SHA-256) is kept, in well under a second. FORCE=1 reinstalls.
#
# Usage: hack/install-plugins.sh [DEST]     (DEST defaults to <repo>/bin)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/init.sh
source "${REPO_ROOT}/hack/lib/init.sh"
DEST="${1:-${REPO_ROOT}/bin}"
DEST="$(cd "${DEST}" && pwd)"
PULUMI="${DEST}/pulumi"
FORCE="${FORCE:-0}"
PLUGINS_REQUIRED="${PLUGINS_REQUIRED:-1}"
export PULUMI_HOME="${DEST}/pulumi-home"
# No update check, no telemetry prompt; the install itself is the only network use, and only
# without a file.
export PULUMI_SKIP_UPDATE_CHECK=true PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true

[[ -x "${PULUMI}" ]] || { log::info "no pulumi CLI at ${PULUMI}: run \`make tools\`"; exit 1; }

K8S_VERSION="$(cd "${REPO_ROOT}" && go list -m -f '{{.Version}}' github.com/pulumi/pulumi-kubernetes/sdk/v4)"
GO_LANG_VERSION="$(awk '$1 == "PULUMI_GO_LANGUAGE_VERSION" && $2 == ":=" {print $3}' "${REPO_ROOT}/Makefile")"
[[ "${GO_LANG_VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { log::info "cannot read PULUMI_GO_LANGUAGE_VERSION from the Makefile (${GO_LANG_VERSION})"; exit 1; }
[[ "${K8S_VERSION}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { log::info "cannot read the Kubernetes SDK version from go.mod (${K8S_VERSION})"; exit 1; }

# install KIND NAME VERSION FILE_VAR BINARY REQUIRED
install_plugin() {
	local kind="$1" name="$2" version="$3" file_var="$4" binary="$5" required="$6"
	local file="${!file_var:-}"
	local dir="${PULUMI_HOME}/plugins/${kind}-${name}-${version}"
	local stamp="${dir}.source" want="download" start=${SECONDS}
	if [[ -n "${file}" ]]; then
		if [[ ! -f "${file}" ]]; then
			log::info "${file_var}=${file}: no such file"
			return 1
		fi
		want="sha256:$(sha256sum "${file}" | cut -d' ' -f1)"
	fi
	# Pulumi marks an install in progress with <dir>.partial and removes it when done.
	if [[ "${FORCE}" != "1" && -x "${dir}/${binary}" && ! -e "${dir}.partial" && -f "${stamp}" ]] &&
		{ [[ "${want}" == "download" ]] || [[ "$(cat "${stamp}")" == "${want}" ]]; }; then
		echo "${kind} ${name} ${version}: up to date (${dir})"
		return 0
	fi
	local args=(plugin install "${kind}" "${name}" "${version}" --reinstall)
	[[ -n "${file}" ]] && args+=(--file "${file}")
	local out status=0
	# The go language host is bundled with official CLI releases, and `pulumi plugin install`
	# refuses to install a bundled plugin into the plugin directory unless PULUMI_DEV is set.
	# Only the install needs it, not the runs.
	out="$(PULUMI_DEV=true timeout 600 "${PULUMI}" "${args[@]}" 2>&1)" || status=$?
	if [[ ${status} -ne 0 || ! -x "${dir}/${binary}" ]]; then
		local msg="could not install the ${name} ${kind} plugin ${version} (${binary}):
  ${out//$'\n'/$'\n'  }
Either
  - give the plugin file: ${file_var}=/path/to/${binary}-${version}-linux-amd64.tar.gz (or the binary), or
  - run where the official release can be downloaded (\`${PULUMI} plugin install ${kind} ${name} ${version}\`)."
		log::info "${msg}"
		if [[ "${required}" == "required" && "${PLUGINS_REQUIRED}" != "0" ]]; then
			return 1
		elif [[ "${required}" == "required" ]]; then
			log::info "going on without it (PLUGINS_REQUIRED=0): objects report PluginMissing, tests that need it SKIP (and fail under CI=true)"
		else
			log::info "going on without it: only the plain pulumi CLI running this project needs it"
		fi
		return 0
	fi
	echo "${want}" >"${stamp}"
	echo "${kind} ${name} ${version}: installed into ${dir} ($((SECONDS - start))s, from ${file:-the official release})"
}

install_plugin resource kubernetes "${K8S_VERSION}" PULUMI_KUBERNETES_PLUGIN_FILE pulumi-resource-kubernetes required
install_plugin language go "${GO_LANG_VERSION}" PULUMI_GO_LANGUAGE_PLUGIN_FILE pulumi-language-go optional

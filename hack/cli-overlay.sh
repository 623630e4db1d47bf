#!/bin/sh
# Writes a `go build -overlay` file (JSON, to the path given) that compiles the pinned pulumi CLI's
# main package, github.com/pulumi/pulumi/pkg/v3/cmd/pulumi at the version agent/go.mod requires,
# into agent/cmd/pulumi beside that package's dispatch (multicall.go): each of the CLI package's
# Go files for this GOOS/GOARCH appears there as pulumi_<name>, read from the module cache, so
# nothing of Pulumi's code is copied into the repository or the build context. Then
#
#   cd agent && go build -overlay FILE -o bin/pulumi ./cmd/pulumi
#
# builds the CLI that is also the engine host (agent/cmd/pulumi's package comment says why). The
# Makefile's bin/pulumi and the Dockerfile use it. Standalone and POSIX sh (no hack/lib, no bash):
# the Dockerfile runs it in its build stage, whose image may have no bash, with only agent/ and
# this file there. Needs go; the module is downloaded on demand when the module cache lacks it.
# Usage: hack/cli-overlay.sh OUT.json
set -eu

[ $# -eq 1 ] || { echo "usage: $0 OUT.json" >&2; exit 2; }
out="$1"
agent="$(cd "$(dirname "$0")/../agent" && pwd)"
pkg=github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
# The package's directory and non-test Go files, as the go command selects them for the target
# (go list fails, and so does this script, for a package it cannot load or without Go files).
list="$(cd "${agent}" && go list -f '{{.Dir}} {{join .GoFiles " "}}' "${pkg}")"
dir="${list%% *}"
files="${list#* }"
dest="${agent}/cmd/pulumi"
trap 'rm -f "${out}.tmp"' EXIT
{
	printf '{"Replace":{'
	sep=""
	for f in ${files}; do
		[ ! -e "${dest}/pulumi_${f}" ] || { echo "$0: ${dest}/pulumi_${f} exists, where the overlay puts the CLI's ${f}: rename it" >&2; exit 1; }
		printf '%s"%s":"%s"' "${sep}" "${dest}/pulumi_${f}" "${dir}/${f}"
		sep=","
	done
	printf '}}\n'
} >"${out}.tmp"
mv -f "${out}.tmp" "${out}"

#!/usr/bin/env bash
# Downloads into the module cache, all at once, the Go modules that `make test`, `make vulncheck`
# and `make e2e-real` build from: every module of this repository (its packages and their tests)
# and every tools module under hack/tools (its `tool` packages). On a clean machine each build
# would otherwise fetch its modules itself, one build after another, with the cores idle while it
# waits; run in the background (.ci/run does), the downloads overlap each other and the builds.
#
# Each module's packages are listed with `go list -e -deps`, which downloads exactly the modules
# that provide them; `go mod download` would fetch every module of each graph, several GB more.
# The go command locks the module cache, so builds running meanwhile share what this fetches.
# Nothing here fails a build: a module it could not fetch is fetched, and reported, by the build
# that needs it.
#
# Usage: hack/prefetch-modules.sh     (one line per module with its time, then the total)
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"
start=${SECONDS}

# prefetch DIR ARGS...: go list -e -deps ARGS in DIR, its time and outcome on one line.
prefetch() {
	local dir="$1" t0=${SECONDS} out
	shift
	if out="$(cd "${dir}" && go list -e -deps "$@" 2>&1 >/dev/null)"; then
		echo "prefetch: ${dir}: $((SECONDS - t0))s"
	else
		echo "prefetch: ${dir}: failed after $((SECONDS - t0))s (the build will fetch it): $(tail -n 1 <<<"${out}")"
	fi
}

prefetch . -test ./... &
# The pulumi CLI's main package is compiled into agent/cmd/pulumi through an overlay
# (hack/cli-overlay.sh); listed here by its own path.
prefetch agent -test ./... github.com/pulumi/pulumi/pkg/v3/cmd/pulumi &
prefetch agent/protocol -test ./... &
prefetch hack/bench -test ./... &
for dir in hack/tools/*/; do
	prefetch "${dir%/}" tool &
done
wait
echo "prefetch: every module in $((SECONDS - start))s"

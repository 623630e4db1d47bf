#!/usr/bin/env bash
# `make bench-upgrade`: the bench of the previous release's binaries and of this tree's, one after
# the other on this machine, each on a fresh local cluster of its own (hack/bench/run.sh); the
# second run writes docs/benchmarks.md with a "Two runs" table: every figure beside the previous
# release's and how far apart they are, in percent.
#
# BASELINE_BIN: the directory of the previous release's binaries, as `make build` writes them
# (pulumi-operator, pulumi, pulumi-operator-engine -> pulumi). Make it from a commit with
#   git worktree add /tmp/baseline <commit> && make -C /tmp/baseline build
# and pass BASELINE_BIN=/tmp/baseline/bin. Its plugins are this tree's (bin/pulumi-home is linked
# in when it has none): the provider and the Go language host are the same archives for both.
#
# Usage: BASELINE_BIN=DIR hack/bench/upgrade.sh [bench flags...]   (the flags go to both runs)
# Writes .local/bench-baseline/ (the previous release's run) and .local/bench/ (this tree's).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${REPO_ROOT}"
: "${BASELINE_BIN:?BASELINE_BIN must name the bin directory of the previous release, see hack/bench/upgrade.sh}"
BASELINE_BIN="$(cd "${BASELINE_BIN}" && pwd)"
for f in pulumi-operator pulumi pulumi-operator-engine; do
	[[ -x "${BASELINE_BIN}/${f}" ]] || { echo "bench-upgrade: ${BASELINE_BIN}/${f} is missing (make build there)" >&2; exit 1; }
done
[[ -e "${BASELINE_BIN}/pulumi-home" ]] || ln -s "${REPO_ROOT}/bin/pulumi-home" "${BASELINE_BIN}/pulumi-home"

# The commit the baseline was built from, for the doc: BASELINE_COMMIT, else the git tree that
# holds BASELINE_BIN (a worktree as above).
commit="${BASELINE_COMMIT:-$(git -C "${BASELINE_BIN}/.." describe --always --dirty 2>/dev/null || echo unknown)}"
BENCH_OUT="${REPO_ROOT}/.local/bench-baseline" BENCH_BIN="${BASELINE_BIN}" BENCH_DOCS="" \
	hack/bench/run.sh --operator-commit "${commit}" "$@"
BENCH_PREVIOUS="${REPO_ROOT}/.local/bench-baseline/results.json" hack/bench/run.sh "$@"

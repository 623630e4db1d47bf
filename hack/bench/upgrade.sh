#!/usr/bin/env bash
# `make bench-upgrade`: the bench of this tree's binaries with the previous release's beside
# them in the same run on one fresh local cluster (hack/bench/run.sh --beside): figures 1, 4 and
# 5 sample for sample, each burst right before or after the other build's, 3 rounds of each
# (the median's row), and 3 idle windows of each over the same objects, in turn. docs/benchmarks.md then
# has a "Side by side" table: every figure beside the previous release's, the difference in
# percent, and those worse by more than 10 % marked. Measured in one run, the two builds meet
# the machine at the same speed, which drifts between runs (docs/testing.md).
#
# BASELINE_BIN: the directory of the previous release's binaries, as `make build` writes them
# (pulumi-operator, pulumi, pulumi-operator-engine). Make it from a commit with
#   git worktree add /tmp/baseline <commit> && make -C /tmp/baseline build
# and pass BASELINE_BIN=/tmp/baseline/bin. Its plugins are this tree's (bin/pulumi-home is linked
# in when it has none): the provider and the Go language host are the same archives for both.
#
# Usage: BASELINE_BIN=DIR hack/bench/upgrade.sh [bench flags...]
# Writes .local/bench/ (results.json with both builds' figures, logs of both).
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
# Three rounds of every burst and of the idle window after a restart, 25 samples of figures 1,
# 4 and 5: one burst, or one window's peak memory, varies from the next by about as much as the
# bar the comparison is held to. The budget pays for the rounds before the idle objects.
hack/bench/run.sh --beside "${BASELINE_BIN}" --beside-commit "${commit}" --burst-rounds 3 --idle-rounds 3 --samples 25 --budget 150m "$@"

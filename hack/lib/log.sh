#!/usr/bin/env bash
# Logging of the hack/ scripts: every line goes to stderr (stdout is kept for what a caller
# evals or reads, such as `export PULUMI_TEST_...`), prefixed with the script's name without
# .sh (cluster-up, postgres-down, ...), so that the lines of nested scripts say who wrote them.

# LOG_NAME is the prefix: the name of the running script, never inherited from the environment.
LOG_NAME="${0##*/}"
LOG_NAME="${LOG_NAME%.sh}"

# log::info MESSAGE...: "<script>: MESSAGE" on stderr.
log::info() { echo "${LOG_NAME}: $*" >&2; }

# log::error MESSAGE...: "<script>: ERROR: MESSAGE" on stderr.
log::error() { log::info "ERROR: $*"; }

# log::die MESSAGE...: log::error, then exit 1.
log::die() {
	log::error "$@"
	exit 1
}

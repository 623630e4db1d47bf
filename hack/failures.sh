#!/usr/bin/env bash
# Prints, for every top-level test that failed in the `go test -v` logs given, which of its
# subtests failed, what it said itself (its "file_test.go:N:" lines, the last 15, runs from one
# line folded) and then its own output: the lines from its
# "=== RUN   TestX" to its "--- FAIL: TestX", the last MAX_LINES (default 200) of them. The
# summaries of hack/test.sh and hack/e2e-real.sh keep only the lines a test logged with t.Log;
# what a failing test prints around them (an operator's log, a pod dump) is what says why, and
# .ci/run prints it last, where a reader of CI's output looks first.
#
# Usage: hack/failures.sh LOG...   (a missing LOG is skipped; exit 0 always)
set -uo pipefail

max="${MAX_LINES:-200}"
for log in "$@"; do
	[[ -f "${log}" ]] || continue
	mapfile -t failed < <(grep -oE '^--- FAIL: [A-Za-z0-9_]+' "${log}" | awk '{print $3}' | sort -u)
	for name in "${failed[@]}"; do
		# Parallel tests interleave; "=== CONT  TestX" marks where TestX's lines resume, which is
		# as much as `go test -v` says.
		block="$(awk -v name="${name}" '
			$0 ~ "^=== (RUN|CONT|PAUSE|NAME) +" name "(/|$)" { on = 1 }
			$0 ~ "^=== (RUN|CONT|PAUSE|NAME) +" && $0 !~ "^=== (RUN|CONT|PAUSE|NAME) +" name "(/|$)" { on = 0 }
			on { print }
			$0 ~ "^--- FAIL: " name " " { on = 0 }
		' "${log}")"
		echo
		echo "================ FAILED: ${name} (${log}) ================"
		# What the test itself said (t.Log, t.Error: "file_test.go:N:" lines), its last 15, then
		# everything it printed, its last MAX_LINES: a dump after the error comes last.
		echo "--- its failures:"
		grep -E "^\s*--- FAIL: ${name}(/| )" "${log}"
		# A dump logs many lines from one call site (every event, every pod): after the first
		# two of a run of lines from one "file_test.go:N:", the rest are counted, not printed, so
		# that the error logged before the dump stays among the last 15.
		echo "--- its messages (last 15; a run of more than two from one line of a test folded):"
		grep -E '^\s+\S+_test\.go:[0-9]+:' <<<"${block}" | awk '
			function flush() { if (n > 2) printf "    ... %d more from %s\n", n - 2, site }
			{ match($0, /[^ \t]+_test\.go:[0-9]+:/); s = substr($0, RSTART, RLENGTH) }
			s != site { flush(); site = s; n = 0 }
			{ if (++n <= 2) print }
			END { flush() }
		' | tail -n 15
		echo "--- its output (last ${max} lines):"
		tail -n "${max}" <<<"${block}"
	done
done
exit 0

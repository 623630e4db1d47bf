#!/usr/bin/env bash
# The real-node figure of `make bench`: test/e2e/realnode's BenchmarkFirstGET (a new KindCustomHttp to
# its first successful GET through its Service, against the same objects created directly,
# medians of PULUMI_OPERATOR_REALNODE_SAMPLES samples each, default 5) on a real node started and
# stopped by hack/e2e-real.sh, with the images `make image` built. Writes the figure to
# .local/bench/realnode.txt and into docs/benchmarks.md (the section between the
# "realnode-first-get" markers, added at the end when missing). Where no node can run, says SKIP
# and leaves the doc alone.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "${REPO_ROOT}"
OUT="${REPO_ROOT}/.local/bench"
mkdir -p "${OUT}"
hack/e2e-real.sh -run '^$' -bench '^BenchmarkFirstGET$' -benchtime 1x | tee "${OUT}/realnode.log"
line="$(grep -o 'FIRST GET: .*' "${OUT}/realnode.log" | tail -1 || true)"
if [[ -z "${line}" ]]; then
	echo "bench: no real-node figure (see above)"
	exit 0
fi
echo "${line}" >"${OUT}/realnode.txt"
doc="${REPO_ROOT}/docs/benchmarks.md"
section="$(
	echo "<!-- realnode-first-get -->"
	echo "## On a real node: a new KindCustomHttp to its first GET"
	echo
	echo "\`hack/bench/realnode.sh\` (part of \`make bench\`), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD):"
	echo "the operator installed by the Helm chart from the image \`make image\` built, on the node of"
	echo "\`hack/realnode-up.sh\`; replicaCount 1; from the create call to the first 200 of GET /ping"
	echo "through the Service's ClusterIP. The baseline creates the same Deployment, Service and"
	echo "ConfigMap directly, side by side (alternating)."
	echo
	echo "    ${line}"
	echo "<!-- /realnode-first-get -->"
)"
if grep -q '<!-- realnode-first-get -->' "${doc}"; then
	python3 - "${doc}" "${section}" <<'PY'
import re, sys
p, sec = sys.argv[1], sys.argv[2]
s = open(p).read()
s = re.sub(r'<!-- realnode-first-get -->.*?<!-- /realnode-first-get -->', lambda m: sec, s, flags=re.S)
open(p, 'w').write(s)
PY
else
	printf '\n%s\n' "${section}" >>"${doc}"
fi
echo "bench: ${line}"

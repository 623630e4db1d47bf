# Process environment of a bench or cancel run; source it from bash (run.sh does):
#   . hack/experiments/inprocess-engine/env.sh
# INPROC_REPO (the checkout; default: three directories above this file) and INPROC_OUT (the
# experiment's output directory; default <repo>/.local/inprocess-engine) must match the binary's
# -repo and -out.
INPROC_REPO="${INPROC_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
INPROC_OUT="${INPROC_OUT:-${INPROC_REPO}/.local/inprocess-engine}"
export PULUMI_HOME="${INPROC_REPO}/bin/pulumi-home" PULUMI_SKIP_UPDATE_CHECK=true PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true
export PULUMI_CONFIG_PASSPHRASE=inproc-test-passphrase
# deliberately wrong: the provider must get the real one per update (A: stack.Config.Env; B: the HostFactory wrapper)
export KUBECONFIG="${INPROC_OUT}/no-such-kubeconfig"

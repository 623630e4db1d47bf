package stack

import (
	"os"
	"strings"
)

// childEnvNames and childEnvPrefixes are the variables of the operator's environment that the
// processes it starts see: the pulumi CLI, the engine host and, since
// they inherit from those, the provider plugins and the program. Whatever else the operator's
// environment holds (a CI token, another tool's password) stays in the operator: a plugin, the
// most exposed of these processes, cannot read what it never had (/proc/<pid>/environ).
//
// What is kept, and why: the process basics (PATH, HOME, locale, time zone, temporary
// directory); Pulumi's own settings (PULUMI_*: home, passphrase or its file, backend URL,
// access token, the Kubernetes provider's PULUMI_K8S_*); how the provider reaches the cluster
// (KUBECONFIG, the in-cluster KUBERNETES_SERVICE_*); trust and proxies (SSL_CERT_*, *_PROXY);
// the Go runtime's knobs (GO*: GOMAXPROCS, GOMEMLIMIT, GODEBUG, GOCOVERDIR); and the backends'
// credentials by their libraries' names (PG* for postgres://, AWS_* for s3://,
// GOOGLE_*/CLOUDSDK_* for gs://, AZURE_* for azblob://), which the backend cannot open without.
var (
	childEnvNames = []string{
		"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LANGUAGE", "KUBECONFIG",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
		"XDG_CONFIG_HOME", "XDG_CACHE_HOME",
	}
	childEnvPrefixes = []string{
		"PULUMI_", "LC_", "KUBERNETES_SERVICE_", "GO", "PG", "AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_",
	}
)

// childEnv returns the entries ("NAME=value") of environ that childEnvNames and
// childEnvPrefixes allow, in their order.
func childEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if allowedChildVar(name) {
			out = append(out, kv)
		}
	}
	return out
}

func allowedChildVar(name string) bool {
	for _, n := range childEnvNames {
		if name == n {
			return true
		}
	}
	for _, p := range childEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// operatorEnv is childEnv of this process's environment.
func operatorEnv() []string { return childEnv(os.Environ()) }

// Environ is the environment ("NAME=value" entries) for a pulumi process that opens no backend
// and no stack, such as `pulumi version`: what childEnvNames and childEnvPrefixes allow of this
// process's own, without the credential variables (credentialVars).
func Environ() []string { return without(operatorEnv(), credentialVars) }

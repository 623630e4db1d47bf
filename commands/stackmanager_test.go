package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestKubeAPILimits: a --kube-api-qps or --kube-api-burst that client-go cannot use is an
// invalid-input exit that names the flag, before anything runs; the defaults (Flux's 50 and 300,
// not client-go's throttling 5 and 10) and given values reach the rest.Config every client is
// built from.
func TestKubeAPILimits(t *testing.T) {
	for name, args := range map[string][]string{
		"zero qps":     {"--kube-api-qps", "0"},
		"negative qps": {"--kube-api-qps", "-1"},
		"NaN qps":      {"--kube-api-qps", "NaN"},
		"zero burst":   {"--kube-api-burst", "0"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr strings.Builder
			app := App()
			app.ErrWriter = &stderr
			err := app.Run(append(append([]string{"pulumi-operator"}, args...), "stacks"))
			if code := ExitCode(err); code != ExitInvalidInput {
				t.Fatalf("exit code %d (err %v), want %d", code, err, ExitInvalidInput)
			}
			if !strings.Contains(err.Error(), args[0]) {
				t.Errorf("error %q does not name %s", err, args[0])
			}
		})
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		qps   float64
		burst int
	}{
		"defaults": {defaultKubeQPS, defaultKubeBurst},
		"given":    {7.5, 12},
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := restConfig(&config{kubeconfig: kubeconfig, kubeQPS: tc.qps, kubeBurst: tc.burst})
			if err != nil {
				t.Fatal(err)
			}
			if rc.QPS != float32(tc.qps) || rc.Burst != tc.burst {
				t.Errorf("rest.Config QPS %v burst %d, want %v and %d", rc.QPS, rc.Burst, tc.qps, tc.burst)
			}
		})
	}
	// The flags' defaults are those constants.
	for _, f := range App().Flags {
		switch f := f.(type) {
		case *cli.Float64Flag:
			if f.Name == "kube-api-qps" && f.Value != defaultKubeQPS {
				t.Errorf("--kube-api-qps defaults to %v, want %v", f.Value, defaultKubeQPS)
			}
		case *cli.IntFlag:
			if f.Name == "kube-api-burst" && f.Value != defaultKubeBurst {
				t.Errorf("--kube-api-burst defaults to %v, want %v", f.Value, defaultKubeBurst)
			}
		}
	}
}

// TestEngineHostPath: --engine-host PATH is taken as given; `none` is none, even with one beside the
// CLI (its requests are then the pinned CLI's `operator-request` processes); without the flag the
// one next to this binary is used when it is there (the test binary has none beside it), else the
// one next to the pulumi CLI, else none.
func TestEngineHostPath(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "pulumi-operator-engine")); err == nil {
		t.Skip("SKIP: an engine host lies beside the test binary; the default case cannot be checked here")
	}
	withHost := t.TempDir()
	for _, f := range []string{"pulumi", "pulumi-operator-engine"} {
		if err := os.WriteFile(filepath.Join(withHost, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cli := filepath.Join(withHost, "pulumi")
	lone := filepath.Join(t.TempDir(), "pulumi")
	for name, tc := range map[string]struct{ flag, cli, want string }{
		"given":                      {"/opt/bin/pulumi-operator-engine", cli, "/opt/bin/pulumi-operator-engine"},
		"none, beside the CLI":       {"none", cli, ""},
		"default, beside the CLI":    {"", cli, filepath.Join(withHost, "pulumi-operator-engine")},
		"default, none anywhere":     {"", lone, ""},
		"none, none anywhere":        {"none", lone, ""},
		"default, no CLI path known": {"", "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := engineHostPath(&config{engineHost: tc.flag}, tc.cli); got != tc.want {
				t.Fatalf("engineHostPath(--engine-host %q, CLI %q) = %q, want %q", tc.flag, tc.cli, got, tc.want)
			}
		})
	}
}

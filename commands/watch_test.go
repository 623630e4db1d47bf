package commands

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// The watch command's configuration errors must say what to fix, before touching anything.
func TestWatchConfigErrors(t *testing.T) {
	kc := testenv.Kubeconfig(t)
	cli := testenv.PulumiCLI(t)
	dir := t.TempDir()
	badProject := filepath.Join(dir, "Pulumi.yaml")
	if err := os.WriteFile(badProject, []byte("name: [not, a, name]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		env  map[string]string
		args []string
		want string
	}{
		"no passphrase": {
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "watch"},
			want: "PULUMI_CONFIG_PASSPHRASE",
		},
		"renew deadline not below the lease": {
			env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "watch", "--leader-elect",
				"--leader-election-lease-duration", "10s", "--leader-election-renew-deadline", "10s"},
			want: "--leader-election-renew-deadline (10s) < --leader-election-lease-duration (10s)",
		},
		"bad log format": {
			args: []string{"--log-format", "xml", "watch"},
			want: "--log-format",
		},
		"bad log level": {
			args: []string{"--log-level", "verbose", "watch"},
			want: "--log-level \"verbose\": want one of debug, info, warn, error",
		},
		"metrics cert dir without a key pair": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--cluster-name", "c", "watch", "--metrics-secure", "--metrics-cert-dir", dir, "--metrics-addr", "127.0.0.1:0", "--health-addr", ""},
			want: "--metrics-cert-dir " + dir + ": want tls.crt and tls.key",
		},
		"missing explicit project file": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--project-file", filepath.Join(dir, "nope.yaml"), "watch"},
			want: "nope.yaml",
		},
		"invalid project file": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--project-file", badProject, "watch"},
			want: badProject,
		},
		"no pulumi CLI": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", filepath.Join(dir, "bin", "pulumi"), "watch"},
			want: "make tools",
		},
		"bad cluster name": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--cluster-name", "Bad_Name", "watch"},
			want: "cluster name",
		},
		"bad secrets provider": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--cluster-name", "c", "--secrets-provider", "vault://x", "watch"},
			want: "secrets provider",
		},
		"leader election without room to fence": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "watch", "--leader-elect", "--leader-election-lease-duration", "12s", "--leader-election-renew-deadline", "10s"},
			want: "--leader-election-lease-duration (12s) - --leader-election-renew-deadline (10s) = 2s leaves no room to fence",
		},
		"no digest key": {
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--cluster-name", "c", "--secrets-provider", "awskms://alias/x", "watch"},
			want: "--env-digest-key-file",
		},
		"unreadable digest key file": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", kc, "--state-dir", dir, "--pulumi", cli, "--env-digest-key-file", filepath.Join(dir, "no-key"), "watch"},
			want: "read --env-digest-key-file",
		},
		"unreadable kubeconfig": {
			env:  map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"},
			args: []string{"--kubeconfig", filepath.Join(dir, "missing-kubeconfig"), "watch"},
			want: "kubeconfig",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "KUBECONFIG", "PULUMI_BACKEND_URL", desired.KeyFileEnv} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := App().Run(append([]string{"pulumi-operator"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// fakeReadiness is a watcher's answer to /healthz's and /readyz's questions.
type fakeReadiness struct {
	synced, leading bool
	unhealthy       error
}

func (f fakeReadiness) HasSynced() bool { return f.synced }
func (f fakeReadiness) Leading() bool   { return f.leading }
func (f fakeReadiness) Healthy() error  { return f.unhealthy }

// /healthz answers unless the watcher says it is unhealthy (a leader past its renew deadline);
// /readyz once the caches synced, or at once for a follower under leader election (it has
// nothing to sync).
func TestHealthHandler(t *testing.T) {
	fenced := fmt.Errorf("%w: its last successful Lease renewal was sent 11s ago", fence.ErrFenced)
	tests := map[string]struct {
		w           fakeReadiness
		leaderElect bool
		health      int
		ready       int
	}{
		"not synced":        {fakeReadiness{}, false, http.StatusOK, http.StatusServiceUnavailable},
		"synced":            {fakeReadiness{synced: true}, false, http.StatusOK, http.StatusOK},
		"follower":          {fakeReadiness{}, true, http.StatusOK, http.StatusOK},
		"leader not synced": {fakeReadiness{leading: true}, true, http.StatusOK, http.StatusServiceUnavailable},
		"leader synced":     {fakeReadiness{synced: true, leading: true}, true, http.StatusOK, http.StatusOK},
		"leader fenced":     {fakeReadiness{synced: true, leading: true, unhealthy: fenced}, true, http.StatusInternalServerError, http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := healthHandler(tc.w, tc.leaderElect)
			for path, want := range map[string]int{"/healthz": tc.health, "/readyz": tc.ready} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want {
					t.Errorf("%s: %d %q, want %d", path, rec.Code, rec.Body.String(), want)
				}
			}
		})
	}
}

// The leader election's client has a connection of its own (a Dial of its own keeps client-go
// from sharing the watcher's transport) and a timeout per request.
func TestElectionConfig(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	c := electionConfig(rc, watcher.LeaderElection{RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second})
	if c.Timeout != 2500*time.Millisecond || c.Dial == nil || rc.Dial != nil || rc.Timeout != 0 {
		t.Fatalf("election config: timeout %s, dial set %v (original changed: %v, %s)", c.Timeout, c.Dial != nil, rc.Dial != nil, rc.Timeout)
	}
	a, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	if a.Transport == b.Transport {
		t.Error("the election's client shares the watcher's transport")
	}
}

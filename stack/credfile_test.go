package stack

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestCredentialsInMemoryFile: a postgres:// backend's password, from Config.Env or from this
// process's environment, reaches the processes the Manager starts as PGPASSFILE, a file in
// memory only with mode 0600 holding one escaped line, never as PGPASSWORD; it is redacted from
// then on. An s3:// backend's keys go the same way, as AWS_SHARED_CREDENTIALS_FILE. Another
// backend keeps the variables as they are.
func TestCredentialsInMemoryFile(t *testing.T) {
	const password = `pa:ss\word-7f3e`
	cli := testenv.PulumiCLI(t)
	dir := t.TempDir()
	newManager := func(t *testing.T, backend string, env map[string]string) *Manager {
		t.Helper()
		env["PULUMI_CONFIG_PASSPHRASE"] = "x"
		m, err := New(Config{Project: "p", BackendURL: backend, WorkRoot: t.TempDir(), PulumiPath: cli, ClusterName: "c", Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// What a CLI run sees: a stand-in CLI that prints its environment.
	cliEnviron := func(t *testing.T, m *Manager) string {
		t.Helper()
		script := filepath.Join(dir, "env-cli")
		if err := os.WriteFile(script, []byte("#!/bin/sh\nenv\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		c := &trackedCommand{path: script, procs: &processSet{}, drop: m.cmd.(*trackedCommand).drop}
		var extra []string
		for k, v := range m.cliEnv() {
			extra = append(extra, k+"="+v)
		}
		out, _, _, err := c.Run(context.Background(), dir, nil, nil, nil, extra, "version")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for name, fromEnv := range map[string]bool{"Config.Env": false, "the process environment": true} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			if fromEnv {
				t.Setenv("PGPASSWORD", password)
			} else {
				env["PGPASSWORD"] = password
			}
			m := newManager(t, "postgres://pulumi@127.0.0.1:1/pulumi?sslmode=disable", env)
			seen := cliEnviron(t, m)
			if strings.Contains(seen, password) || strings.Contains(seen, "PGPASSWORD=") {
				t.Errorf("a CLI run sees the password:\n%s", seen)
			}
			path := m.cliEnv()["PGPASSFILE"]
			if !strings.Contains(seen, "PGPASSFILE="+path) || !strings.HasPrefix(path, "/proc/") {
				t.Fatalf("PGPASSFILE = %q; the CLI's environment:\n%s", path, seen)
			}
			if got := m.engineHostEnv(); slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "PGPASSWORD=") }) {
				t.Errorf("the engine host's environment holds PGPASSWORD")
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("password file %s: %v, %v; want mode 0600", path, fi, err)
			}
			b, _ := os.ReadFile(path)
			if want := `*:*:*:*:pa\:ss\\word-7f3e` + "\n"; string(b) != want {
				t.Errorf("password file holds %q, want %q", b, want)
			}
			if got := RedactText("auth failed for " + password); strings.Contains(got, password) {
				t.Errorf("not redacted: %q", got)
			}
		})
	}
	t.Run("s3", func(t *testing.T) {
		m := newManager(t, "s3://bucket?endpoint=127.0.0.1:1", map[string]string{"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
			"AWS_SECRET_ACCESS_KEY": "secret-key-5e1d", "AWS_SESSION_TOKEN": "session-9c2a", "AWS_PROFILE": "ops"})
		seen := cliEnviron(t, m)
		for _, v := range []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "secret-key-5e1d", "session-9c2a"} {
			if strings.Contains(seen, v) {
				t.Errorf("a CLI run sees %s", v)
			}
		}
		path := m.cliEnv()["AWS_SHARED_CREDENTIALS_FILE"]
		b, err := os.ReadFile(path)
		want := "[ops]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret-key-5e1d\naws_session_token = session-9c2a\n"
		if err != nil || string(b) != want || !strings.Contains(seen, "AWS_SHARED_CREDENTIALS_FILE="+path) {
			t.Errorf("credentials file %s = %q, %v; want %q", path, b, err, want)
		}
	})
	t.Run("another backend", func(t *testing.T) {
		m := newManager(t, "file://"+t.TempDir(), map[string]string{"PGPASSWORD": password})
		if env := m.cliEnv(); env["PGPASSWORD"] != password || env["PGPASSFILE"] != "" {
			t.Errorf("a file backend's environment changed: PGPASSWORD %q, PGPASSFILE %q", env["PGPASSWORD"], env["PGPASSFILE"])
		}
	})
}

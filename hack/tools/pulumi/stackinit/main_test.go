package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runIt runs the command on backend URL url and args and returns its exit code and both
// streams.
func runIt(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), url, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestCreateThenExists creates a stack in a real file:// backend, finds it the second time,
// and checks the checkpoint file the pulumi CLI reads (pkg/v3 backend/diy's project layout).
func TestCreateThenExists(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	url := "file://" + dir
	code, out, errOut := runIt(t, url, "proj", "dev")
	if code != 0 || out != "created\n" {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q; want 0, created", code, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json"))
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if !strings.Contains(string(b), `"stack":"organization/proj/dev"`) {
		t.Errorf("checkpoint %s does not name organization/proj/dev", b)
	}
	if locks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "locks", "*", "proj", "dev", "*.json")); len(locks) != 0 {
		t.Errorf("locks left behind: %v", locks)
	}
	code, out, errOut = runIt(t, url, "proj", "dev")
	if code != 0 || out != "exists\n" {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q; want 0, exists", code, out, errOut)
	}
}

// TestLockedByAnother: a stack whose lock another process holds (here a lock file of pid 1)
// is not created, and the error is the DIY backend's lock report, which the operator's
// stack package recognizes (stack/lock.go lockLine).
func TestLockedByAnother(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	lockDir := filepath.Join(dir, ".pulumi", "locks", "organization", "proj", "dev")
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := `{"pid":1,"username":"someone","hostname":"elsewhere","timestamp":"2026-11-25T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(lockDir, "other.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runIt(t, "file://"+dir, "proj", "dev")
	if code != 1 || out != "" || !strings.Contains(errOut, "the stack is currently locked by 1 lock(s)") ||
		!strings.Contains(errOut, "created by someone@elsewhere (pid 1)") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and the lock report", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json")); err == nil {
		t.Error("a locked stack was created")
	}
}

// TestErrors: each bad input exits non-zero with a message saying what is wrong, and creates
// nothing.
func TestErrors(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	url := "file://" + dir
	for _, tc := range []struct {
		name string
		url  string
		args []string
		code int
		want string
	}{
		{"no arguments", url, nil, 2, "usage: PULUMI_BACKEND_URL=<backend URL> pulumi-operator-stack-init"},
		{"too many arguments", url, []string{"proj", "dev", "extra"}, 2, "usage: PULUMI_BACKEND_URL"},
		{"no backend URL", "", []string{"proj", "dev"}, 2, "no backend URL: set PULUMI_BACKEND_URL"},
		{"Pulumi Cloud", "https://user:pw@api.pulumi.com", []string{"proj", "dev"}, 2, "a https: backend URL is not a DIY backend's"},
		{"bad project name", url, []string{"bad project", "dev"}, 2, `project name "bad project"`},
		{"bad stack name", url, []string{"proj", "a/b/c/d"}, 1, `stack name "a/b/c/d"`},
		{"missing backend directory", "file://" + filepath.Join(dir, "missing"), []string{"proj", "dev"}, 1, "open backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runIt(t, tc.url, tc.args...)
			if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "pw@") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, no stdout, stderr with %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
	if stacks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "stacks", "*", "*")); len(stacks) != 0 {
		t.Errorf("bad input created %v", stacks)
	}
}

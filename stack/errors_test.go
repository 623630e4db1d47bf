package stack

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestDiagnosis: a failed run is classified by what the backend holds and what its event log
// said, never by its text (every case fails with the same words), alike with the engine host and
// without one (the pinned CLI's `pulumi operator-request`): a lock of the stack held, or being
// written, is ErrLocked naming it, unless the run had started a step; a lock of another stack or
// project is not; a backend that cannot be opened is ErrBackendUnavailable; an error diagnostic
// of a missing provider plugin is ErrPluginMissing; a stack the backend does not hold is
// stackNotFound, unless a lock on it is held (a `stack init` or `stack rm` under way or killed:
// ErrLocked); a torn metadata sidecar with no lock held is removed and said so.
func TestDiagnosis(t *testing.T) {
	const stackName = "test.ns.diag"
	failed := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: boom\n")
	lockJSON := `{"pid":4242,"username":"op","hostname":"pod-a","timestamp":"2026-01-02T03:04:05Z"}`
	ownLock := "locks/organization/kindcustomhttp/" + stackName + "/a.json"
	stackFile := "stacks/kindcustomhttp/" + stackName + ".json"
	missing := "error: Could not load plugin: no resource plugin 'pulumi-resource-kubernetes' found in the workspace at version v4.33.0 or on your $PATH"
	tests := map[string]struct {
		backend     string            // "" for a fresh file backend
		files       map[string]string // backend files, relative to <backend>/.pulumi
		steps       bool
		diagnostics []string
		want        error // the sentinel, or nil for a plain failure
		wantLocks   []Lock
		notFound    bool
		repaired    bool
	}{
		"lock held": {files: map[string]string{stackFile: "{}", ownLock: lockJSON}, want: ErrLocked,
			wantLocks: []Lock{{ID: "a", User: "op", Host: "pod-a", Pid: 4242, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}},
		"lock being written":      {files: map[string]string{stackFile: "{}", ownLock: ""}, want: ErrLocked},
		"lock held, steps ran":    {files: map[string]string{stackFile: "{}", ownLock: lockJSON}, steps: true},
		"no lock":                 {files: map[string]string{stackFile: "{}"}},
		"lock of another stack":   {files: map[string]string{stackFile: "{}", "locks/organization/kindcustomhttp/test.ns.other/a.json": lockJSON}},
		"lock of another project": {files: map[string]string{stackFile: "{}", "locks/organization/other/" + stackName + "/a.json": lockJSON}},
		"backend unreachable":     {backend: "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", want: ErrBackendUnavailable},
		"plugin missing":          {files: map[string]string{stackFile: "{}"}, diagnostics: []string{"warning: something else", missing}, want: ErrPluginMissing},
		"stack missing":           {notFound: true},
		"torn sidecar, no lock":   {files: map[string]string{stackFile: "{}", stackFile + ".attrs": ""}, repaired: true},
		"torn sidecar, lock held": {files: map[string]string{stackFile: "{}", stackFile + ".attrs": "", ownLock: lockJSON}, want: ErrLocked,
			wantLocks: []Lock{{ID: "a", User: "op", Host: "pod-a", Pid: 4242, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}},
		"stack missing, lock held": {files: map[string]string{ownLock: ""}, want: ErrLocked},
	}
	for _, mode := range []string{"engine host", "CLI"} {
		for name, tc := range tests {
			t.Run(mode+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				backend := "file://" + dir
				if tc.backend != "" {
					backend = tc.backend
				}
				for rel, content := range tc.files {
					p := filepath.Join(dir, ".pulumi", filepath.FromSlash(rel))
					if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				m, err := New(Config{Project: "kindcustomhttp", BackendURL: backend, WorkRoot: t.TempDir(), PulumiPath: testenv.PulumiCLI(t),
					ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
				if err != nil {
					t.Fatal(err)
				}
				if mode == "engine host" {
					attachHost(t, m)
				}
				diagnosed := m.diagnosed(context.Background(), stackName, failed, tc.steps, tc.diagnostics)
				if got := stackNotFound(diagnosed); got != tc.notFound {
					t.Fatalf("stackNotFound = %v, want %v (%v)", got, tc.notFound, diagnosed)
				}
				err = classify(diagnosed)
				var oe *OperationError
				if !errors.As(err, &oe) || !errors.Is(err, failed) {
					t.Fatalf("classify = %v, want an *OperationError wrapping the run's error", err)
				}
				for _, sentinel := range []error{ErrLocked, ErrBackendUnavailable, ErrPluginMissing} {
					if got := errors.Is(err, sentinel); got != (sentinel == tc.want) {
						t.Errorf("classify = %v: errors.Is %v = %v, want %v", err, sentinel, got, sentinel == tc.want)
					}
				}
				if !slices.EqualFunc(oe.Locks, tc.wantLocks, sameLock) {
					t.Errorf("locks = %+v, want %+v", oe.Locks, tc.wantLocks)
				}
				sidecar := filepath.Join(dir, ".pulumi", filepath.FromSlash(stackFile)+".attrs")
				_, serr := os.Stat(sidecar)
				if _, torn := tc.files[stackFile+".attrs"]; torn && errors.Is(serr, fs.ErrNotExist) != tc.repaired {
					t.Errorf("torn sidecar removed = %v, want %v", !tc.repaired, tc.repaired)
				}
				if said := strings.Contains(oe.Summary, "removed 1 torn metadata file"); said != tc.repaired {
					t.Errorf("summary %q says a sidecar was removed: %v, want %v", oe.Summary, said, tc.repaired)
				}
			})
		}
	}
}

// TestNoDiagnosisWithoutTheRequestCommand: a pulumi CLI without the operator's request command
// (the previous release's build, made before the command existed; an upstream CLI has none either)
// prints no diagnosis: the failure stays a plain one although a lock is held, and the Manager does
// not ask again.
func TestNoDiagnosisWithoutTheRequestCommand(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, ".pulumi", "locks", "organization", "kindcustomhttp", "test.ns.x", "a.json")
	if err := os.MkdirAll(filepath.Dir(lock), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, []byte(`{"pid":1,"username":"op","hostname":"h","timestamp":"2026-01-02T03:04:05Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + dir, WorkRoot: t.TempDir(), PulumiPath: testenv.PreviousPulumiCLI(t),
		ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("failed to run update: exit status 255\nstderr: error: boom\n")
	for i := range 2 {
		err := m.classifyStack(context.Background(), "test.ns.x", failed)
		if err == nil || errors.Is(err, ErrLocked) || !errors.Is(err, failed) {
			t.Fatalf("classify %d = %v, want a plain failure (no diagnosis)", i, err)
		}
		if !cliOf(m).noOperatorRequests.Load() {
			t.Fatalf("after classify %d: the Manager would ask the CLI again", i)
		}
	}
}

func TestSummarize(t *testing.T) {
	msg := "failed to run update: exit status 255\ncode: 255\nstdout: Updating...\n    error: boom\nstderr: error: boom\nerror: update failed\n"
	if got := summarize(msg); got != "error: boom; error: update failed" {
		t.Fatalf("summarize = %q", got)
	}
	program := "stdout: Updating (s):\n    error: an unhandled error occurred: 2 errors occurred:\n    \t* spec.replicaCount: must be at least 1\n    \t* spec.image: empty\n\nResources:\nstderr: \n"
	if got, want := summarize(program), "error: an unhandled error occurred: 2 errors occurred: * spec.replicaCount: must be at least 1 * spec.image: empty"; got != want {
		t.Fatalf("summarize of a program's errors = %q, want %q", got, want)
	}
	if got := summarize("first line\nsecond"); got != "first line" {
		t.Fatalf("summarize without error lines = %q", got)
	}
}

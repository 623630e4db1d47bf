package stack

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestClassifyTornRead: the empty checkpoint read ("failed to load checkpoint: EOF") is a lock's
// wait only while a lock file of that stack exists in the backend, as the engine host reads it;
// a backend the host cannot read, or no engine host, leaves it a plain failure.
func TestClassifyTornRead(t *testing.T) {
	const stackName = "test.ns.torn"
	torn := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: " + tornRead + "\n")
	lockJSON := `{"pid":4242,"username":"op","hostname":"pod-a","timestamp":"2026-01-02T03:04:05Z"}`
	tests := map[string]struct {
		backend   string            // "" for a fresh file backend
		noHost    bool              // the Manager has no engine host
		files     map[string]string // lock files, relative to <backend>/.pulumi/locks
		err       error
		want      bool // ErrLocked
		wantLocks []Lock
	}{
		"torn read, lock held": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": lockJSON}, err: torn,
			want: true, wantLocks: []Lock{{User: "op", Host: "pod-a", Pid: 4242, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}},
		"torn read, lock being written": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": ""}, err: torn,
			want: true},
		"torn read, no lock":                 {err: torn},
		"torn read, lock of another stack":   {files: map[string]string{"organization/kindcustomhttp/test.ns.other/a.json": lockJSON}, err: torn},
		"torn read, lock of another project": {files: map[string]string{"organization/other/" + stackName + "/a.json": lockJSON}, err: torn},
		"torn read, backend unreachable":     {backend: "postgres://u@127.0.0.1:1/db?sslmode=disable", err: torn},
		"torn read, lock held, no host": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": lockJSON}, err: torn,
			noHost: true},
		"another failure, lock held": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": lockJSON},
			err: errors.New("failed to run update: exit status 255\nstderr: error: boom\n")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			backend := "file://" + t.TempDir()
			if tc.backend != "" {
				backend = tc.backend
			}
			for rel, content := range tc.files {
				p := filepath.Join(strings.TrimPrefix(backend, "file://"), ".pulumi", "locks", filepath.FromSlash(rel))
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
			if !tc.noHost {
				attachHost(t, m)
			}
			err = m.classifyStack(stackName, tc.err)
			var oe *OperationError
			if err == nil || !errors.As(err, &oe) || !errors.Is(err, tc.err) {
				t.Fatalf("classifyStack = %v, want an *OperationError wrapping the CLI's error", err)
			}
			if got := errors.Is(err, ErrLocked); got != tc.want {
				t.Fatalf("classifyStack = %v: ErrLocked %v, want %v", err, got, tc.want)
			}
			if !slices.EqualFunc(oe.Locks, tc.wantLocks, sameLock) {
				t.Fatalf("locks = %+v, want %+v", oe.Locks, tc.wantLocks)
			}
		})
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

// TestBackendUnavailable: the CLI errors that mean "the state backend cannot be reached or
// opened" (retried with a short backoff, reason BackendUnavailable), as the CLI v3.255.0
// prints them, and errors that do not.
func TestBackendUnavailable(t *testing.T) {
	for msg, want := range map[string]bool{
		`error: unable to open bucket postgres://pulumi:xxxxx@127.0.0.1:34939/pulumi?sslmode=disable: failed to ping PostgreSQL: dial tcp 127.0.0.1:34939: connect: connection refused`:                                                                                                                                                                                            true,
		`error: unable to open bucket postgres://pulumi:xxxxx@127.0.0.1:35442/pulumi: failed to ping PostgreSQL: pq: password authentication failed for user "pulumi" (28P01)`:                                                                                                                                                                                                     true,
		`select stack a: error: unable to open state database "postgres://pulumi@127.0.0.1:43243/pulumi?sslmode=disable": failed to ping PostgreSQL: dial tcp 127.0.0.1:43243: connect: connection refused`:                                                                                                                                                                        true,
		`select stack a: error: unable to open state database "postgres://pulumi@127.0.0.1:38341/pulumi?sslmode=disable": failed to ping PostgreSQL: pq: password authentication failed for user "pulumi" (28P01)`:                                                                                                                                                                 true,
		`error: read ".pulumi/meta.yaml": blob (key ".pulumi/meta.yaml") (code=Unknown): operation error S3: GetObject, exceeded maximum number of attempts, 3, https response error StatusCode: 0, RequestID: , HostID: , request send failed, Get "http://127.0.0.1:42759/pulumi-state/.pulumi/meta.yaml?x-id=GetObject": dial tcp 127.0.0.1:42759: connect: connection refused`: true,
		`error: the stack is currently locked by 1 lock(s).`: false,
		`error: resource "urn:pulumi:s::p::kubernetes:apps/v1:Deployment::deployment" was not successfully created by the Kubernetes API server: dial tcp 127.0.0.1:6443: connect: connection refused`: false,
	} {
		if got := backendUnavailable(msg); got != want {
			t.Errorf("backendUnavailable(%.60q...) = %v, want %v", msg, got, want)
		}
	}
}

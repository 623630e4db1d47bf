package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestEngineArgs: up skips its own preview and confirmation; --refresh and --diff only where
// RunOptions asks.
func TestEngineArgs(t *testing.T) {
	tests := map[string]struct {
		op   string
		opts RunOptions
		want []string
	}{
		"up":                {op: "up", want: []string{"--yes", "--skip-preview"}},
		"up, all":           {op: "up", opts: RunOptions{Refresh: true, Diff: true}, want: []string{"--yes", "--skip-preview", "--refresh", "--diff"}},
		"preview":           {op: "preview"},
		"preview, refresh":  {op: "preview", opts: RunOptions{Refresh: true}, want: []string{"--refresh"}},
		"preview, diff":     {op: "preview", opts: RunOptions{Diff: true}, want: []string{"--diff"}},
		"up, color ignored": {op: "up", opts: RunOptions{Color: "always"}, want: []string{"--yes", "--skip-preview"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := engineArgs(tc.op, tc.opts); !slices.Equal(got, tc.want) {
				t.Fatalf("engineArgs(%s, %+v) = %q, want %q", tc.op, tc.opts, got, tc.want)
			}
		})
	}
}

// TestParseEventLog: the summary's counts and the stack resource's outputs (secrets hidden)
// come out of a log of the engine's own shape; a resource's outputs and a planning event do
// not count; a torn line is an error, not an empty result.
func TestParseEventLog(t *testing.T) {
	log := strings.Join([]string{
		`{"sequence":0,"timestamp":1,"preludeEvent":{"config":{}}}`,
		`{"sequence":1,"timestamp":1,"resOutputsEvent":{"metadata":{"op":"create","urn":"urn:pulumi:s::p::kubernetes:core/v1:Service::svc","type":"kubernetes:core/v1:Service","new":{"type":"kubernetes:core/v1:Service","urn":"u","id":"ns/svc","parent":"","provider":"","outputs":{"greeting":"not the stack's"}}}}}`,
		`{"sequence":2,"timestamp":1,"resOutputsEvent":{"planning":true,"metadata":{"op":"create","urn":"urn:pulumi:s::p::pulumi:pulumi:Stack::p-s","type":"pulumi:pulumi:Stack","new":{"type":"pulumi:pulumi:Stack","urn":"u","id":"","parent":"","provider":"","outputs":{"greeting":"planned"}}}}}`,
		`{"sequence":3,"timestamp":1,"resOutputsEvent":{"metadata":{"op":"create","urn":"urn:pulumi:s::p::pulumi:pulumi:Stack::p-s","type":"pulumi:pulumi:Stack","new":{"type":"pulumi:pulumi:Stack","urn":"u","id":"","parent":"","provider":"","outputs":{"greeting":"hello","replicas":2,"token":{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","plaintext":"\"x\""}}}}}}`,
		`{"sequence":4,"timestamp":1,"summaryEvent":{"maybeCorrupt":false,"durationSeconds":1,"resourceChanges":{"create":4,"same":1},"PolicyPacks":{}}}`,
		`{"sequence":5,"timestamp":1,"cancelEvent":{}}`,
	}, "\n")
	out, err := parseEventLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if out.changes["create"] != 4 || out.changes["same"] != 1 || len(out.changes) != 2 {
		t.Fatalf("changes = %v, want create 4, same 1", out.changes)
	}
	want := map[string]string{"greeting": "hello", "replicas": "2", "token": "[secret]"}
	if fmt.Sprint(out.outputs) != fmt.Sprint(want) {
		t.Fatalf("outputs = %v, want %v", out.outputs, want)
	}

	if _, err := parseEventLog(strings.NewReader(`{"sequence":0,"summaryEv`)); err == nil || !strings.Contains(err.Error(), "event log") {
		t.Fatalf("torn log: err = %v, want an event log error", err)
	}
	if _, err := readEventLog(filepath.Join(t.TempDir(), "none.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing log: err = %v, want ErrNotExist", err)
	}
}

// countingManager is newManager with the real pulumi CLI behind a wrapper that appends each
// run's arguments to a file, for counting CLI runs; runs returns the runs since the last call
// (without `pulumi version`, which New runs once). It has no engine host (hostManager adds
// one): every operation is a CLI run, and so is every request of the engine host's (a new stack,
// pruning, locks, a diagnosis: `pulumi operator-request`).
func countingManager(t *testing.T) (m *Manager, backend string, runs func() []string) {
	t.Helper()
	real := testenv.PulumiCLI(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "runs.log")
	wrapper := filepath.Join(dir, "cli", "bin", "pulumi")
	if err := os.MkdirAll(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// Each run's GOGC goes to gogc.log: what the CLI (and so its provider plugins) really got.
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %q\nprintf '%%s\\n' \"${GOGC-unset}\" >> %q\nexec %q \"$@\"\n",
		log, filepath.Join(dir, "gogc.log"), real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	backend = filepath.Join(dir, "backend")
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://" + backend,
		WorkRoot:    filepath.Join(dir, "workspaces"),
		PulumiPath:  wrapper,
		PulumiHome:  DefaultPulumiHome(real),
		ClusterName: "test",
		Env:         map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	seen := 0
	runs = func() []string {
		raw, err := os.ReadFile(log)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var got []string
		for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			if i < seen || line == "" {
				continue
			}
			var f []string
			for _, a := range strings.Fields(line) {
				if !strings.HasPrefix(a, "-") {
					f = append(f, a)
				}
			}
			if len(f) == 0 || f[0] == "version" {
				seen = i + 1
				continue
			}
			cmd := f[0]
			if cmd == "stack" && len(f) > 1 {
				cmd += " " + f[1]
			}
			got = append(got, cmd)
			seen = i + 1
		}
		return got
	}
	runs()
	// New's `pulumi version` runs with this process's environment alone; not an operation.
	if err := os.Remove(filepath.Join(dir, "gogc.log")); err != nil {
		t.Fatal(err)
	}
	return m, backend, runs
}

// TestOneCLIRunPerOperation: on a stack this process knows, up, preview and refresh are each
// one CLI run, the engine's, and an up's outputs and summary come from its event log; destroy is
// the engine's run and `stack rm --remove-backups` (which leaves no file of the stack behind);
// a new stack costs one `pulumi operator-request` more (without an engine host; with one it costs
// no CLI run: TestEngineHostUp); a process that has not seen an existing stack (a restart) looks
// for pending operations once (`stack export`).
func TestOneCLIRunPerOperation(t *testing.T) {
	m, backendDir, runs := countingManager(t)
	ctx := context.Background()
	name, err := m.StackName("peerns", "web")
	if err != nil {
		t.Fatal(err)
	}
	expect := func(step string, want ...string) {
		t.Helper()
		if got := runs(); !slices.Equal(got, want) {
			t.Fatalf("%s ran the CLI %d times: %q, want %q", step, len(got), got, want)
		}
	}

	up, err := m.Up(ctx, name, secretProgram("hello"), RunOptions{})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	expect("up of a new stack", "operator-request", "up")
	// The CLI runs with ChildGOGC (when the test's own environment sets no GOGC).
	wantGOGC := ChildGOGC
	if v, ok := os.LookupEnv("GOGC"); ok {
		wantGOGC = v
	}
	gogc, err := os.ReadFile(filepath.Join(filepath.Dir(backendDir), "gogc.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range strings.Fields(string(gogc)) {
		if got != wantGOGC {
			t.Fatalf("a CLI run had GOGC=%s, want %s (all runs: %q)", got, wantGOGC, gogc)
		}
	}
	if up.Outputs["greeting"] != "hello" || up.Outputs["token"] != "[secret]" || up.Changes["create"] != 1 {
		t.Fatalf("up = %+v, want greeting hello, token [secret], 1 create", up)
	}

	up, err = m.Up(ctx, name, secretProgram("bye"), RunOptions{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	expect("up of a known stack", "up")
	if up.Outputs["greeting"] != "bye" || up.Changes["same"] != 1 {
		t.Fatalf("second up = %+v, want greeting bye, 1 same", up)
	}

	pre, err := m.Preview(ctx, name, secretProgram("again"), RunOptions{})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	expect("preview", "preview")
	if pre.Changes["same"] != 1 {
		t.Fatalf("preview = %+v, want 1 same", pre)
	}

	if _, err := m.Refresh(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	expect("refresh", "refresh")

	// A second Manager is a restarted operator: it has not looked at the stack yet.
	restarted, _, restartedRuns := countingManager(t)
	restarted.backend, restarted.cfg.WorkRoot = m.backend, m.cfg.WorkRoot
	if _, err := restarted.Up(ctx, name, secretProgram("bye"), RunOptions{}); err != nil {
		t.Fatalf("up after a restart: %v", err)
	}
	if got, want := restartedRuns(), []string{"operator-request", "stack select", "stack export", "up"}; !slices.Equal(got, want) {
		t.Fatalf("up after a restart ran %q, want %q", got, want)
	}
	runs()

	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	expect("destroy", "destroy", "stack rm")
	if exists, err := m.Exists(ctx, name); err != nil || exists {
		t.Fatalf("after destroy Exists = %v, %v", exists, err)
	}
}

// TestStackRemovedBehindItsBack: a stack this Manager knows, removed by someone else (`pulumi
// destroy --remove` or `stack rm` from a laptop), is created again by the next up, and the next
// destroy of it is a destroy of nothing; a refresh of it says it is gone.
func TestStackRemovedBehindItsBack(t *testing.T) {
	m, backend := newManager(t)
	other, _ := newManager(t)
	other.backend = m.backend
	ctx := context.Background()
	name, err := m.StackName("peerns", "gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, name, program("hello", 0), RunOptions{}); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := other.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy from elsewhere: %v", err)
	}
	if _, err := m.Refresh(ctx, name, RunOptions{}); err == nil || !strings.Contains(err.Error(), "no stack named") {
		t.Fatalf("refresh of a stack removed elsewhere: err = %v, want one saying no stack named %s", err, name)
	}

	up, err := m.Up(ctx, name, program("again", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up of a stack removed elsewhere: %v", err)
	}
	if up.Outputs["greeting"] != "again" || up.Changes["create"] != 1 {
		t.Fatalf("up of a stack removed elsewhere = %+v, want it created again", up)
	}
	if got := stackFiles(t, backend); len(got) != 1 {
		t.Fatalf("backend holds %v, want the stack again", got)
	}

	if _, err := other.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("second destroy from elsewhere: %v", err)
	}
	if res, err := m.Destroy(ctx, name, RunOptions{}); err != nil || res.Changed() || !res.StackMissing {
		t.Fatalf("destroy of a stack removed elsewhere = %+v, %v; want nothing to do, StackMissing", res, err)
	}
}

// TestProgramErrorIsTheUpsError: a program that fails or panics fails the up with its own
// message, and the stack is looked at again before the next operation.
func TestProgramErrorIsTheUpsError(t *testing.T) {
	m, _ := newManager(t)
	ctx := context.Background()
	name, err := m.StackName("peerns", "broken")
	if err != nil {
		t.Fatal(err)
	}
	failing := map[string]pulumi.RunFunc{
		"an error": func(*pulumi.Context) error { return errors.New("spec.replicaCount: must be at least 1") },
		"a panic":  func(*pulumi.Context) error { panic("spec.replicaCount: must be at least 1") },
	}
	for what, prog := range failing {
		_, err := m.Up(ctx, name, prog, RunOptions{})
		if err == nil || !strings.Contains(err.Error(), "spec.replicaCount: must be at least 1") {
			t.Fatalf("up of a program returning %s: err = %v, want the program's message", what, err)
		}
		if m.isSettled(name) {
			t.Fatalf("after a failed up (%s) the stack is still recorded as settled", what)
		}
	}
	if _, err := m.Up(ctx, name, program("fixed", 0), RunOptions{}); err != nil {
		t.Fatalf("up after the failures: %v", err)
	}
}

// TestRelativeWorkRoot: a relative WorkRoot (a laptop's --state-dir .local/state) works: the
// CLI runs in the stack's workspace directory, so the event log's path must not be relative.
func TestRelativeWorkRoot(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://backend",
		WorkRoot:    "state/workspaces",
		PulumiPath:  testenv.PulumiCLI(t),
		ClusterName: "test",
		Env:         map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	name, err := m.StackName("peerns", "web")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // a new stack, then a known one
		up, err := m.Up(context.Background(), name, program("hello", 0), RunOptions{})
		if err != nil || up.Outputs["greeting"] != "hello" {
			t.Fatalf("up %d with a relative work root = %+v, %v", i+1, up, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "workspaces", name, "Pulumi.yaml")); err != nil {
		t.Fatalf("workspace not under the relative root: %v", err)
	}
}

// TestNoLanguageHostNeeded: the operator serves its program in-process for every operation,
// refresh and destroy included, so a Pulumi home without the Go language host (an operator
// image, a laptop without `make plugins`' optional part) runs them all.
func TestNoLanguageHostNeeded(t *testing.T) {
	real := testenv.PulumiCLI(t)
	home := t.TempDir() // no plugins at all: the test's program declares no resource
	dir := t.TempDir()
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://" + filepath.Join(dir, "backend"),
		WorkRoot:    filepath.Join(dir, "workspaces"),
		PulumiPath:  real,
		PulumiHome:  home,
		ClusterName: "test",
		Env:         map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase", "PULUMI_IGNORE_AMBIENT_PLUGINS": "true"},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if found, _ := filepath.Glob(filepath.Join(filepath.Dir(real), "pulumi-language-go*")); len(found) > 0 {
		t.Fatalf("a language host next to the CLI (%v) would hide what this test checks", found)
	}
	ctx := context.Background()
	name, err := m.StackName("peerns", "nolang")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, name, program("hello", 0), RunOptions{}); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := m.Preview(ctx, name, program("hello", 0), RunOptions{}); err != nil {
		t.Fatalf("preview: %v", err)
	}
	if _, err := m.Refresh(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("refresh without a language host: %v", err)
	}
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy without a language host: %v", err)
	}
}

package commands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

var (
	unchanged = result{Object: "team-a/web", Stack: "p/c.team-a.web", Changes: map[string]int{"same": 4}}
	changed   = result{Object: "team-a/api", Stack: "p/c.team-a.api", Changes: map[string]int{"update": 1, "same": 3}, diff: "~ replicas: 1 => 3\n"}
	failed    = result{Object: "team-a/db", Stack: "p/c.team-a.db", Error: "update failed", err: errors.New("update failed")}
	// locked's message does not say "locked by": the lock is found by errors.Is, not by text.
	locked = result{Object: "team-a/q", Stack: "p/c.team-a.q", Error: "stack q is busy",
		err: fmt.Errorf("up: %w", &stack.OperationError{Summary: "conflict", Err: stack.ErrLocked})}
)

// report's exit code: locked before failed before changes, changes only for preview with
// --expect-no-changes.
func TestReportExitCode(t *testing.T) {
	tests := map[string]struct {
		op      Operation
		flags   objectFlags
		results []result
		code    int // 0: nil error
		msg     string
	}{
		"all unchanged":                 {op: Up, results: []result{unchanged}},
		"changes from up":               {op: Up, flags: objectFlags{expectNoChanges: true}, results: []result{changed}},
		"changes without the flag":      {op: Preview, results: []result{changed, unchanged}},
		"changes with expect-no-change": {op: Preview, flags: objectFlags{expectNoChanges: true}, results: []result{changed, unchanged}, code: ExitChanges, msg: "1 of 2 objects would change"},
		"failure":                       {op: Preview, flags: objectFlags{expectNoChanges: true}, results: []result{changed, failed}, code: ExitFailed, msg: "preview failed for 1 of 2 objects"},
		"lock":                          {op: Up, results: []result{failed, locked, unchanged}, code: ExitTimeout, msg: "up: stack q is busy"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := report(&out, &tc.flags, tc.op, tc.results)
			if got := ExitCode(err); got != tc.code || (err != nil && !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("report = %v (exit %d), want exit %d saying %q", err, got, tc.code, tc.msg)
			}
			if !strings.Contains(out.String(), "OBJECT") || strings.Count(out.String(), "team-a/") < len(tc.results) {
				t.Fatalf("table does not list every object:\n%s", out.String())
			}
		})
	}
}

// The table shows the counts and result of each object, then the errors; a preview's diff
// only with --diff or when --expect-no-changes fails.
func TestReportTable(t *testing.T) {
	var out bytes.Buffer
	_ = report(&out, &objectFlags{}, Preview, []result{unchanged, changed, failed})
	lines := strings.Split(out.String(), "\n")
	want := []string{
		"OBJECT      STACK           CREATE  UPDATE  REPLACE  DELETE  SAME  RESULT",
		"team-a/web  p/c.team-a.web  0       0       0        0       4     no changes",
		"team-a/api  p/c.team-a.api  0       1       0        0       3     changes",
		"team-a/db   p/c.team-a.db   0       0       0        0       0     failed",
		"team-a/db: update failed",
	}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Fatalf("table:\n%s\nline %d: want %q", out.String(), i, w)
		}
	}
	if strings.Contains(out.String(), "replicas") {
		t.Fatalf("preview without --diff printed the diff:\n%s", out.String())
	}
	for name, flags := range map[string]objectFlags{"--diff": {diff: true}, "--expect-no-changes": {expectNoChanges: true}} {
		out.Reset()
		_ = report(&out, &flags, Preview, []result{unchanged, changed})
		if !strings.Contains(out.String(), "\n--- team-a/api (p/c.team-a.api)\n~ replicas: 1 => 3\n") || strings.Contains(out.String(), "--- team-a/web") {
			t.Fatalf("preview %s: want the changed object's diff only:\n%s", name, out.String())
		}
	}
}

// --json prints the results, the operation as its name, without the diff.
func TestReportJSON(t *testing.T) {
	var out bytes.Buffer
	if err := report(&out, &objectFlags{jsonOut: true}, Preview, []result{{Object: "a/b", Stack: "s", Operation: Preview, diff: "x"}}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if len(got.Results) != 1 || got.Results[0]["operation"] != "preview" || got.Results[0]["object"] != "a/b" || len(got.Results[0]) != 3 {
		t.Fatalf("--json results %v", got.Results)
	}
}

// --summary-markdown appends (two runs, two sections) a table, the errors and, with --diff,
// the diffs; a file that cannot be written exits ExitFailed.
func TestReportMarkdown(t *testing.T) {
	md := filepath.Join(t.TempDir(), "summary.md")
	flags := objectFlags{summaryMarkdown: md, diff: true}
	for range 2 {
		_ = report(&bytes.Buffer{}, &flags, Preview, []result{unchanged, changed, failed})
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, w := range []string{"| `team-a/api` | `p/c.team-a.api` | 0 | 1 | 0 | 0 | 3 | changes |", "3 objects, 1 with changes.",
		"**team-a/db failed:** update failed", "<details><summary>team-a/api</summary>\n\n```diff\n~ replicas: 1 => 3\n```\n</details>"} {
		if !strings.Contains(s, w) {
			t.Errorf("summary does not contain %q:\n%s", w, s)
		}
	}
	if n := strings.Count(s, "### pulumi-operator preview"); n != 2 {
		t.Errorf("%d sections after two runs, want 2 (append)", n)
	}

	flags.summaryMarkdown = filepath.Join(t.TempDir(), "missing", "summary.md")
	err = report(&bytes.Buffer{}, &flags, Preview, []result{unchanged})
	if ExitCode(err) != ExitFailed || !strings.Contains(err.Error(), "write --summary-markdown") {
		t.Fatalf("unwritable summary: %v, want exit %d", err, ExitFailed)
	}
}

// The lock message names the holder when the backend reported one, and says what to do.
func TestLockMessage(t *testing.T) {
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	held := &stack.OperationError{Err: stack.ErrLocked, Locks: []stack.Lock{{User: "ana", Host: "ci-7", Pid: 42, Created: created}}}
	tests := map[string]struct {
		err    error
		waited time.Duration
		want   string
	}{
		"holder known": {held, 0, "stack s is locked by ana@ci-7 (pid 42) since 2024-05-01T12:00:00Z: retry later, or pass --wait-for-lock 5m"},
		"holder unknown": {&stack.OperationError{Err: stack.ErrLocked}, 0,
			"stack s is locked by another update: retry later, or pass --wait-for-lock 5m"},
		"after waiting": {held, 5 * time.Minute, "stack s is still locked by ana@ci-7 (pid 42) since 2024-05-01T12:00:00Z after waiting 5m0s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := lockMessage("s", tc.err, tc.waited); got != tc.want {
				t.Fatalf("lockMessage = %q, want %q", got, tc.want)
			}
		})
	}
}

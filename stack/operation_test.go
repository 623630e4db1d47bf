package stack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpPreviewDestroy(t *testing.T) {
	m, backend := newManager(t)
	ctx := context.Background()
	name, err := m.StackName("peerns", "web")
	if err != nil {
		t.Fatal(err)
	}

	pre, err := m.Preview(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	if pre.Changes["create"] != 1 { // the stack resource itself
		t.Fatalf("preview of a new stack = %v, want 1 create", pre.Changes)
	}
	if got := stackFiles(t, backend); len(got) != 0 {
		t.Fatalf("a preview of a new stack left it in the backend: %v", got)
	}

	up, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if up.Outputs["greeting"] != "hello" || !up.Changed() {
		t.Fatalf("up = %+v", up)
	}
	if got := stackFiles(t, backend); len(got) != 1 || !strings.HasSuffix(got[0], name+".json") {
		t.Fatalf("backend holds %v, want the state of %s", got, name)
	}

	again, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	if again.Changed() {
		t.Fatalf("an unchanged program changed %v", again.Changes)
	}

	// A preview changes nothing: the state still holds the applied output, not the previewed one.
	if _, err = m.Preview(ctx, name, program("bye", 0), RunOptions{}); err != nil {
		t.Fatalf("preview: %v", err)
	}
	state, err := os.ReadFile(stackFiles(t, backend)[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(state), `"hello"`) || strings.Contains(string(state), `"bye"`) {
		t.Fatalf("preview wrote to the stack's state:\n%s", state)
	}
	if exists, err := m.Exists(ctx, name); err != nil || !exists {
		t.Fatalf("Exists = %v, %v", exists, err)
	}
	if r, err := m.Refresh(ctx, name, RunOptions{}); err != nil || r.Changes["same"] != 1 {
		t.Fatalf("refresh = %+v, %v", r, err)
	}
	list, err := m.ListStacks(ctx)
	if err != nil || len(list) != 1 || list[0].Name != name || list[0].Namespace != "peerns" || list[0].CRName != "web" ||
		list[0].Cluster != "test" || list[0].LastUpdate == "" {
		t.Fatalf("ListStacks = %+v, %v", list, err)
	}

	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if got := stackFiles(t, backend); len(got) != 0 {
		t.Fatalf("destroy left stack state %v", got)
	}
	if exists, err := m.Exists(ctx, name); err != nil || exists {
		t.Fatalf("after destroy Exists = %v, %v", exists, err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.WorkRoot, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("destroy left the workspace directory: %v", err)
	}
	// A second destroy of a stack that is gone is not an error (a retried delete).
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy of a removed stack: %v", err)
	}
	if _, err := m.Refresh(ctx, name, RunOptions{}); err == nil {
		t.Fatal("refresh of a removed stack succeeded")
	}
}

// TestStreams: an operation's own Progress wins over Config.Progress; with neither, progress
// is suppressed (nil).
func TestStreams(t *testing.T) {
	own, cfg := &bytes.Buffer{}, &bytes.Buffer{}
	tests := map[string]struct {
		cfg, own io.Writer
		want     io.Writer
	}{
		"neither":     {},
		"config only": {cfg: cfg, want: cfg},
		"own wins":    {cfg: cfg, own: own, want: own},
		"own only":    {own: own, want: own},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := &Manager{cfg: Config{Progress: tc.cfg}}
			got := m.streams(RunOptions{Progress: tc.own})
			if tc.want == nil {
				if got != nil {
					t.Fatalf("streams = %v, want nil", got)
				}
				return
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("streams = %v, want [%p]", got, tc.want)
			}
		})
	}
}

package enginehost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/util/cancel"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// serveLines runs serve on url and project with the request lines in, to its end, and returns
// its exit code, its replies by id and its standard error.
func serveLines(t *testing.T, url, project string, in ...string) (int, map[int64]protocol.Reply, string) {
	t.Helper()
	var out, stderr bytes.Buffer
	code := serve(context.Background(), url, project, strings.NewReader(strings.Join(in, "\n")+"\n"), &out, &stderr)
	replies := map[int64]protocol.Reply{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r protocol.Reply
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("reply %q: %v", sc.Text(), err)
		}
		replies[r.ID] = r
	}
	return code, replies, stderr.String()
}

// TestStartRejects: a missing or non-DIY backend URL, or a bad project name, stops the host at
// start with exit 2 and a message that says what to set, never echoing a password.
func TestStartRejects(t *testing.T) {
	tests := map[string]struct {
		url, project, want string
	}{
		"no URL":       {"", "proj", "PULUMI_BACKEND_URL"},
		"Pulumi Cloud": {"https://user:hunter2@api.pulumi.com", "proj", `"https"`},
		"bad project":  {"file://" + t.TempDir(), "a b", "project name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, replies, stderr := serveLines(t, tc.url, tc.project, `{"id":1,"op":"up"}`)
			if code != 2 || len(replies) != 0 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "hunter2") {
				t.Fatalf("exit %d, replies %v, stderr %q; want 2, none, a message naming %s without the password", code, replies, stderr, tc.want)
			}
		})
	}
}

// TestBadRequests: a line that is not JSON is reported and skipped, an unknown operation and an
// up without what it needs get an error reply with the CLI's exit code 1 and an "error:" line;
// the host goes on serving, and exits 0 when its input ends. Nothing is written to the backend.
func TestBadRequests(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	code, replies, stderr := serveLines(t, "file://"+dir, "proj",
		`not json`,
		`{"id":1,"op":"destroy","stack":"dev"}`,
		`{"id":2,"op":"up","stack":"dev","dir":"relative","client":"127.0.0.1:1"}`,
		`{"id":3,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`,
		`{"id":4,"cancel":true}`,
	)
	if code != 0 || !strings.Contains(stderr, `bad request "not json"`) {
		t.Fatalf("exit %d, stderr %q; want 0 and the bad line reported", code, stderr)
	}
	want := map[int64]string{
		1: `unknown operation "destroy"`,
		2: "bad up request",
		3: "Pulumi.yaml", // no project file in dir
	}
	for id, text := range want {
		r, ok := replies[id]
		kind := protocol.KindBadRequest
		if id == 3 {
			kind = protocol.KindFailed // a workspace without its project file: the operator's bug or damage
		}
		if !ok || r.Code != 1 || r.Kind != kind || !strings.HasPrefix(r.Stderr, "error: ") || !strings.Contains(r.Stderr, text) {
			t.Errorf("reply %d: %+v (present %v); want code 1, kind %s and an error line naming %s", id, r, ok, kind, text)
		}
	}
	if len(replies) != len(want) {
		t.Errorf("replies %v; want one per up or unknown request, none for a cancel", replies)
	}
	if stacks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "stacks", "*", "*")); len(stacks) != 0 {
		t.Errorf("bad requests wrote stacks %v", stacks)
	}
}

// TestNoStack: an up of a stack the backend does not hold fails with the CLI's words for it
// (which stack.Manager reads as a stack removed behind its back) and creates none.
func TestNoStack(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: proj\nruntime: go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, replies, _ := serveLines(t, "file://"+dir, "proj", `{"id":7,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`)
	if r := replies[7]; r.Code == 0 || r.Kind != protocol.KindStackMissing || !strings.Contains(r.Stderr, "no stack named 'dev' found") {
		t.Fatalf("up of a missing stack: %+v; want a failure of kind %s saying no stack named 'dev' found", r, protocol.KindStackMissing)
	}
	_, replies, _ = serveLines(t, "file://"+dir, "other", `{"id":8,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`)
	if r := replies[8]; r.Code == 0 || !strings.Contains(r.Stderr, `serves project "other"`) {
		t.Fatalf("up of another project's workspace: %+v; want a failure naming the project", r)
	}
	if stacks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "stacks", "*", "*")); len(stacks) != 0 {
		t.Errorf("created stacks %v", stacks)
	}
}

// TestInit: init creates a stack in a real file:// backend (Created), finds it the second
// time (not Created, no error), leaves no lock, and an invalid stack name gets the CLI's error
// shape.
func TestInit(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	_, replies, _ := serveLines(t, "file://"+dir, "proj", `{"id":1,"op":"init","stack":"dev"}`)
	if r := replies[1]; r.Code != 0 || !r.Created {
		t.Fatalf("first init: %+v, want created", r)
	}
	if _, err := os.Stat(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json")); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	_, replies, _ = serveLines(t, "file://"+dir, "proj", `{"id":2,"op":"init","stack":"dev"}`, `{"id":3,"op":"init","stack":"no/such/thing/here"}`)
	if r := replies[2]; r.Code != 0 || r.Created {
		t.Fatalf("second init: %+v, want exists", r)
	}
	if r := replies[3]; r.Code == 0 || !strings.HasPrefix(r.Stderr, "error: ") || !strings.Contains(r.Stderr, "no/such/thing/here") {
		t.Fatalf("init of an invalid stack name: %+v, want an error naming it", r)
	}
	if locks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "locks", "*", "proj", "dev", "*.json")); len(locks) != 0 {
		t.Errorf("locks left behind: %v", locks)
	}
}

// Two requests for one stack never run at once: the second waits for the first's slot, and a
// cancel while it waits ends it without running; other stacks do not wait.
func TestOneRunPerStack(t *testing.T) {
	h := &host{stacks: map[string]chan struct{}{}, cancels: map[int64]*cancel.Source{}}
	c1, _ := cancel.NewContext(context.Background())
	release, ok := h.acquire("dev", c1)
	if !ok {
		t.Fatal("first acquire failed")
	}
	if rel, ok := h.acquire("prod", c1); !ok {
		t.Fatal("another stack waited")
	} else {
		rel()
	}
	got := make(chan bool, 1)
	c2, _ := cancel.NewContext(context.Background())
	go func() {
		rel, ok := h.acquire("dev", c2)
		if ok {
			rel()
		}
		got <- ok
	}()
	select {
	case <-got:
		t.Fatal("a second request for the stack ran while the first held it")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if ok := <-got; !ok {
		t.Fatal("the second request did not run once the first was done")
	}
	release, _ = h.acquire("dev", c1)
	c3, src3 := cancel.NewContext(context.Background())
	go func() {
		_, ok := h.acquire("dev", c3)
		got <- ok
	}()
	src3.Cancel()
	if ok := <-got; ok {
		t.Fatal("a request cancelled while it waited ran")
	}
	release()
}

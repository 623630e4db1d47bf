package enginehost

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
)

// serveCalls runs serve on url and project behind a real Unix socket, sends each request (a
// protocol.Request as JSON, with an "id" of the test's own to find its reply by) as its Engine
// call through a real gRPC client, one after the other, then closes the host's input as the
// operator does, and returns serve's exit code, the replies by id (none for a call that failed in
// transport, which is logged) and the host's standard error.
func serveCalls(t *testing.T, url, project string, in ...string) (int, map[int64]protocol.Reply, string) {
	t.Helper()
	stderr := &lockedBuffer{}
	client, stop := startHost(t, url, project, stderr)
	replies := map[int64]protocol.Reply{}
	for _, line := range in {
		var call struct {
			ID int64 `json:"id"`
			protocol.Request
		}
		if err := json.Unmarshal([]byte(line), &call); err != nil {
			t.Fatalf("request %q: %v", line, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var r protocol.Reply
		var err error
		if call.Op == protocol.OpUp {
			r, err = protocol.StartUp(ctx, client, call.Request).Result()
		} else {
			r, err = protocol.Call(ctx, client, call.Request)
		}
		cancel()
		if err != nil {
			t.Logf("call %d (%s): %v", call.ID, call.Op, err)
			continue
		}
		replies[call.ID] = r
	}
	return stop(), replies, stderr.String()
}

// startHost runs serve on url and project behind a real Unix socket, its standard error to
// stderr, and returns a real gRPC client of it and stop, which closes the client and the host's
// input as the operator does and returns serve's exit code.
func startHost(t *testing.T, url, project string, stderr io.Writer) (enginepb.EngineClient, func() int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stopR, stopW := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- serve(context.Background(), url, project, ln, stopR, stderr) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return enginepb.NewEngineClient(conn), func() int {
		conn.Close()
		stopW.Close()
		select {
		case code := <-done:
			return code
		case <-time.After(time.Minute):
			t.Fatal("serve did not return within a minute of its input's end")
			return 0
		}
	}
}

// lockedBuffer is a bytes.Buffer that goroutines may write concurrently (the root module has one in
// internal/testenv, which this module cannot import).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
			code, replies, stderr := serveCalls(t, tc.url, tc.project, `{"id":1,"op":"up"}`)
			if code != 2 || len(replies) != 0 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "hunter2") {
				t.Fatalf("exit %d, replies %v, stderr %q; want 2, none, a message naming %s without the password", code, replies, stderr, tc.want)
			}
		})
	}
}

// TestBadRequests: an up without what it needs, and an Up call that opens with a cancel, fail
// with the CLI's exit code 1, an "error:" line and the kind that says it is the operator's bug;
// a unary call of an operation that is not one is refused before it is sent. The host goes on
// serving, and exits 0 when its input ends. Nothing is written to the backend.
func TestBadRequests(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	code, replies, _ := serveCalls(t, "file://"+dir, "proj",
		`{"id":1,"op":"destroy","stack":"dev"}`,
		`{"id":2,"op":"up","stack":"dev","dir":"relative","client":"127.0.0.1:1"}`,
		`{"id":3,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`,
	)
	if code != 0 {
		t.Fatalf("exit %d; want 0", code)
	}
	want := map[int64]string{
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
		t.Errorf("replies %v; want one per up, none for the unknown operation", replies)
	}
	if _, err := protocol.Call(context.Background(), nil, protocol.Request{Op: "destroy"}); err == nil || !strings.Contains(err.Error(), `"destroy"`) {
		t.Errorf("Call of an unknown operation: %v; want an error naming it", err)
	}
	if stacks, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "stacks", "*", "*")); len(stacks) != 0 {
		t.Errorf("bad requests wrote stacks %v", stacks)
	}

	// An Up call whose first message is a cancel, straight through the generated client.
	client, stop := startHost(t, "file://"+dir, "proj", io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := client.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&enginepb.UpMessage{Message: &enginepb.UpMessage_Cancel{Cancel: &enginepb.Cancel{}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if r, ok := protocol.ReplyOfError(err); !ok || r.Kind != protocol.KindBadRequest || !strings.Contains(r.Stderr, "first message must be the request") {
		t.Errorf("Up opened with a cancel: %v (reply %+v); want kind %s saying the request comes first", err, r, protocol.KindBadRequest)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d after the bad call; want 0", code)
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
	_, replies, _ := serveCalls(t, "file://"+dir, "proj", `{"id":7,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`)
	if r := replies[7]; r.Code == 0 || r.Kind != protocol.KindStackMissing || !strings.Contains(r.Stderr, "no stack named 'dev' found") {
		t.Fatalf("up of a missing stack: %+v; want a failure of kind %s saying no stack named 'dev' found", r, protocol.KindStackMissing)
	}
	_, replies, _ = serveCalls(t, "file://"+dir, "other", `{"id":8,"op":"up","stack":"dev","dir":"`+dir+`","client":"127.0.0.1:1"}`)
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
	_, replies, _ := serveCalls(t, "file://"+dir, "proj", `{"id":1,"op":"init","stack":"dev"}`)
	if r := replies[1]; r.Code != 0 || !r.Created {
		t.Fatalf("first init: %+v, want created", r)
	}
	if _, err := os.Stat(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json")); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	_, replies, _ = serveCalls(t, "file://"+dir, "proj", `{"id":2,"op":"init","stack":"dev"}`, `{"id":3,"op":"init","stack":"no/such/thing/here"}`)
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
	h := &host{stacks: map[string]chan struct{}{}}
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

// TestExport: export reads a stack's deployment as `pulumi stack export` prints it, as the backend
// holds it: with no passphrase anywhere in the environment, a passphrase-encrypted secret comes
// back still encrypted, beside its salt. A stack that does not exist is kind stack-missing, a bad
// stack name a bad request.
func TestExport(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE_FILE")
	dir := t.TempDir()
	_, replies, _ := serveCalls(t, "file://"+dir, "proj", `{"id":1,"op":"init","stack":"dev"}`)
	if r := replies[1]; r.Code != 0 || !r.Created {
		t.Fatalf("init: %+v, want created", r)
	}
	const salt = "v1:c2FsdHNhbHQ=:v1:bm9uY2Vub25jZQ==:Y2hlY2s="
	const cipher = "v1:bm9uY2Vub25jZQ==:c2VjcmV0"
	checkpoint := `{"version":3,"checkpoint":{"stack":"organization/proj/dev","latest":{"manifest":{"time":"2026-01-01T00:00:00Z","magic":"","version":""},` +
		`"secrets_providers":{"type":"passphrase","state":{"salt":"` + salt + `"}},` +
		`"resources":[{"urn":"urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev","custom":false,"type":"pulumi:pulumi:Stack",` +
		`"outputs":{"token":{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"` + cipher + `"}}}]}}}`
	if err := os.WriteFile(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json"), []byte(checkpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	_, replies, _ = serveCalls(t, "file://"+dir, "proj",
		`{"id":2,"op":"export","stack":"dev"}`, `{"id":3,"op":"export","stack":"gone"}`, `{"id":4,"op":"export","stack":"no/such/thing/here"}`)
	r := replies[2]
	var d struct {
		Version    int `json:"version"`
		Deployment struct {
			SecretsProviders struct {
				Type  string `json:"type"`
				State struct {
					Salt string `json:"salt"`
				} `json:"state"`
			} `json:"secrets_providers"`
			Resources []struct {
				Outputs map[string]map[string]string `json:"outputs"`
			} `json:"resources"`
		} `json:"deployment"`
	}
	if err := json.Unmarshal(r.Deployment, &d); r.Code != 0 || err != nil {
		t.Fatalf("export: %+v (%v); want a deployment", r, err)
	}
	if d.Version != 3 || d.Deployment.SecretsProviders.Type != "passphrase" || d.Deployment.SecretsProviders.State.Salt != salt ||
		len(d.Deployment.Resources) != 1 || d.Deployment.Resources[0].Outputs["token"]["ciphertext"] != cipher {
		t.Fatalf("export = %s; want version 3, the salt and the secret's ciphertext as the backend holds them", r.Deployment)
	}
	if r := replies[3]; r.Code == 0 || r.Kind != protocol.KindStackMissing {
		t.Errorf("export of a missing stack: %+v; want kind %s", r, protocol.KindStackMissing)
	}
	if r := replies[4]; r.Code == 0 || r.Kind != protocol.KindBadRequest {
		t.Errorf("export of a bad stack name: %+v; want kind %s", r, protocol.KindBadRequest)
	}
}

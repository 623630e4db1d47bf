package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// syncBuffer is a bytes.Buffer that a process writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildServer builds this command into a temporary directory and returns the binary's path.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "http-server")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestEnvironmentCannotReconfigure is what a tenant tries: a ConfigMap named in spec.envFrom
// becomes the server's environment, and with HTTP_SERVER_CONFIG=/proc/self/x the peer file's
// directory, which GET /config/<key> serves, would be /proc/self, so /config/environ would be
// the process's environment with every Secret value in it. The real binary, started with an
// environment of such settings beside a planted Secret value and no flags but the test's
// listen address (127.0.0.1), must answer 404, serve on the address of its flag only, and
// say which variables it ignored.
func TestEnvironmentCannotReconfigure(t *testing.T) {
	bin := buildServer(t)
	addr := testenv.FreeAddr(t)
	other := testenv.FreeAddr(t)
	const planted = "PLANTED_DB_PASSWORD=planted-secret-value-8f2c"
	cmd := exec.Command(bin, "--listen", addr, "--drain-delay", "0s")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		planted,
		"HTTP_SERVER_CONFIG=/proc/self/x",
		"HTTP_SERVER_HOSTNAME=tenant-chosen",
		"HTTP_SERVER_LISTEN=" + other,
	}
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the server did not stop within 20 s of SIGINT")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := get("/healthz"); code != http.StatusOK; code, _ = get("/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("no answer on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, path := range []string{"/config/environ", "/config/cmdline", "/config/x"} {
		code, body := get(path)
		if code != http.StatusNotFound || strings.Contains(body, "planted-secret-value") {
			t.Errorf("GET %s = %d %q, want 404 without the planted value", path, code, body)
		}
	}
	if _, body := get("/ping"); strings.Contains(body, "tenant-chosen") {
		t.Errorf("/ping = %q: the hostname came from the environment", body)
	}
	if resp, err := http.Get("http://" + other + "/ping"); err == nil {
		resp.Body.Close()
		t.Errorf("the server answers on %s, HTTP_SERVER_LISTEN's address", other)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "ignoring environment variables") {
		if time.Now().After(deadline) {
			t.Fatal("no log line names the ignored variables")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), "planted-secret-value") || strings.Contains(logs.String(), "/proc/self/x") {
		t.Errorf("the log quotes the environment's values:\n%s", logs.String())
	}
}

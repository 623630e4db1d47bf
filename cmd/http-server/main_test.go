package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runApp(ctx context.Context, args ...string) error {
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	return app.RunContext(ctx, append([]string{"http-server"}, args...))
}

func TestFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"not a duration":        {args: []string{"--interval=abc"}, want: "interval"},
		"negative interval":     {args: []string{"--interval=-1s"}, want: "--interval -1s: must be positive"},
		"zero timeout":          {args: []string{"--timeout=0s"}, want: "--timeout 0s: must be positive"},
		"zero watch interval":   {args: []string{"--watch-interval=0s"}, want: "--watch-interval 0s: must be positive"},
		"zero read timeout":     {args: []string{"--read-timeout=0s"}, want: "--read-timeout 0s: must be positive"},
		"zero max connections":  {args: []string{"--max-connections=0"}, want: "--max-connections 0: must be positive"},
		"negative header bytes": {args: []string{"--max-header-bytes=-1"}, want: "--max-header-bytes -1: must be positive"},
		"peer file in /proc":    {args: []string{"--config=/proc/self/environ"}, want: "a peer file under /proc is refused"},
		"unknown log format":    {args: []string{"--log-format=xml"}, want: `--log-format "xml"`},
		"negative drain delay":  {args: []string{"--drain-delay=-1s"}, want: "--drain-delay -1s: must not be negative"},
		"unexpected argument":   {args: []string{"extra"}, want: "unexpected arguments"},
		"unknown flag":          {args: []string{"--nope"}, want: "nope"},
		"bad listen address":    {args: []string{"--listen=127.0.0.1:notaport"}, want: "listen on 127.0.0.1:notaport"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := runApp(context.Background(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run %v: %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestServesUntilCanceled runs the command with settings from flags, checks the real /ping
// answer, then ends it the way a signal would (context cancel) and expects nil.
func TestServesUntilCanceled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	config := filepath.Join(t.TempDir(), "hostports")
	if err := os.WriteFile(config, []byte(addr+"\n"), 0o644); err != nil { // invalid line: no comma
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runApp(ctx, "--listen", addr, "--config", config, "--hostname", "pod-from-flag", "--interval", "1h",
			"--log-format", "json", "--drain-delay", "1s")
	}()

	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/ping")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no answer on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body != "pong from pod-from-flag" {
		t.Errorf("/ping body %q, want \"pong from pod-from-flag\"", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

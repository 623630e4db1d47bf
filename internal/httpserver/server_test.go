package httpserver

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	s, _ := startServer(t, Options{Hostname: "pod-a"})
	base := baseURL(s)
	waitFor(t, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })

	tests := map[string]struct {
		method, path string
		code         int
		body         string // exact, or "" to skip
	}{
		"ping":                 {http.MethodGet, "/ping", http.StatusOK, "pong from pod-a"},
		"ping any method":      {http.MethodPost, "/ping", http.StatusOK, "pong from pod-a"},
		"healthz":              {http.MethodGet, "/healthz", http.StatusOK, "ok\n"},
		"readyz":               {http.MethodGet, "/readyz", http.StatusOK, "ok\n"},
		"root is unknown":      {http.MethodGet, "/", http.StatusNotFound, ""},
		"ping/ is unknown":     {http.MethodGet, "/ping/", http.StatusNotFound, ""},
		"other path unknown":   {http.MethodGet, "/pong", http.StatusNotFound, ""},
		"metrics is text page": {http.MethodGet, "/metrics", http.StatusOK, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body := do(t, tc.method, base+tc.path)
			if code != tc.code {
				t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, code, tc.code)
			}
			if tc.body != "" && body != tc.body {
				t.Errorf("%s %s: body %q, want %q", tc.method, tc.path, body, tc.body)
			}
		})
	}
}

func TestMetricsPage(t *testing.T) {
	// The peer is this server itself: a real answer, so every metric has a sample.
	s, rec := newServer(t, Options{Interval: 50 * time.Millisecond})
	self := peerOf(t, s.Addr().String())
	writePeerFile(t, s.opts.ConfigPath, line(self)+"not a peer line\n")
	start(t, s, rec)

	peer := map[string]string{"peer": self.String()}
	waitMetric(t, s, metricPings, map[string]string{"peer": self.String(), "result": resultSuccess}, atLeast(2))
	page := scrape(t, s)
	for _, want := range []string{
		"# TYPE http_server_peer_pings_total counter",
		"# TYPE http_server_peer_ping_duration_seconds histogram",
		"# TYPE http_server_ping_rounds_total counter",
		"# TYPE http_server_peers gauge",
		"# TYPE http_server_peer_file_invalid_lines gauge",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	checks := []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{metricPings, map[string]string{"peer": self.String(), "result": resultFailure}, func(v float64) bool { return v == 0 }, "0 (initialised)"},
		{metricPingSeconds + "_count", peer, atLeast(2), ">= 2"},
		{metricPingSeconds + "_sum", peer, func(v float64) bool { return v > 0 }, "> 0"},
		{metricPingSeconds + "_bucket", map[string]string{"peer": self.String(), "le": "+Inf"}, atLeast(2), ">= 2"},
		{metricRounds, nil, atLeast(2), ">= 2"},
		{metricPeers, nil, func(v float64) bool { return v == 1 }, "1"},
		{metricInvalid, nil, func(v float64) bool { return v == 1 }, "1"},
	}
	for _, c := range checks {
		v, found := metricValue(page, c.name, c.labels)
		if !found || !c.ok(v) {
			t.Errorf("%s%v = %v (found %v), want %s", c.name, c.labels, v, found, c.want)
		}
	}
}

func TestReadyzBeforeFirstCheck(t *testing.T) {
	s, _ := newServer(t, Options{})
	defer s.Close()
	rec := httptest.NewRecorder()
	s.http.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Run: status %d, want 503", rec.Code)
	}
	rec = httptest.NewRecorder()
	s.http.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/healthz before Run: status %d, want 200", rec.Code)
	}
}

func TestNewErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	reg := prometheus.NewRegistry()
	first, err := New(Options{Listen: "127.0.0.1:0", Registry: reg, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	procLink := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/proc/self", procLink); err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		opts Options
		want string
	}{
		"negative interval":          {Options{Interval: -time.Second}, "interval -1s: must not be negative"},
		"negative timeout":           {Options{Timeout: -1}, "timeout -1ns: must not be negative"},
		"address in use":             {Options{Listen: busy.Addr().String()}, "listen on " + busy.Addr().String()},
		"bad address":                {Options{Listen: "127.0.0.1:notaport"}, "listen on 127.0.0.1:notaport"},
		"metrics already registered": {Options{Registry: reg}, "register metrics"},
		"peer file in /proc":         {Options{ConfigPath: "/proc/self/x"}, "a peer file under /proc is refused"},
		"peer file via a link":       {Options{ConfigPath: filepath.Join(procLink, "x")}, "a peer file under /proc is refused"},
		"peer file is a link":        {Options{ConfigPath: procLink}, "a peer file under /proc is refused"},
		"peer file in /sys":          {Options{ConfigPath: "/sys/kernel/x"}, "a peer file under /sys is refused"},
		"negative read timeout":      {Options{ReadTimeout: -1}, "read timeout -1ns: must not be negative"},
		"negative max connections":   {Options{MaxConnections: -1}, "max connections -1: must not be negative"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.opts.Hostname = "h"
			if tc.opts.Listen == "" {
				tc.opts.Listen = "127.0.0.1:0"
			}
			s, err := New(tc.opts)
			if err == nil {
				s.Close()
				t.Fatalf("New succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestRunStopsAndFreesPort(t *testing.T) {
	s, _ := newServer(t, Options{})
	addr := s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "/healthz 200", func() bool { code, _ := get(t, "http://"+addr+"/healthz"); return code == http.StatusOK })

	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Errorf("second Run: %v, want already started", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v, want nil after cancel", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after cancel")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Run returned", addr)
	}
}

// After ctx ends, Run serves on for DrainDelay with /readyz 503 (the pod is leaving its
// Service's endpoints; connections still arrive), then closes the port; a negative delay is an
// error.
func TestDrainDelay(t *testing.T) {
	if _, err := New(Options{DrainDelay: -time.Second}); err == nil || !strings.Contains(err.Error(), "drain delay -1s: must not be negative") {
		t.Errorf("New with a negative drain delay: %v", err)
	}
	s, _ := newServer(t, Options{DrainDelay: 2 * time.Second})
	base := baseURL(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "/readyz 200", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK })
	cancel()
	waitFor(t, "/readyz 503 while draining", func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusServiceUnavailable })
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := fresh.Get(base + "/ping")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/ping on a new connection while draining = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not return after the drain delay")
	}
	if c, err := net.Dial("tcp", s.Addr().String()); err == nil {
		c.Close()
		t.Error("the port still accepts connections after Run returned")
	}
}

package httpserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// waitTimeout is the generous deadline of every wait in these tests: they poll for an outcome
// and never assert how fast it came.
const waitTimeout = 30 * time.Second

// logRecorder keeps every record logged through its handler.
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *logRecorder) handler() slog.Handler { return recordHandler{rec: r} }

// find returns the records with message msg.
func (r *logRecorder) find(msg string) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, rec := range r.records {
		if rec.msg == msg {
			out = append(out, rec)
		}
	}
	return out
}

func (r *logRecorder) dump(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		t.Logf("log: %s %s %v", rec.level, rec.msg, rec.attrs)
	}
}

type recordHandler struct {
	rec   *logRecorder
	attrs []slog.Attr
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]string{}
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	h.rec.mu.Lock()
	h.rec.records = append(h.rec.records, logRecord{level: r.Level, msg: r.Message, attrs: attrs})
	h.rec.mu.Unlock()
	return nil
}

func (h recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordHandler{rec: h.rec, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h recordHandler) WithGroup(string) slog.Handler { return h }

// newServer creates a server on 127.0.0.1:<free port> with a log recorder; fields left zero in
// opts get test-friendly values (a peer file in t.TempDir(), 1h interval, short watch interval).
func newServer(t *testing.T, opts Options) (*Server, *logRecorder) {
	t.Helper()
	rec := &logRecorder{}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.ConfigPath == "" {
		opts.ConfigPath = filepath.Join(t.TempDir(), "hostports")
	}
	if opts.Interval == 0 {
		opts.Interval = time.Hour
	}
	if opts.WatchInterval == 0 {
		opts.WatchInterval = 20 * time.Millisecond
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Hostname == "" {
		opts.Hostname = "test-host"
	}
	opts.Logger = slog.New(rec.handler())
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, rec
}

// start runs s until the test ends; the cleanup checks that Run returns nil promptly after
// cancel and that the port is closed afterwards.
func start(t *testing.T, s *Server, rec *logRecorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Run did not return within %v of cancel", waitTimeout)
		}
		if t.Failed() {
			rec.dump(t)
		}
	})
}

// startServer is newServer + start.
func startServer(t *testing.T, opts Options) (*Server, *logRecorder) {
	t.Helper()
	s, rec := newServer(t, opts)
	start(t, s, rec)
	return s, rec
}

func baseURL(s *Server) string { return "http://" + s.Addr().String() }

// peerOf is the peer line and Peer for a server or an httptest server at addr (127.0.0.1:port).
func peerOf(t *testing.T, addr string) Peer {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return Peer{Host: host, Port: n}
}

func line(p Peer) string { return fmt.Sprintf("%s,%d\n", p.Host, p.Port) }

// writePeerFile replaces path atomically (write a temporary file, rename), as a ConfigMap
// volume update does, so the server never reads a half-written file.
func writePeerFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 10 ms until it holds, failing the test after waitTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitChecks waits until the server has read its peer file n more times.
func waitChecks(t *testing.T, s *Server, n uint64) {
	t.Helper()
	target := s.fileChecks.Load() + n
	waitFor(t, fmt.Sprintf("%d peer file checks", n), func() bool { return s.fileChecks.Load() >= target })
}

// waitResult waits for a result of peer p that satisfies ok and returns it.
func waitResult(t *testing.T, s *Server, p Peer, what string, ok func(Result) bool) Result {
	t.Helper()
	var got Result
	waitFor(t, what, func() bool {
		r, found := s.LastResults()[p]
		got = r
		return found && ok(r)
	})
	return got
}

// get does one real GET and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return do(t, http.MethodGet, url)
}

func do(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// scrape returns the /metrics page of s in the text exposition format.
func scrape(t *testing.T, s *Server) string {
	t.Helper()
	code, body := get(t, baseURL(s)+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d, body %q", code, body)
	}
	return body
}

// metricValue finds the sample name{labels} (labels exactly, in any order) in a text
// exposition page.
func metricValue(page, name string, labels map[string]string) (float64, bool) {
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		series, value := l[:i], l[i+1:]
		sname, rest, _ := strings.Cut(series, "{")
		if sname != name {
			continue
		}
		got := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(rest, -1) {
			got[m[1]] = m[2]
		}
		if !maps.Equal(got, labels) {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, false
		}
		return f, true
	}
	return 0, false
}

// labelRE matches one label pair; the values in these tests need no unescaping.
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// waitMetric waits until the sample exists and satisfies ok, and returns its value.
func waitMetric(t *testing.T, s *Server, name string, labels map[string]string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	waitFor(t, fmt.Sprintf("metric %s%v", name, labels), func() bool {
		got, found := metricValue(scrape(t, s), name, labels)
		v = got
		return found && ok(got)
	})
	return v
}

// closedPort returns a port on 127.0.0.1 that nothing listens on (it was just released).
func closedPort(t *testing.T) Peer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := peerOf(t, ln.Addr().String())
	ln.Close()
	return p
}

func atLeast(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }

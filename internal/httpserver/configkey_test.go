package httpserver

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GET /config/<key> serves the mounted ConfigMap's value of key as the pod sees it now, through
// the kubelet's layout (each key a symlink into "..data"), and nothing else: no other file, no
// "..data" entry, no directory, no other method.
func TestConfigKey(t *testing.T) {
	dir := t.TempDir()
	// The kubelet's ConfigMap volume: <dir>/..2026_11_23/<key> files, "..data" -> that
	// directory, and <dir>/<key> -> ..data/<key>.
	ts := filepath.Join(dir, "..2026_11_23")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"hostports": "127.0.0.1,9\n", "index.html": "hello v1"} {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..2026_11_23", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(dir), "secret")
	if err := os.WriteFile(outside, []byte("TOP-SECRET-OUTSIDE"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Names that are ConfigMap keys but lead out of the directory, or to no file: the kubelet
	// never makes them, the server must not follow them if anything else does.
	for name, target := range map[string]string{"escape": outside, "up": "../secret", "environ": "/proc/self/environ"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Options{ConfigPath: filepath.Join(dir, "hostports")})
	base := baseURL(s)
	tests := map[string]struct {
		method, path string
		code         int
		body         string
	}{
		"a key":                 {http.MethodGet, "/config/index.html", http.StatusOK, "hello v1"},
		"the peer file":         {http.MethodGet, "/config/hostports", http.StatusOK, "127.0.0.1,9\n"},
		"a missing key":         {http.MethodGet, "/config/nope", http.StatusNotFound, ""},
		"the volume's ..data":   {http.MethodGet, "/config/..data", http.StatusNotFound, ""},
		"the directory":         {http.MethodGet, "/config/", http.StatusNotFound, ""},
		"a dot":                 {http.MethodGet, "/config/.", http.StatusNotFound, ""},
		"an escaped parent":     {http.MethodGet, "/config/..%2fsecret", http.StatusNotFound, ""},
		"a nested path":         {http.MethodGet, "/config/..2026_11_23/index.html", http.StatusNotFound, ""},
		"a key not a ConfigMap": {http.MethodGet, "/config/a%20b", http.StatusNotFound, ""},
		"a symlink out":         {http.MethodGet, "/config/escape", http.StatusNotFound, ""},
		"a relative link out":   {http.MethodGet, "/config/up", http.StatusNotFound, ""},
		"a link into /proc":     {http.MethodGet, "/config/environ", http.StatusNotFound, ""},
		"a directory":           {http.MethodGet, "/config/subdir", http.StatusNotFound, ""},
		"POST":                  {http.MethodPost, "/config/index.html", http.StatusMethodNotAllowed, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body := do(t, tc.method, base+tc.path)
			if code != tc.code || (tc.code == http.StatusOK && body != tc.body) {
				t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, code, body, tc.code, tc.body)
			}
			if strings.Contains(body, "TOP-SECRET") || strings.Contains(body, "PATH=") {
				t.Errorf("%s %s leaked a file outside the ConfigMap: %q", tc.method, tc.path, body)
			}
		})
	}
	// A ConfigMap update (the kubelet swaps "..data") is served at once.
	ts2 := filepath.Join(dir, "..2026_11_24")
	if err := os.Mkdir(ts2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts2, "index.html"), []byte("hello v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_11_24", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, base+"/config/index.html"); code != http.StatusOK || body != "hello v2" {
		t.Errorf("after the update: %d %q, want 200 \"hello v2\"", code, body)
	}
}

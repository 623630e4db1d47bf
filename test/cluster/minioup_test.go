package cluster_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// fakeMinIOEnv, set to a count N, makes the test binary a stand-in for `minio server`
// (serveFakeMinIO): a server that answers every S3 request 503 until it has answered N of them,
// as MinIO does while it initializes. A real MinIO cannot be made to stay in that state.
const fakeMinIOEnv = "PULUMI_OPERATOR_TEST_FAKE_MINIO_503S"

func TestMain(m *testing.M) {
	if n := os.Getenv(fakeMinIOEnv); n != "" {
		serveFakeMinIO(n, os.Args[1:])
		return
	}
	os.Exit(m.Run())
}

// serveFakeMinIO serves on the --address of args (minio server's flags): 200 at
// /minio/health/cluster and /minio/health/ready; to an S3 request, 503 for the first n503 of them ("all": every one),
// then 404 to a HEAD (no bucket yet) and 200 to a PUT (bucket created). It logs each S3 answer.
func serveFakeMinIO(n503 string, args []string) {
	addr := ""
	for i, a := range args {
		if a == "--address" && i+1 < len(args) {
			addr = args[i+1]
		}
	}
	limit := int64(-1)
	if n503 != "all" {
		n, err := strconv.ParseInt(n503, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: %v\n", fakeMinIOEnv, n503, err)
			os.Exit(2)
		}
		limit = n
	}
	var served atomic.Int64
	// Both health checks say 200: /minio/health/ready does so while MinIO initializes too.
	http.HandleFunc("/minio/health/cluster", func(w http.ResponseWriter, _ *http.Request) {})
	http.HandleFunc("/minio/health/ready", func(w http.ResponseWriter, _ *http.Request) {})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusServiceUnavailable
		if k := served.Add(1); limit >= 0 && k > limit {
			code = map[string]int{http.MethodHead: http.StatusNotFound, http.MethodPut: http.StatusOK}[r.Method]
		}
		fmt.Printf("S3 %s %s: %d\n", r.Method, r.URL.Path, code)
		w.Header().Set("Content-Length", "0") // as MinIO's: curl -X HEAD waits for a body without it
		w.WriteHeader(code)
	})
	if err := http.ListenAndServe(addr, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// TestMinIOUpWaitsOutInitializing: hack/minio-up.sh asks again while the server answers its
// bucket requests 503 (MinIO does while it initializes, for a moment after it first answers),
// and creates the bucket once the server answers; a server that answers only 503 fails it after
// MINIO_TIMEOUT, naming the status. The server is the stand-in of serveFakeMinIO.
func TestMinIOUpWaitsOutInitializing(t *testing.T) {
	root := testenv.RepoRoot()
	for name, tc := range map[string]struct {
		n503     string
		wantUp   bool
		wantText string // in minio-up's output
		wantLog  string // in the server's log
	}{
		"503 three times, then the bucket is created": {
			n503: "3", wantUp: true, wantText: "created bucket pulumi-state",
			wantLog: "S3 HEAD /pulumi-state: 503\nS3 HEAD /pulumi-state: 503\nS3 HEAD /pulumi-state: 503\nS3 HEAD /pulumi-state: 404\nS3 PUT /pulumi-state: 200\n",
		},
		"only 503: fails after the timeout": {
			n503: "all", wantText: "bucket pulumi-state: HTTP 503",
		},
	} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Dir(testenv.StandIn(t, "minio", fakeMinIOEnv, tc.n503))
			dir := filepath.Join(t.TempDir(), "minio")
			t.Cleanup(func() { stopPidFile(t, filepath.Join(dir, "minio.pid")) })
			cmd := exec.Command(filepath.Join(root, "hack", "minio-up.sh"))
			cmd.Env = append(os.Environ(), "MINIO_DIR="+dir, "BIN_DIR="+bin, "MINIO_TIMEOUT=3",
				fmt.Sprintf("MINIO_PORT=%d", testenv.FreePort(t)), fmt.Sprintf("MINIO_CONSOLE_PORT=%d", testenv.FreePort(t)))
			out, err := cmd.CombinedOutput()
			if up := err == nil; up != tc.wantUp {
				t.Fatalf("minio-up succeeded: %v, want %v (err %v)\n%s", up, tc.wantUp, err, out)
			}
			if !strings.Contains(string(out), tc.wantText) {
				t.Fatalf("minio-up's output lacks %q:\n%s", tc.wantText, out)
			}
			log, _ := os.ReadFile(filepath.Join(dir, "minio.log"))
			if !strings.Contains(string(log), tc.wantLog) {
				t.Fatalf("the server's log lacks %q:\n%s", tc.wantLog, log)
			}
			if n := strings.Count(string(log), ": 503"); !tc.wantUp && n < 2 {
				t.Fatalf("minio-up gave up after %d answers of 503, want it to ask again until the timeout:\n%s", n, log)
			}
		})
	}
}

// stopPidFile kills the process whose pid the file holds, if any (the stand-in server, which
// hack/minio-down.sh does not know by name).
func stopPidFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

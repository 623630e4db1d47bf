package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// operatorSpec says how to run one `pulumi-operator watch`.
type operatorSpec struct {
	name          string // for the log file: operator-<name>.log
	namespace     string // --namespace, "" for all
	labelSelector string // --label-selector
	workers       int
	resync        time.Duration
	pulumi        string            // --pulumi; default the bench's --pulumi
	binary        string            // the operator binary; default the bench's --operator
	env           map[string]string // added to the environment
	backendURL    string            // --backend-url; "" for the default file backend in --state-dir
	engineHost    string            // --engine-host; "" to leave the flag out (every up a pulumi CLI process)
	stateDir      string            // --state-dir; "" for the run's shared one
}

// operator is a running `pulumi-operator watch`.
type operator struct {
	cmd     *exec.Cmd
	logPath string
	metrics string // http://127.0.0.1:port/metrics
	done    chan error
}

// startOperator runs the operator with the shared state directory (so every operator of the
// run computes the same digests and reaches the same stacks), a log file of its own, and
// metrics and health on free loopback ports; it returns once /readyz answers (caches synced).
func (b *bench) startOperator(ctx context.Context, s operatorSpec) (*operator, error) {
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	healthAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pulumi := s.pulumi
	if pulumi == "" {
		pulumi = b.pulumi
	}
	// JSON logs: the bench reads them back (oplog.go).
	stateDir := s.stateDir
	if stateDir == "" {
		stateDir = b.stateDir
	}
	args := []string{"--kubeconfig", b.kube.kubeconfig, "--state-dir", stateDir, "--cluster-name", "bench",
		"--pulumi", pulumi, "--project-file", filepath.Join(b.repo, "Pulumi.yaml"), "--log-format", "json",
		"watch", "--workers", strconv.Itoa(s.workers), "--resync", s.resync.String(),
		"--metrics-addr", metricsAddr, "--health-addr", healthAddr}
	if s.namespace != "" {
		args = append(args, "--namespace", s.namespace)
	}
	if s.labelSelector != "" {
		args = append(args, "--label-selector", s.labelSelector)
	}
	var pgPassword string
	if s.backendURL != "" {
		var backendURL string
		backendURL, pgPassword = splitPassword(s.backendURL)
		args = append([]string{"--backend-url", backendURL}, args...)
	}
	if s.engineHost != "" {
		args = append([]string{"--engine-host", s.engineHost}, args...)
	}
	logPath := filepath.Join(b.out, "logs", "operator-"+s.name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create operator log: %w", err)
	}
	bin := s.binary
	if bin == "" {
		bin = b.operatorBin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=bench", "PULUMI_OPERATOR_BACKEND_URL=", "PULUMI_BACKEND_URL=")
	if pgPassword != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+pgPassword)
	}
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start operator: %w", err)
	}
	o := &operator{cmd: cmd, logPath: logPath, metrics: "http://" + metricsAddr + "/metrics", done: make(chan error, 1)}
	go func() { o.done <- cmd.Wait(); logf.Close() }()
	b.running.Store(o, struct{}{})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return o, nil
			}
		}
		select {
		case err := <-o.done:
			return nil, fmt.Errorf("operator exited at start (%v); log %s:\n%s", err, logPath, tail(logPath, 20))
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			o.stop()
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			o.stop()
			return nil, fmt.Errorf("operator not ready within 2 minutes; log %s:\n%s", logPath, tail(logPath, 20))
		}
	}
}

// stop sends SIGTERM and waits (the operator lets running Pulumi operations finish for its
// grace period), then SIGKILL after a minute.
func (o *operator) stop() {
	if o == nil || o.cmd.Process == nil {
		return
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(time.Minute):
		_ = o.cmd.Process.Kill()
		<-o.done
	}
	o.done <- nil // for a second stop
}

func (o *operator) pid() int { return o.cmd.Process.Pid }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tail returns the last n lines of the file at path ("" when it cannot be read).
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// splitPassword takes the password out of a backend URL: the operator and stack.New refuse a
// URL that holds one (stack.ErrCredentialsInURL), and take a PostgreSQL password from
// PGPASSWORD instead. password is "" when the URL has none.
func splitPassword(raw string) (withoutPassword, password string) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, ""
	}
	p, ok := u.User.Password()
	if !ok {
		return raw, ""
	}
	u.User = url.User(u.User.Username())
	return u.String(), p
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100 on every Linux
// this runs on (sysconf(_SC_CLK_TCK) would need cgo).
const clockTicks = 100

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
	args := []string{"--kubeconfig", b.kube.kubeconfig, "--state-dir", b.stateDir, "--cluster-name", "bench",
		"--pulumi", pulumi, "--project-file", filepath.Join(b.repo, "Pulumi.yaml"),
		"watch", "--workers", strconv.Itoa(s.workers), "--resync", s.resync.String(),
		"--metrics-addr", metricsAddr, "--health-addr", healthAddr}
	if s.namespace != "" {
		args = append(args, "--namespace", s.namespace)
	}
	if s.labelSelector != "" {
		args = append(args, "--label-selector", s.labelSelector)
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

// metric returns the sum of the samples of name whose labels contain every label given
// (`result="error"`); a metric never observed is 0.
func (o *operator) metric(name string, labels ...string) (float64, error) {
	resp, err := http.Get(o.metrics)
	if err != nil {
		return 0, fmt.Errorf("scrape operator metrics: %w", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// logLine is one line of the operator's text log.
type logLine struct {
	at         time.Time
	msg        string
	object     string
	generation int64
	seconds    float64
	raw        string
}

var (
	reTime = regexp.MustCompile(`^time=(\S+)`)
	reMsg  = regexp.MustCompile(`msg="([^"]*)"|msg=(\S+)`)
	reObj  = regexp.MustCompile(` object=(\S+)`)
	reGen  = regexp.MustCompile(` generation=(\d+)`)
	reSecs = regexp.MustCompile(` seconds=([0-9.e+-]+)`)
)

// logLines parses the operator's log (slog text format).
func (o *operator) logLines() []logLine {
	b, err := os.ReadFile(o.logPath)
	if err != nil {
		return nil
	}
	var out []logLine
	for _, line := range bytes.Split(b, []byte("\n")) {
		s := string(line)
		m := reTime.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		l := logLine{at: at, raw: s}
		if mm := reMsg.FindStringSubmatch(s); mm != nil {
			l.msg = mm[1] + mm[2]
		}
		if mm := reObj.FindStringSubmatch(s); mm != nil {
			l.object = mm[1]
		}
		if mm := reGen.FindStringSubmatch(s); mm != nil {
			l.generation, _ = strconv.ParseInt(mm[1], 10, 64)
		}
		if mm := reSecs.FindStringSubmatch(s); mm != nil {
			l.seconds, _ = strconv.ParseFloat(mm[1], 64)
		}
		out = append(out, l)
	}
	return out
}

// countMsg counts log lines with message msg at or after since.
func (o *operator) countMsg(msg string, since time.Time) int {
	n := 0
	for _, l := range o.logLines() {
		if l.msg == msg && !l.at.Before(since) {
			n++
		}
	}
	return n
}

// waitLog waits for a line with msg about object at or after since.
func (o *operator) waitLog(ctx context.Context, msg, object string, since time.Time, timeout time.Duration) (logLine, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, l := range o.logLines() {
			if l.msg == msg && l.object == object && !l.at.Before(since) {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return logLine{}, fmt.Errorf("no %q line for %s in %s within %s", msg, object, o.logPath, timeout)
		}
		select {
		case <-ctx.Done():
			return logLine{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStat is what /proc/<pid>/stat says about CPU, in seconds: the process's own
// (utime+stime) and that of its children it has waited for (cutime+cstime).
type procStat struct{ self, children float64 }

func readStat(pid int) (procStat, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return procStat{}, 0, errors.New("unparsable /proc stat")
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, 0, errors.New("short /proc stat")
	}
	num := func(j int) float64 { v, _ := strconv.ParseFloat(f[j], 64); return v / clockTicks }
	ppid, _ := strconv.Atoi(f[1])
	return procStat{self: num(11) + num(12), children: num(13) + num(14)}, ppid, nil
}

// vmRSS is the resident set of pid in bytes (VmRSS of /proc/<pid>/status), 0 if it is gone.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// descendants lists pid and every process below it, through /proc/<pid>/task/*/children.
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", out[i]))
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", out[i], t.Name()))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// sampler samples the resident memory of a process and its tree every 100 ms.
type sampler struct {
	mu                  sync.Mutex
	peakTree, peakSelf  int64
	lastSelf            int64
	peakProcs, samples  int
	sumSelf             float64
	stopOnce            sync.Once
	stopCh, stoppedChan chan struct{}
}

func startSampler(pid int) *sampler {
	s := &sampler{stopCh: make(chan struct{}), stoppedChan: make(chan struct{})}
	go func() {
		defer close(s.stoppedChan)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			pids := descendants(pid)
			var tree int64
			for _, p := range pids {
				tree += vmRSS(p)
			}
			self := vmRSS(pid)
			s.mu.Lock()
			s.peakTree = max(s.peakTree, tree)
			s.peakSelf = max(s.peakSelf, self)
			s.peakProcs = max(s.peakProcs, len(pids))
			s.lastSelf = self
			s.sumSelf += float64(self)
			s.samples++
			s.mu.Unlock()
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends sampling and returns peak tree RSS, peak and mean RSS of the process itself
// (bytes), and the most processes seen at once in the tree.
func (s *sampler) stop() (peakTree, peakSelf, meanSelf int64, peakProcs int) {
	s.stopOnce.Do(func() { close(s.stopCh) })
	<-s.stoppedChan
	s.mu.Lock()
	defer s.mu.Unlock()
	mean := int64(0)
	if s.samples > 0 {
		mean = int64(s.sumSelf / float64(s.samples))
	}
	return s.peakTree, s.peakSelf, mean, s.peakProcs
}

// wrapperEnv names the environment of wrapper mode: when this program is run as `pulumi`
// (through a symlink) with wrapperReal set, it runs the real CLI and appends one JSON line
// per run (arguments, wall time, CPU of the CLI and of the plugins it waited for) to
// wrapperLog.
const (
	wrapperReal = "PULUMI_BENCH_REAL_CLI"
	wrapperLog  = "PULUMI_BENCH_CLI_LOG"
)

// cliRun is one line of the wrapper's log.
type cliRun struct {
	Args  []string  `json:"args"`
	Start time.Time `json:"start"`
	Wall  float64   `json:"wall"`
	CPU   float64   `json:"cpu"`
	Exit  int       `json:"exit"`
}

// runWrapper is main in wrapper mode; it returns the exit code.
func runWrapper(real string) int {
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi bench wrapper:", err)
		return 127
	}
	sig := make(chan os.Signal, 4)
	notifySignals(sig)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if log := os.Getenv(wrapperLog); log != "" && cmd.ProcessState != nil {
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := 0.0
		if ru != nil {
			cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		line, _ := jsonMarshal(cliRun{Args: os.Args[1:], Start: start, Wall: time.Since(start).Seconds(), CPU: cpu, Exit: code})
		if f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.Write(append(line, '\n'))
			f.Close()
		}
	}
	return code
}

// readCLIRuns reads a wrapper log.
func readCLIRuns(path string) ([]cliRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cliRun
	dec := jsonDecoder(f)
	for {
		var r cliRun
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

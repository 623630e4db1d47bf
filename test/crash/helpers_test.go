// Package crash proves that the operator keeps its Pulumi state safe when things go wrong: the
// real binary (`pulumi-operator watch`), the real pulumi CLI, the real Kubernetes provider plugin
// and a real state backend (file, PostgreSQL), against the local simulated cluster.
//
//   - TestCrashSafety: SIGKILLs the operator, with all its pulumi and plugin processes, at random
//     moments while objects are created, changed and deleted, and checks that state and cluster
//     agree afterwards: a short run (3 kills, file backend) always, the long one (20 kills per
//     backend, file and PostgreSQL) opt-in: PULUMI_OPERATOR_CRASH_TEST=1, `make crash-test`.
//   - TestBackendOutage: PostgreSQL stops for 30 s while objects change.
//   - TestPassphraseNeverLeaks: the passphrase and the database password appear in no log, status,
//     Event or process command line.
//   - TestShards: two operators with label selectors share a PostgreSQL backend and a namespace.
//
// Environment: PULUMI_OPERATOR_TEST_KUBECONFIG (else .local/cluster/kubeconfig), the pinned CLI
// (bin/pulumi or PULUMI_OPERATOR_PULUMI), the Kubernetes provider plugin (SKIP without it), and
// for the PostgreSQL parts PULUMI_TEST_POSTGRES_URL (hack/postgres-up.sh; SKIP when unset, FAIL
// under CI=true). TestBackendOutage and TestPassphraseNeverLeaks stop PostgreSQL or need a
// password of their own, so each starts a private server with hack/postgres-up.sh (PG_BIN as
// that script reads it) in a directory and on a port of its own, rather than the shared server
// of PULUMI_TEST_POSTGRES_URL that other packages' tests use at the same time.
package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	services    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	configmaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// managedBy selects the objects the operator's program creates (infra.Labels).
const managedBy = "app.kubernetes.io/managed-by=pulumi-operator"

// ---- the operator binary

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	if d, err := time.ParseDuration(os.Getenv(forkerEnv)); err == nil {
		forker(d) // TestProcessEnvironsSkipsForks's stand-in for an operator
		os.Exit(0)
	}
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// operatorBinary builds the repository's binary once per test run (`go build -o DIR/pulumi-operator .`
// at the repository root) and returns its path.
func operatorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "pulumi-operator-crash-")
		if buildErr != nil {
			return
		}
		builtBin = filepath.Join(buildDir, "pulumi-operator")
		cmd := exec.Command("go", "build", "-o", builtBin, ".")
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// requirePlugin skips (loudly) without the Kubernetes provider plugin, which the real program
// needs and no reachable registry serves.
func requirePlugin(t *testing.T) {
	t.Helper()
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
}

// requireEnv returns $name, or SKIPs saying how to get it (FAILs under CI=true, where
// hack/test.sh always provides it).
func requireEnv(t *testing.T, name, how string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FAIL: %s is not set (CI runs hack/test.sh, which must provide it: %s)", name, how)
		}
		t.Skipf("SKIP: %s is not set: %s", name, how)
	}
	return v
}

// ---- operator processes

// tagEnv marks every process of one operator: the operator, its pulumi CLIs and their plugins
// all inherit the environment. It is how the test finds them all, as a container runtime finds
// a container's processes by its cgroup. A process group is not enough: the CLI starts every
// plugin in a process group of its own (sdk/go/common/util/cmdutil.RegisterProcessGroup), so
// `kill -9 -PGID` of the operator leaves the Kubernetes provider plugins running.
const tagEnv = "PULUMI_OPERATOR_CRASH_TEST_TAG"

// logBuffer collects an operator's output over all its runs; safe for the process writing and
// the test reading.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Len is an offset for since.
func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// since is the output written after offset.
func (l *logBuffer) since(offset int) string {
	s := l.String()
	if offset > len(s) {
		return ""
	}
	return s[offset:]
}

// operator is one `pulumi-operator watch`, started, killed and restarted by the test with the
// same arguments, environment and state directory.
type operator struct {
	t    *testing.T
	name string
	args []string
	env  []string
	tag  string
	logs *logBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// operatorConfig is what an operator process gets.
type operatorConfig struct {
	name       string // for logs
	kubeconfig string
	backendURL string // "" means the default, file://<stateDir>/backend
	stateDir   string
	cluster    string
	namespace  string
	// extra are more `watch` flags, e.g. --label-selector.
	extra []string
	// env is added to the environment (PULUMI_CONFIG_PASSPHRASE..., PULUMI_BACKEND_URL).
	env map[string]string
	// urlInEnv passes backendURL as PULUMI_BACKEND_URL instead of --backend-url, keeping a
	// password off the command line.
	urlInEnv bool
	// engineHost is --engine-host: the operator's ups run in that engine host process
	// (stack.EngineHost) instead of a pulumi CLI each; "" leaves the flag out (the operator
	// built for the test has none beside it: a CLI process per up).
	engineHost string
}

// newOperator prepares (does not start) an operator; when the test ends it is stopped and
// every process it left is killed, and on failure its log is printed.
func newOperator(t *testing.T, cfg operatorConfig) *operator {
	t.Helper()
	// The operator refuses a backend URL with a password (stack.ErrCredentialsInURL): the
	// password of the test's PostgreSQL goes in PGPASSWORD, as the chart gives it.
	if u, err := url.Parse(cfg.backendURL); err == nil && cfg.backendURL != "" {
		if password, ok := u.User.Password(); ok {
			u.User = url.User(u.User.Username())
			cfg.backendURL = u.String()
			env := map[string]string{"PGPASSWORD": password}
			maps.Copy(env, cfg.env)
			cfg.env = env
		}
	}
	args := []string{"--kubeconfig", cfg.kubeconfig, "--state-dir", cfg.stateDir, "--cluster-name", cfg.cluster,
		"--pulumi", testenv.PulumiCLI(t), "--project-file", filepath.Join(testenv.RepoRoot(), "Pulumi.yaml")}
	if cfg.backendURL != "" && !cfg.urlInEnv {
		args = append(args, "--backend-url", cfg.backendURL)
	}
	if cfg.engineHost != "" {
		args = append(args, "--engine-host", cfg.engineHost)
	}
	args = append(args, "watch", "--namespace", cfg.namespace, "--workers", "2", "--health-addr", "", "--metrics-addr", "")
	args = append(args, cfg.extra...)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE", "PULUMI_BACKEND_URL", "KUBECONFIG",
			"WATCH_NAMESPACE", "PULUMI_OPERATOR_LABEL_SELECTOR", "PULUMI_OPERATOR_LEADER_ELECT", tagEnv:
			continue
		}
		env = append(env, kv)
	}
	for k, v := range cfg.env {
		env = append(env, k+"="+v)
	}
	if cfg.urlInEnv && cfg.backendURL != "" {
		env = append(env, "PULUMI_BACKEND_URL="+cfg.backendURL)
	}
	tag := fmt.Sprintf("%s-%d-%d", cfg.name, os.Getpid(), time.Now().UnixNano())
	env = append(env, tagEnv+"="+tag)
	o := &operator{t: t, name: cfg.name, args: append([]string{operatorBinary(t)}, args...), env: env, tag: tag, logs: &logBuffer{}}
	t.Cleanup(func() {
		o.stop()
		if n := len(taggedPIDs(o.tag, 0)); n > 0 {
			t.Logf("%s: killing %d processes left behind", o.name, len(killTagged(o.tag, 0)))
		}
		if t.Failed() {
			dumpLog(t, o.name, o.logs.String())
		}
	})
	return o
}

// dumpLog prints a log's last 150 lines and saves it whole to a file that outlives the test.
func dumpLog(t *testing.T, name, log string) {
	t.Helper()
	lines := strings.Split(log, "\n")
	if f, err := os.CreateTemp("", "crash-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"+name+"-*.log"); err == nil {
		_, _ = f.WriteString(log)
		_ = f.Close()
		t.Logf("%s log (%d lines) saved in %s", name, len(lines), f.Name())
	}
	if len(lines) > 150 {
		lines = lines[len(lines)-150:]
	}
	t.Logf("%s log, last %d lines:\n%s", name, len(lines), strings.Join(lines, "\n"))
}

// start runs the operator, in a process group of its own (as in a container, where it is not
// the test's child in any other sense).
func (o *operator) start() {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.starts++
	fmt.Fprintf(o.logs, "=== start %d of %s at %s\n", o.starts, o.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(o.args[0], o.args[1:]...)
	cmd.Env = o.env
	cmd.Stdout, cmd.Stderr = o.logs, o.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		o.t.Fatalf("start %s: %v", o.name, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(o.logs, "=== %s (pid %d) exited: %v\n", o.name, cmd.Process.Pid, err)
		close(exited)
	}()
	o.cmd, o.exited = cmd, exited
}

// pid is the running operator's process id, 0 when none runs.
func (o *operator) pid() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cmd == nil {
		return 0
	}
	select {
	case <-o.exited:
		return 0
	default:
		return o.cmd.Process.Pid
	}
}

// kill is a container kill: SIGKILL to the operator and every process it started (pulumi CLIs,
// language hosts, provider plugins), nothing shut down cleanly. It returns the command lines
// of the processes that died (see pulumiOperation).
func (o *operator) kill() []string {
	o.mu.Lock()
	cmd, exited := o.cmd, o.exited
	o.mu.Unlock()
	if cmd == nil {
		return nil
	}
	killed := killTagged(o.tag, 0)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group too, in case the environ was unreadable
	<-exited
	return killed
}

// killPulumi kills (SIGKILL) the operator's pulumi CLIs and their plugins but not the operator,
// as the kernel's OOM killer may pick the largest process of a container. It returns the
// command lines of the processes that died.
func (o *operator) killPulumi() []string {
	p := o.pid()
	if p == 0 {
		return nil
	}
	return killTagged(o.tag, p)
}

// lockedOperation reports whether one of the operator's processes runs one of the pulumi
// operations ops (see pulumiOperation) on a stack that holds a lock, one of those listLocks
// returns (the lock keys of backendLocks, which name the stack as a path segment; read only
// when such an operation runs): the operation has got as far as taking its lock, or it is
// about to fail on another's.
func (o *operator) lockedOperation(listLocks func() []string, ops ...string) bool {
	var locks []string
	listed := false
	for _, l := range o.processCommandLines() {
		if !slices.Contains(ops, pulumiOperation(l)) {
			continue
		}
		if !listed {
			locks, listed = listLocks(), true
		}
		name := stackArg(l)
		if name == "" && pulumiOperation(l) == "up" && len(locks) > 0 {
			// The engine host: its runs name no stack on its command line, and it runs only
			// this operator's ups, so any lock while it runs is one of its runs' (or one it
			// is about to fail on).
			return true
		}
		for _, k := range locks {
			if name != "" && strings.Contains(k, "/"+name+"/") {
				return true
			}
		}
	}
	return false
}

// stackArg is the value of the --stack flag of a command line (arguments separated by
// spaces), "" without one.
func stackArg(cmdline string) string {
	args := strings.Fields(cmdline)
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--stack="); ok {
			return v
		}
		if a == "--stack" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// pulumiOperation is what a pulumi CLI process does, from its command line (arguments
// separated by spaces): its subcommand, "up", "destroy", "refresh", "cancel", or "stack
// import", "stack export", ... for the stack subcommands; "" for another program (the
// operator, a provider plugin). Flags before the subcommand are skipped: the Automation API
// puts --non-interactive there (e.g. `pulumi --non-interactive up --yes --skip-preview ...
// --stack NAME`); it gives none that takes a value.
func pulumiOperation(cmdline string) string {
	args := strings.Fields(cmdline)
	if len(args) > 0 && filepath.Base(args[0]) == stack.EngineHost {
		return "up" // the engine host runs ups only, of any stack (its command line names none)
	}
	if len(args) == 0 || filepath.Base(args[0]) != "pulumi" {
		return ""
	}
	var words []string
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			if len(words) > 0 {
				break
			}
			continue
		}
		words = append(words, a)
		if words[0] != "stack" || len(words) == 2 {
			break
		}
	}
	return strings.Join(words, " ")
}

func TestPulumiOperation(t *testing.T) {
	for name, tc := range map[string]struct {
		cmdline, op, stack string
	}{
		"up": {cmdline: "/work/bin/pulumi --non-interactive up --yes --skip-preview --client=127.0.0.1:37889 --exec-kind=auto.inline --color=never --suppress-progress --stack c.ns.a",
			op: "up", stack: "c.ns.a"},
		"destroy, flags after":  {cmdline: "pulumi destroy --yes --stack=c.ns.b", op: "destroy", stack: "c.ns.b"},
		"stack export":          {cmdline: "/bin/pulumi --non-interactive stack export --show-secrets --stack c.ns.a", op: "stack export", stack: "c.ns.a"},
		"stack alone":           {cmdline: "pulumi stack --stack x", op: "stack", stack: "x"},
		"version":               {cmdline: "/bin/pulumi version", op: "version"},
		"provider plugin":       {cmdline: "/home/plugins/resource-kubernetes-v4.33.0/pulumi-resource-kubernetes 127.0.0.1:45277"},
		"operator":              {cmdline: "/tmp/x/pulumi-operator --pulumi /bin/pulumi watch --namespace ns"},
		"engine host":           {cmdline: "/work/bin/pulumi-operator-engine kindcustomhttp", op: "up"},
		"unreadable (a zombie)": {},
	} {
		t.Run(name, func(t *testing.T) {
			if got := pulumiOperation(tc.cmdline); got != tc.op {
				t.Errorf("pulumiOperation(%q) = %q, want %q", tc.cmdline, got, tc.op)
			}
			if got := stackArg(tc.cmdline); got != tc.stack {
				t.Errorf("stackArg(%q) = %q, want %q", tc.cmdline, got, tc.stack)
			}
		})
	}
}

// stop ends the operator as Kubernetes does: SIGTERM, then SIGKILL after 40 s (the operator's
// own grace period is 25 s).
func (o *operator) stop() {
	o.mu.Lock()
	cmd, exited := o.cmd, o.exited
	o.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(40 * time.Second):
		o.t.Errorf("%s did not stop within 40 s of SIGTERM", o.name)
		o.kill()
	}
}

// taggedPIDs lists the live processes whose environment holds tagEnv=tag, but except.
func taggedPIDs(tag string, except int) []int {
	want := []byte("\x00" + tagEnv + "=" + tag + "\x00")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == except || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || len(b) == 0 { // gone, or a zombie
			continue
		}
		if bytes.Contains(append(append([]byte{0}, b...), 0), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killTagged stops (SIGSTOP) every process tagged tag but except until no new one appears, so
// none can start another while it is being killed, then SIGKILLs them all. It returns their
// command lines (NULs as spaces; "" for a process whose command line could not be read), read
// while they were stopped: what each was doing when it died.
func killTagged(tag string, except int) []string {
	stopped := map[int]bool{}
	for round := 0; round < 10; round++ {
		fresh := 0
		for _, p := range taggedPIDs(tag, except) {
			if !stopped[p] {
				_ = syscall.Kill(p, syscall.SIGSTOP)
				stopped[p] = true
				fresh++
			}
		}
		if fresh == 0 {
			break
		}
	}
	var cmdlines []string
	for p := range stopped {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		cmdlines = append(cmdlines, strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
	}
	for p := range stopped {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return cmdlines
}

// processCommandLines returns the command lines of the operator's processes, NULs as spaces.
func (o *operator) processCommandLines() []string {
	var out []string
	for _, p := range taggedPIDs(o.tag, 0) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err == nil {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// processEnvirons returns the environment of each of the operator's processes but the
// operator itself (whose environment the test wrote), by command line (NULs as spaces), each
// environment's entries joined by newlines.
//
// A process whose command line is the operator's own is left out: it is the operator, or a
// child the operator has forked and not yet exec'd. Go starts a child with clone(CLONE_VM|
// CLONE_VFORK), so until its execve the child shares the operator's memory, and
// /proc/<pid>/environ shows the operator's environment, secrets and all, though the child
// will never run with it. The command line is read before the environment: a process that
// shows another command line has exec'd, and the environment read after it is its own.
func (o *operator) processEnvirons() map[string]string {
	own := strings.Join(o.args, "\x00") + "\x00"
	out := map[string]string{}
	for _, p := range taggedPIDs(o.tag, o.pid()) {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil || len(cmd) == 0 || string(cmd) == own {
			continue // gone, a zombie, or the operator before an exec (see above)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p))
		if err == nil {
			out[strings.ReplaceAll(string(cmd), "\x00", " ")] = strings.ReplaceAll(string(env), "\x00", "\n")
		}
	}
	return out
}

// orphans lists the operator's processes that are not descendants of the running operator:
// what a kill left running (process id and command).
func (o *operator) orphans() []string {
	root := o.pid()
	var out []string
	for _, p := range taggedPIDs(o.tag, 0) {
		if p == root || descends(p, root) {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out = append(out, fmt.Sprintf("%d %s", p, strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return out
}

// descends reports whether pid has ancestor root.
func descends(pid, root int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(fields[1])
		if pid == root {
			return true
		}
	}
	return false
}

// countLines counts the log lines containing every one of subs.
func countLines(log string, subs ...string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
lines:
	for sc.Scan() {
		for _, s := range subs {
			if !strings.Contains(sc.Text(), s) {
				continue lines
			}
		}
		n++
	}
	return n
}

// ---- PostgreSQL servers of a test's own

// pgServer is a PostgreSQL server started by hack/postgres-up.sh for one test.
type pgServer struct {
	dir, port, password, url string
}

// startPostgres starts a private server (a fresh PG_DIR, a free port, role pulumi with
// password) and purges it when the test ends. It SKIPs when PULUMI_TEST_POSTGRES_URL is unset
// (no PostgreSQL set up here), as the tests of the shared server do.
func startPostgres(t *testing.T, password string) *pgServer {
	t.Helper()
	requireEnv(t, "PULUMI_TEST_POSTGRES_URL", "start PostgreSQL with `eval \"$(hack/postgres-up.sh)\"` (this test starts a private server with the same script)")
	dir, err := os.MkdirTemp("", "crashpg") // short: the server's unix socket lives in it
	if err != nil {
		t.Fatal(err)
	}
	s := &pgServer{dir: dir, port: strconv.Itoa(testenv.FreePort(t)), password: password}
	t.Cleanup(func() {
		if out, err := s.script("postgres-down.sh", "--purge"); err != nil {
			t.Errorf("postgres-down --purge: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	s.up(t)
	return s
}

func (s *pgServer) script(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", name), args...)
	cmd.Env = append(os.Environ(), "PG_DIR="+s.dir, "PG_PORT="+s.port, "PG_PASSWORD="+s.password)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stderr.String(), err
	}
	return stdout.String(), nil
}

// up starts (or restarts, same data) the server and sets s.url.
func (s *pgServer) up(t *testing.T) {
	t.Helper()
	out, err := s.script("postgres-up.sh")
	if err != nil {
		t.Fatalf("hack/postgres-up.sh (PG_DIR=%s PG_PORT=%s): %v\n%s", s.dir, s.port, err, out)
	}
	m := regexp.MustCompile(`export PULUMI_TEST_POSTGRES_URL='([^']+)'`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("hack/postgres-up.sh printed no URL: %q", stack.RedactURL(out))
	}
	s.url = m[1]
}

// down stops the server (hack/postgres-down.sh, no --purge: the data stays).
func (s *pgServer) down(t *testing.T) {
	t.Helper()
	if out, err := s.script("postgres-down.sh"); err != nil {
		t.Fatalf("hack/postgres-down.sh: %v\n%s", err, out)
	}
}

// ---- the backend, read by the test

// backend reads a state backend the way a person would: `pulumi stack ls` through
// stack.Manager, `pulumi stack export` through the Automation API, and the lock objects
// directly (file system, or the postgres table).
type backend struct {
	url     string
	cluster string
	mgr     *stack.Manager
	ws      auto.Workspace
}

// openBackend connects the test to the backend url, whose stacks belong to cluster and are
// encrypted with passphrase.
func openBackend(t *testing.T, rawURL, cluster, passphrase string) *backend {
	t.Helper()
	env := map[string]string{
		"PULUMI_CONFIG_PASSPHRASE": passphrase,
		// `pulumi stack ls` on a postgres:// backend deadlocks when it reads more stacks at once
		// (default 10) than half the CLI's connection pool (2 x GOMAXPROCS): each worker holds a
		// connection for a listing and waits for a second (pkg/backend/diy/postgres ListPaged).
		"PULUMI_DIY_BACKEND_PARALLEL": "1",
	}
	// The Manager refuses a URL with a password (stack.ErrCredentialsInURL): PGPASSWORD.
	mgrURL := rawURL
	if u, err := url.Parse(rawURL); err == nil {
		if password, ok := u.User.Password(); ok {
			u.User = url.User(u.User.Username())
			mgrURL, env["PGPASSWORD"] = u.String(), password
		}
	}
	mgr, err := stack.New(stack.Config{
		Project: "kindcustomhttp", BackendURL: mgrURL, WorkRoot: t.TempDir(), PulumiPath: testenv.PulumiCLI(t),
		ClusterName: cluster, Env: env,
	})
	if err != nil {
		t.Fatalf("stack.New: %v", err)
	}
	// `pulumi stack export` needs a workspace of its own: stack.Manager has no export.
	cli, err := filepath.Abs(testenv.PulumiCLI(t))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(cli, filepath.Join(root, "bin", "pulumi")); err != nil {
		t.Fatal(err)
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root})
	if err != nil {
		t.Fatalf("pulumi CLI: %v", err)
	}
	ctx := context.Background()
	backendURL := rawURL
	if strings.HasPrefix(backendURL, "file://") {
		backendURL = "file://" + mustAbs(t, strings.TrimPrefix(backendURL, "file://"))
	}
	ws, err := auto.NewLocalWorkspace(ctx, auto.WorkDir(t.TempDir()), auto.Pulumi(cmd),
		auto.Project(workspace.Project{Name: tokens.PackageName("kindcustomhttp"), Runtime: workspace.NewProjectRuntimeInfo("go", nil),
			Backend: &workspace.ProjectBackend{URL: backendURL}}),
		auto.EnvVars(map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase, "PULUMI_SKIP_UPDATE_CHECK": "true",
			"PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true"}))
	if err != nil {
		t.Fatalf("workspace: %v", stack.RedactText(err.Error()))
	}
	return &backend{url: backendURL, cluster: cluster, mgr: mgr, ws: ws}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stacks lists the backend's stacks of the objects in namespace ns.
func (b *backend) stacks(t *testing.T, ns string) []stack.StackInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all, err := b.mgr.ListStacks(ctx)
	if err != nil {
		t.Fatalf("list stacks: %v", err)
	}
	var out []stack.StackInfo
	for _, s := range all {
		if s.Cluster == b.cluster && s.Namespace == ns {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// export is `pulumi stack export` of stackName.
func (b *backend) export(stackName string) (apitype.DeploymentV3, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var d apitype.DeploymentV3
	st, err := auto.SelectStack(ctx, stackName, b.ws)
	if err != nil {
		return d, fmt.Errorf("select stack %s: %s", stackName, stack.RedactText(err.Error()))
	}
	ud, err := st.Export(ctx)
	if err != nil {
		return d, fmt.Errorf("export stack %s: %s", stackName, stack.RedactText(err.Error()))
	}
	if err := json.Unmarshal(ud.Deployment, &d); err != nil {
		return d, fmt.Errorf("export stack %s: version %d: %w", stackName, ud.Version, err)
	}
	return d, nil
}

// locks lists the lock objects the backend holds for stacks of namespace ns: files under
// .pulumi/locks of a file backend, rows with such keys in a postgres backend's table.
// (stack.StackInfo.UpdateInProgress cannot tell: DIY backends never report it.)
func (b *backend) locks(t *testing.T, ns string) []string {
	t.Helper()
	return backendLocks(t, b.url, b.cluster, ns)
}

// backendLocks is backend.locks without a backend opened: it reads only the lock objects, fast
// enough (a directory walk, one query) to run between a kill and the restart.
func backendLocks(t *testing.T, backendURL, cluster, ns string) []string {
	t.Helper()
	mine := "/" + cluster + "." + ns + "."
	var keys []string
	switch {
	case strings.HasPrefix(backendURL, "file://"):
		dir := filepath.Join(strings.TrimPrefix(backendURL, "file://"), ".pulumi", "locks")
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
				keys = append(keys, p)
			}
			return nil
		})
	case strings.HasPrefix(backendURL, "postgres://"):
		// The CLI creates the table on its first use of the backend: before that, no lock.
		table := pgTable(t, backendURL)
		if exists := testenv.PSQL(t, backendURL, fmt.Sprintf("SELECT to_regclass('%s') IS NOT NULL", table)); slices.Equal(exists, []string{"t"}) {
			keys = testenv.PSQL(t, backendURL, fmt.Sprintf("SELECT key FROM %s WHERE key LIKE '%%/.pulumi/locks/%%'", table))
		}
	default:
		t.Fatalf("locks: backend %s not handled", stack.RedactURL(backendURL))
	}
	var out []string
	for _, k := range keys {
		if strings.Contains(k, mine) {
			out = append(out, k)
		}
	}
	return out
}

// backendPending lists the pending operations in the backend's state of the stacks of
// namespace ns, one "<stack> <type> <urn>" each, reading the stack files directly (a file in
// .pulumi/stacks/kindcustomhttp/ of a file backend, its row in a postgres backend's table):
// fast enough to poll for the moment an up is changing a resource, and to run between a kill
// and the restart. A file caught half-written reads as none.
func backendPending(t *testing.T, backendURL, cluster, ns string) []string {
	t.Helper()
	prefix := cluster + "." + ns + "."
	var out []string
	add := func(key string, data []byte) {
		var f struct {
			Checkpoint struct {
				Latest struct {
					PendingOperations []apitype.OperationV2 `json:"pending_operations"`
				} `json:"latest"`
			} `json:"checkpoint"`
		}
		if json.Unmarshal(data, &f) != nil {
			return
		}
		name := strings.TrimSuffix(filepath.Base(key), ".json")
		for _, op := range f.Checkpoint.Latest.PendingOperations {
			out = append(out, name+" "+string(op.Type)+" "+string(op.Resource.URN))
		}
	}
	switch {
	case strings.HasPrefix(backendURL, "file://"):
		dir := filepath.Join(strings.TrimPrefix(backendURL, "file://"), ".pulumi", "stacks", "kindcustomhttp")
		files, _ := filepath.Glob(filepath.Join(dir, prefix+"*.json"))
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				add(p, b)
			}
		}
	case strings.HasPrefix(backendURL, "postgres://"):
		// The CLI's postgres backend keeps each object as JSON {"data": "<base64>"}
		// (pkg/backend/diy/postgres); the server decodes and filters, one row per stack with
		// pending operations, the stack file as JSON on one line.
		table := pgTable(t, backendURL)
		if exists := testenv.PSQL(t, backendURL, fmt.Sprintf("SELECT to_regclass('%s') IS NOT NULL", table)); !slices.Equal(exists, []string{"t"}) {
			return nil
		}
		rows := testenv.PSQL(t, backendURL, fmt.Sprintf(`SELECT key || ' ' || doc::text FROM (
			SELECT key, convert_from(decode(data->>'data', 'base64'), 'UTF8')::jsonb AS doc FROM %s
			WHERE key LIKE '%%.pulumi/stacks/kindcustomhttp/%s%%.json') s
			WHERE jsonb_array_length(coalesce(doc->'checkpoint'->'latest'->'pending_operations', '[]')) > 0`, table, prefix))
		for _, r := range rows {
			key, doc, _ := strings.Cut(r, " ")
			add(key, []byte(doc))
		}
	default:
		t.Fatalf("pending operations: backend %s not handled", stack.RedactURL(backendURL))
	}
	sort.Strings(out)
	return out
}

// pgTable is the table of a postgres:// backend URL: its table parameter, else the CLI's
// default pulumi_state (pkg/backend/diy/postgres).
func pgTable(t *testing.T, backendURL string) string {
	t.Helper()
	u, err := url.Parse(backendURL)
	if err != nil {
		t.Fatalf("backend URL: %v", stack.RedactText(err.Error()))
	}
	if table := u.Query().Get("table"); table != "" {
		return table
	}
	return "pulumi_state"
}

// ---- KindCustomHttp objects

// spec is what the test last asked of one object.
type spec struct {
	replicas int64
	data     map[string]string
}

func (s spec) object(ns, name string, labels map[string]string) *unstructured.Unstructured {
	data := map[string]any{}
	for k, v := range s.data {
		data[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"replicaCount": s.replicas, "port": int64(80), "configMapData": data},
	}}
	if len(labels) > 0 {
		u.SetLabels(labels)
	}
	return u
}

// patch is a JSON patch that sets replicaCount and replaces configMapData.
func (s spec) patch() []byte {
	b, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/replicaCount", "value": s.replicas},
		{"op": "add", "path": "/spec/configMapData", "value": s.data},
	})
	return b
}

func createCR(ctx context.Context, c *testenv.Cluster, ns, name string, s spec, labels map[string]string) error {
	_, err := c.Client.Resource(api.GroupVersionResource).Namespace(ns).Create(ctx, s.object(ns, name, labels), metav1.CreateOptions{})
	return err
}

func patchCR(ctx context.Context, c *testenv.Cluster, ns, name string, s spec) error {
	_, err := c.Client.Resource(api.GroupVersionResource).Namespace(ns).Patch(ctx, name, types.JSONPatchType, s.patch(), metav1.PatchOptions{})
	return err
}

// readyAt reports whether u is Ready True for its current generation, and why not.
func readyAt(u *unstructured.Unstructured) (bool, string) {
	o, err := api.FromUnstructured(u)
	if err != nil {
		return false, err.Error()
	}
	if o.Status.ObservedGeneration != o.Generation {
		return false, fmt.Sprintf("status.observedGeneration %d, generation %d", o.Status.ObservedGeneration, o.Generation)
	}
	for _, cd := range o.Status.Conditions {
		if cd.Type == "Ready" {
			if cd.Status == metav1.ConditionTrue && cd.ObservedGeneration == o.Generation {
				return true, ""
			}
			return false, fmt.Sprintf("Ready %s (%s) at generation %d: %s", cd.Status, cd.Reason, cd.ObservedGeneration, cd.Message)
		}
	}
	return false, "no Ready condition"
}

// waitConverged waits until every object of live exists and is Ready at its latest generation
// and every object of gone is gone, and returns how long that took. It fails the test when
// that does not happen within timeout.
func waitConverged(t *testing.T, c *testenv.Cluster, ns string, live map[string]spec, gone []string, timeout time.Duration) time.Duration {
	t.Helper()
	took, why := converge(c, ns, live, gone, timeout)
	if len(why) > 0 {
		t.Fatalf("not converged within %s:\n  %s", timeout, strings.Join(why, "\n  "))
	}
	return took
}

// converge waits as waitConverged does and returns how long it took and, when it timed out,
// why each object that did not converge did not.
func converge(c *testenv.Cluster, ns string, live map[string]spec, gone []string, timeout time.Duration) (time.Duration, []string) {
	start := time.Now()
	why := map[string]string{}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		// Not the poll's context: its last round would report its deadline, not the objects.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		clear(why)
		cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
		for name := range live {
			u, err := cr.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				why[name] = err.Error()
				continue
			}
			if ok, msg := readyAt(u); !ok {
				why[name] = msg
			}
		}
		for _, name := range gone {
			if _, err := cr.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				why[name] = fmt.Sprintf("deleted but still there (%v)", err)
			}
		}
		return len(why) == 0, nil
	})
	if err == nil {
		return time.Since(start), nil
	}
	var lines []string
	for n, w := range why {
		lines = append(lines, n+": "+w)
	}
	sort.Strings(lines)
	return time.Since(start), lines
}

// deleteAllAndWait deletes every KindCustomHttp of ns and waits until the operator has
// destroyed their stacks and removed them: a namespace holding objects with finalizers would
// never go away, and a shared backend must not keep the test's stacks.
func deleteAllAndWait(t *testing.T, c *testenv.Cluster, ns string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	if err := cr.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Errorf("cleanup: delete KindCustomHttps: %v", err)
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := cr.List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err == nil {
		return
	}
	// Let the namespace go anyway: the objects' finalizers would keep it forever.
	l, _ := cr.List(ctx, metav1.ListOptions{})
	var left []string
	for _, u := range l.Items {
		left = append(left, u.GetName())
		_, _ = cr.Patch(ctx, u.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
	t.Errorf("cleanup: KindCustomHttps %v of %s not destroyed within %s; removed their finalizers, their stacks and objects stay", left, ns, timeout)
}

// lastLine is the last non-empty line of s: the gist of a CLI error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// ---- state against cluster

// stateReport is what checkState saw.
type stateReport struct {
	stacks, resources, liveObjects int
}

// k8sTypes maps the program's resource types to the resources holding them.
var k8sTypes = map[string]schema.GroupVersionResource{
	"kubernetes:apps/v1:Deployment": deployments,
	"kubernetes:core/v1:Service":    services,
	"kubernetes:core/v1:ConfigMap":  configmaps,
}

// checkState checks the backend against the cluster for namespace ns, whose objects should be
// exactly live (the others deleted):
//   - one stack per object of live and none other; no lock; no pending operation;
//   - every Deployment, Service and ConfigMap labelled managed-by=pulumi-operator belongs to
//     exactly one stack's state, and every resource in a stack's state exists in the cluster;
//   - each stack holds its own object's three resources, at the spec last asked for, in the
//     state as in the cluster (replicas, ConfigMap data).
func checkState(t *testing.T, c *testenv.Cluster, b *backend, ns string, live map[string]spec) stateReport {
	t.Helper()
	ctx := context.Background()
	var rep stateReport
	if l := b.locks(t, ns); len(l) > 0 {
		t.Errorf("locks left in the backend: %v", l)
	}
	infos := b.stacks(t, ns)
	rep.stacks = len(infos)
	var names []string
	owners := map[string][]string{} // "<type> <ns>/<name>" -> stacks holding it
	for _, info := range infos {
		names = append(names, info.CRName)
		if info.UpdateInProgress {
			t.Errorf("stack %s: update in progress (locked)", info.Name)
		}
		d, err := b.export(info.Name)
		if err != nil {
			t.Errorf("stack %s: %v", info.Name, lastLine(err.Error()))
			continue
		}
		for _, op := range d.PendingOperations {
			t.Errorf("stack %s: pending operation %s of %s", info.Name, op.Type, op.Resource.URN)
		}
		want, isLive := live[info.CRName]
		kinds := map[string]bool{}
		for _, r := range d.Resources {
			if _, ok := k8sTypes[string(r.Type)]; !ok {
				continue
			}
			rep.resources++
			key := string(r.Type) + " " + string(r.ID)
			owners[key] = append(owners[key], info.Name)
			kinds[string(r.Type)] = true
			rns, rname, _ := strings.Cut(string(r.ID), "/")
			if rns != ns || (rname != info.CRName && rname != info.CRName+"-configmap") {
				t.Errorf("stack %s holds %s, which is not its object's", info.Name, key)
			}
			if !isLive {
				continue
			}
			switch string(r.Type) {
			case "kubernetes:apps/v1:Deployment":
				if got, _, _ := unstructured.NestedFieldNoCopy(r.Outputs, "spec", "replicas"); fmt.Sprint(got) != fmt.Sprint(want.replicas) {
					t.Errorf("stack %s: state says %s has %v replicas, want %d", info.Name, key, got, want.replicas)
				}
			case "kubernetes:core/v1:ConfigMap":
				got, _, _ := unstructured.NestedFieldNoCopy(r.Outputs, "data")
				if !sameData(got, want.data) {
					t.Errorf("stack %s: state says %s has data %v, want %v", info.Name, key, got, want.data)
				}
			}
		}
		if isLive && len(kinds) != len(k8sTypes) {
			t.Errorf("stack %s holds %d of the 3 objects: %v", info.Name, len(kinds), kinds)
		}
	}
	var want []string
	for n := range live {
		want = append(want, n)
	}
	sort.Strings(names)
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Errorf("stacks of namespace %s are for %v, want one for each of %v", ns, names, want)
	}
	seen := map[string]bool{}
	for typ, gvr := range k8sTypes {
		l, err := c.Client.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: managedBy})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			rep.liveObjects++
			key := typ + " " + ns + "/" + o.GetName()
			seen[key] = true
			if n := len(owners[key]); n != 1 {
				t.Errorf("%s (in the cluster) belongs to %d stacks %v, want exactly 1", key, n, owners[key])
			}
			instance := o.GetLabels()["app.kubernetes.io/instance"]
			w, ok := live[instance]
			if !ok {
				continue // reported above: no stack or a stack that should be gone
			}
			switch gvr {
			case deployments:
				if got, _, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); got != w.replicas {
					t.Errorf("%s has %d replicas, want %d", key, got, w.replicas)
				}
			case configmaps:
				got, _, _ := unstructured.NestedFieldNoCopy(o.Object, "data")
				if !sameData(got, w.data) {
					t.Errorf("%s has data %v, want %v", key, got, w.data)
				}
			}
		}
	}
	for key, st := range owners {
		if !seen[key] {
			t.Errorf("%s is in the state of %v but not in the cluster", key, st)
		}
	}
	return rep
}

// sameData compares a ConfigMap's data (as decoded JSON, nil when empty) with want.
func sameData(got any, want map[string]string) bool {
	m, _ := got.(map[string]any)
	if len(m) != len(want) {
		return false
	}
	for k, v := range want {
		if m[k] != v {
			return false
		}
	}
	return true
}

// ---- collecting what the cluster says

// eventCounts counts the Events of namespace ns by reason, each as often as it happened (an
// Event the recorder aggregated counts its count).
func eventCounts(t *testing.T, c *testenv.Cluster, ns string) map[string]int {
	t.Helper()
	l, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, ev := range l.Items {
		n[ev.Reason] += int(max(ev.Count, 1))
	}
	return n
}

// eventTexts returns every Event of namespace ns as YAML.
func eventTexts(t *testing.T, c *testenv.Cluster, ns string) string {
	t.Helper()
	l, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := yaml.Marshal(l)
	return string(b)
}

// watchObjects records, as YAML, every version of every KindCustomHttp of ns that the
// apiserver shows until the test ends (a status written and overwritten between two polls is
// still seen). The returned function gives what was recorded so far.
func watchObjects(t *testing.T, c *testenv.Cluster, ns string) func() string {
	t.Helper()
	var mu sync.Mutex
	var buf strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
		rv := ""
		for ctx.Err() == nil {
			w, err := cr.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				b, _ := yaml.Marshal(u.Object)
				mu.Lock()
				fmt.Fprintf(&buf, "--- %s\n%s", ev.Type, b)
				mu.Unlock()
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

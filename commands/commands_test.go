package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	sigyaml "sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// runner runs the command line in-process against a fresh file backend, cluster name "cli",
// the pinned pulumi CLI and the local cluster's kubeconfig.
type runner struct {
	t       *testing.T
	backend string
	state   string
	kc      string
}

func newRunner(t *testing.T) *runner {
	dir := t.TempDir()
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "cli")
	return &runner{t: t, backend: filepath.Join(dir, "backend"), state: filepath.Join(dir, "state"), kc: testenv.Kubeconfig(t)}
}

func (l *runner) run(args ...string) (stdout, stderr string, code int) {
	l.t.Helper()
	_, done := l.start(args...)
	r := <-done
	return r.stdout, r.stderr, r.code
}

// runResult is how one run of the command line ended.
type runResult struct {
	stdout, stderr string
	code           int
}

// start runs the CLI like run, in the background: out shows its stdout while it runs, done
// yields the result when it ends.
func (l *runner) start(args ...string) (out *testenv.SyncBuffer, done <-chan runResult) {
	l.t.Helper()
	return l.startContext(context.Background(), args...)
}

// startContext is start with ctx as the command line's context: cancelling it is what a
// SIGINT does to the process.
func (l *runner) startContext(ctx context.Context, args ...string) (out *testenv.SyncBuffer, done <-chan runResult) {
	l.t.Helper()
	app := App()
	out = &testenv.SyncBuffer{}
	var errOut bytes.Buffer
	app.Writer, app.ErrWriter = out, &errOut
	full := append([]string{"pulumi-operator", "--kubeconfig", l.kc, "--backend-url", "file://" + l.backend,
		"--state-dir", l.state, "--pulumi", testenv.PulumiCLI(l.t), "--cluster-name", "cli",
		"--project-file", filepath.Join(testenv.RepoRoot(), "Pulumi.yaml")}, args...)
	ch := make(chan runResult, 1)
	go func() {
		err := app.RunContext(ctx, full)
		if err != nil {
			errOut.WriteString(err.Error())
		}
		ch <- runResult{stdout: out.String(), stderr: errOut.String(), code: ExitCode(err)}
	}()
	return out, ch
}

func (l *runner) stacks() []string {
	m, _ := filepath.Glob(filepath.Join(l.backend, ".pulumi", "stacks", "*", "*.json"))
	return m
}

// manager is a stack.Manager on the runner's backend (the stacks the command line reaches),
// for tests that hold or break a stack's lock from outside the command.
func (l *runner) manager() *stack.Manager {
	l.t.Helper()
	return l.managerAt(filepath.Join(l.state, "workspaces"))
}

// managerAt is manager with another workspace root: a pulumi-operator of another state
// directory (another laptop's, another PID namespace's) on the same backend.
func (l *runner) managerAt(workRoot string) *stack.Manager {
	l.t.Helper()
	m, err := stack.New(stack.Config{Project: "kindcustomhttp", BackendURL: "file://" + l.backend, WorkRoot: workRoot,
		PulumiPath: testenv.PulumiCLI(l.t), ClusterName: "cli"})
	if err != nil {
		l.t.Fatal(err)
	}
	return m
}

// emptyStack creates the stack of namespace/name with one up of an empty program and returns
// its name: a stack a lock can be held on without the provider (an up that deletes nothing).
func emptyStack(t *testing.T, m *stack.Manager, namespace, name string) string {
	t.Helper()
	stackName, _ := m.StackName(namespace, name)
	if _, err := m.Up(context.Background(), stackName, func(*pulumi.Context) error { return nil }, stack.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return stackName
}

// crDoc is a minimal KindCustomHttp document (one replica, port 80).
func crDoc(namespace, name string) string {
	return "apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: " + name + ", namespace: " + namespace +
		"}\nspec: {replicaCount: 1, port: 80}\n"
}

// writeCR writes crDoc(namespace, name) to a file of its own and returns the file's path.
func writeCR(t *testing.T, namespace, name string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cr.yaml")
	if err := os.WriteFile(file, []byte(crDoc(namespace, name)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// createCR creates KindCustomHttp namespace/name (crDoc's spec) in the cluster, with the CRD
// installed first, and returns the client of its namespace's KindCustomHttps.
func createCR(t *testing.T, c *testenv.Cluster, namespace, name string) dynamic.ResourceInterface {
	t.Helper()
	c.InstallCRD(t)
	u := &unstructured.Unstructured{}
	if err := sigyaml.Unmarshal([]byte(crDoc(namespace, name)), &u.Object); err != nil {
		t.Fatal(err)
	}
	objs := c.Client.Resource(kindCustomHttps).Namespace(namespace)
	if _, err := objs.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return objs
}

func loadTestdata(name string) string {
	return filepath.Join(testenv.RepoRoot(), "api", "v1", "testdata", "load", name)
}

// Every kind of bad input exits ExitInvalidInput with a message naming the file, document
// and field, before any Pulumi run: the backend stays empty.
func TestCommandsBadInput(t *testing.T) {
	tests := map[string]struct {
		args []string
		want []string
	}{
		"YAML that does not parse": {[]string{"up", "-f", loadTestdata("bad-yaml.yaml")}, []string{"bad-yaml.yaml: document 2 (line 6)", "YAML does not parse"}},
		"another kind":             {[]string{"preview", "-f", loadTestdata("other-kind.yaml")}, []string{"other-kind.yaml: document 1", `kind "Namespace"`, "--ignore-other-kinds"}},
		"missing required field":   {[]string{"up", "-f", loadTestdata("missing-field.yaml")}, []string{"missing-field.yaml: document 1 (line 1)", "spec.port: Required"}},
		"value out of range":       {[]string{"up", "-f", loadTestdata("out-of-range.yaml")}, []string{"out-of-range.yaml", "spec.port", "between 1 and 65535"}},
		"duplicate object":         {[]string{"preview", "-f", loadTestdata("two.yaml"), "-f", loadTestdata("duplicate.yaml")}, []string{"team-a/web is also defined at"}},
		"missing file":             {[]string{"up", "-f", "/nonexistent/x.yaml"}, []string{"/nonexistent/x.yaml"}},
		"no input":                 {[]string{"up"}, []string{"pass -f"}},
		"stray argument":           {[]string{"up", "file.yaml"}, []string{`unexpected argument "file.yaml"`}},
		"both sources":             {[]string{"up", "-f", loadTestdata("two.yaml"), "--from-cluster", "a/b"}, []string{"not both"}},
		"bad from-cluster":         {[]string{"up", "--from-cluster", "justaname"}, []string{"NAMESPACE/NAME"}},
		"destroy unconfirmed":      {[]string{"destroy", "-f", loadTestdata("duplicate.yaml")}, []string{"--yes"}},
		"refresh of many":          {[]string{"refresh", "-f", loadTestdata("two.yaml")}, []string{"one KindCustomHttp at a time"}},
		"completion without shell": {[]string{"completion"}, []string{"bash or zsh"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := newRunner(t)
			_, stderr, code := l.run(tc.args...)
			if code != ExitInvalidInput {
				t.Fatalf("exit %d, want %d (stderr %q)", code, ExitInvalidInput, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not say %q", stderr, w)
				}
			}
			if s := l.stacks(); len(s) != 0 {
				t.Fatalf("bad input wrote stacks %v", s)
			}
		})
	}
}

// holdLock holds the lock of the existing stack name with a blocked up (testenv.HoldLock).
func holdLock(t *testing.T, m *stack.Manager, name string) (release func() error) {
	t.Helper()
	return testenv.HoldLock(t, func(ctx context.Context, prog pulumi.RunFunc) error {
		_, err := m.Up(ctx, name, prog, stack.RunOptions{})
		return err
	})
}

// While another update holds the stack's lock, up exits ExitTimeout at once, saying who holds
// it; with --wait-for-lock it waits until the holder is done and then applies the file.
func TestCommandsLockedStack(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	l := newRunner(t)
	m := l.manager()
	name := emptyStack(t, m, ns, "locked") // the stack of the file below
	file := writeCR(t, ns, "locked")
	release := holdLock(t, m, name)

	_, stderr, code := l.run("up", "-f", file)
	if code != ExitTimeout || !strings.Contains(stderr, "is locked by") || !strings.Contains(stderr, "--wait-for-lock") {
		t.Fatalf("exit %d, stderr %q; want %d naming the lock holder", code, stderr, ExitTimeout)
	}

	out, done := l.start("up", "-f", file, "--wait-for-lock", "5m")
	waiting := "stack " + name + " is locked by another update; waiting"
	var early *runResult // the command's end, if it ended while the lock was held
	ended := func() bool {
		select {
		case r := <-done:
			early = &r
			return true
		default:
			return false
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { return ended() || strings.Contains(out.String(), waiting), nil })
	if early != nil || ended() {
		t.Fatalf("up --wait-for-lock ended while the lock was held: exit %d\n%s\n%s", early.code, early.stdout, early.stderr)
	}
	if err != nil {
		t.Fatalf("up --wait-for-lock never said it waits for the lock; stdout:\n%s", out.String())
	}
	if err := release(); err != nil {
		t.Fatalf("the lock holder's up failed: %v", err)
	}
	var r runResult
	select {
	case r = <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("up --wait-for-lock did not end after the lock was released; stdout:\n%s", out.String())
	}
	if r.code != 0 {
		t.Fatalf("up --wait-for-lock after the lock was released: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if _, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), "locked", metaGet); err != nil {
		t.Fatalf("up --wait-for-lock succeeded but made no Deployment: %v", err)
	}
	if _, stderr, code := l.run("destroy", "-f", file, "--yes"); code != 0 {
		t.Fatalf("destroy: exit %d: %s", code, stderr)
	}
}

// The whole command-line flow (a person's or a CI job's) with the real program and provider:
// up, preview with and without changes, stacks, refresh, destroy.
func TestCommandsFlow(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	l := newRunner(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "cr.yaml")
	write := func(replicas string) {
		doc := "apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: flow, namespace: " + ns +
			"}\nspec: {replicaCount: " + replicas + ", port: 80, configMapData: {hostports: \"a,1\"}}\n"
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("1")

	out, stderr, code := l.run("up", "-f", file, "--json")
	if code != 0 {
		t.Fatalf("up: exit %d\n%s\n%s", code, out, stderr)
	}
	var res struct{ Results []result }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Results) != 1 || res.Results[0].Changes["create"] != 4 ||
		res.Results[0].Outputs["deploymentName"] != "flow" {
		t.Fatalf("up --json = %s (%v)", out, err)
	}
	if want := "organization/kindcustomhttp/cli." + ns + ".flow"; res.Results[0].Stack != want {
		t.Fatalf("stack %q, want %q: the watcher's naming", res.Results[0].Stack, want)
	}

	md := filepath.Join(dir, "summary.md")
	out, stderr, code = l.run("preview", "-f", file, "--expect-no-changes", "--summary-markdown", md)
	if code != 0 || !strings.Contains(out, "no changes") {
		t.Fatalf("preview of an unchanged file: exit %d\n%s\n%s", code, out, stderr)
	}

	write("3")
	out, stderr, code = l.run("preview", "-f", file, "--expect-no-changes", "--diff", "--summary-markdown", md)
	if code != ExitChanges || !strings.Contains(out, "changes") || !strings.Contains(out, "replicas") {
		t.Fatalf("preview of a change: exit %d (want %d)\n%s\n%s", code, ExitChanges, out, stderr)
	}
	summary, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(summary), "| `"+ns+"/flow` |") || !strings.Contains(string(summary), "1 objects, 1 with changes") ||
		!strings.Contains(string(summary), "<details>") {
		t.Fatalf("markdown summary:\n%s (%v)", summary, err)
	}
	dep, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), "flow", metaGet)
	if err != nil || *dep.Spec.Replicas != 1 {
		t.Fatalf("preview changed the Deployment: %v %v", dep, err)
	}

	if _, stderr, code = l.run("up", "-f", file); code != 0 {
		t.Fatalf("second up: exit %d: %s", code, stderr)
	}
	out, _, code = l.run("stacks")
	if code != 0 || !strings.Contains(out, "cli."+ns+".flow") || !strings.Contains(out, ns+"/flow") {
		t.Fatalf("stacks:\n%s", out)
	}
	if out, stderr, code = l.run("refresh", "-f", file); code != 0 || !strings.Contains(out, "no changes") {
		t.Fatalf("refresh: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, stderr, code = l.run("destroy", "-f", file, "--yes"); code != 0 {
		t.Fatalf("destroy: exit %d: %s", code, stderr)
	}
	if s := l.stacks(); len(s) != 0 {
		t.Fatalf("stacks after destroy: %v", s)
	}
	// The objects are not awaited (infra.SkipAwait): destroy returns once the apiserver took the
	// delete, and the garbage collector may still be removing the Deployment's ReplicaSets.
	gone := false
	for deadline := time.Now().Add(30 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), "flow", metaGet)
		gone = apierrors.IsNotFound(err)
	}
	if !gone {
		t.Fatal("the Deployment survived destroy (still there 30 s later)")
	}
}

var metaGet = metav1.GetOptions{}

// An interrupted command cancels its operation the way pulumi cancels one and exits
// ExitCancelled: while it waits for a lock, and in the middle of an up, after which the
// stack is unlocked and the next up succeeds.
func TestCommandsInterrupted(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	l := newRunner(t)
	file := writeCR(t, ns, "cancelled")
	ended := func(done <-chan runResult, what string) runResult {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s: the command did not end within 2m of its cancellation", what)
		}
		return runResult{}
	}

	// While waiting for a lock another update holds.
	m := l.manager()
	release := holdLock(t, m, emptyStack(t, m, ns, "cancelled"))
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	out, done := l.startContext(ctx2, "up", "-f", file, "--wait-for-lock", "5m")
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { return strings.Contains(out.String(), "waiting"), nil })
	if err != nil {
		t.Fatalf("up --wait-for-lock never waited; stdout:\n%s", out.String())
	}
	cancel2()
	r := ended(done, "up --wait-for-lock")
	if r.code != ExitCancelled {
		t.Fatalf("up cancelled while waiting for a lock: exit %d (want %d)\n%s\n%s", r.code, ExitCancelled, r.stdout, r.stderr)
	}
	if err := release(); err != nil {
		t.Fatalf("the lock holder's up failed: %v", err)
	}

	// In the middle of an up: cancelled once the engine run holds the stack's lock.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done = l.startContext(ctx, "up", "-f", file)
	locks := filepath.Join(l.backend, ".pulumi", "locks", "*", "*", "*", "*.json")
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) { m, _ := filepath.Glob(locks); return len(m) > 0, nil })
	if err != nil {
		t.Fatalf("the up never locked its stack; stdout:\n%s", out.String())
	}
	cancel()
	r = ended(done, "up")
	if r.code != ExitCancelled || !strings.Contains(r.stderr, "up interrupted") {
		t.Fatalf("cancelled up: exit %d (want %d)\n%s\n%s", r.code, ExitCancelled, r.stdout, r.stderr)
	}
	// pulumi locks the stack before it handles SIGINT: cancelled in between, it dies and its
	// lock stays. Then the next up must remove it (its process is gone) and say so.
	left, _ := filepath.Glob(locks)
	for _, f := range left {
		if pid := lockPid(t, f); processRuns(pid) {
			t.Fatalf("the cancelled up's pulumi (pid %d) still runs after the command ended\n%s", pid, r.stderr)
		}
	}
	stdout, stderr, code := l.run("up", "-f", file)
	if code != 0 {
		t.Fatalf("up after the cancelled one: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if len(left) > 0 && !strings.Contains(stdout, "removed the lock left by") {
		t.Fatalf("the cancelled up left its lock %v and the next up did not say it removed it:\n%s", left, stdout)
	}
	t.Logf("the cancelled up left %d lock(s) behind", len(left))

	if _, stderr, code := l.run("destroy", "-f", file, "--yes"); code != 0 {
		t.Fatalf("destroy: exit %d: %s", code, stderr)
	}
}

// lockPid reads the pid out of a DIY backend's lock file.
func lockPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Pid == 0 {
		t.Fatalf("lock file %s: %v (%s)", file, err, b)
	}
	return l.Pid
}

// processRuns reports whether pid is a running process (signal 0; a zombie counts as gone).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// A lock left by a pulumi process that was killed (kill -9, a crashed laptop command) does
// not block the next command of the same state directory: its holder record proves the process
// gone, so it is removed, with a warning naming its owner, and the command goes on. The same
// kill by a pulumi-operator of another state directory (another PID namespace, for all this one
// can tell) is not provably dead here: the command waits for it and says who holds it. A lock
// of a live process is never removed (TestCommandsLockedStack).
func TestCommandsDeadLock(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	l := newRunner(t)
	for _, own := range []bool{false, true} {
		m := l.managerAt(t.TempDir())
		if own {
			m = l.manager()
		}
		name := emptyStack(t, m, ns, "deadlock")
		release := holdLock(t, m, name)
		files, _ := filepath.Glob(filepath.Join(l.backend, ".pulumi", "locks", "*", "*", name, "*.json"))
		if len(files) != 1 {
			t.Fatalf("lock files of the held stack: %v, want 1", files)
		}
		pid := lockPid(t, files[0])
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill the lock holder (pid %d): %v", pid, err)
		}
		if err := release(); err == nil {
			t.Fatal("the killed update reported success")
		}
		file := writeCR(t, ns, "deadlock")
		stdout, stderr, code := l.run("up", "-f", file)
		if !own {
			if code != ExitTimeout || !strings.Contains(stderr+stdout, fmt.Sprintf("(pid %d)", pid)) {
				t.Fatalf("up over the lock of a killed process of another state directory: exit %d, want %d naming pid %d\n%s\n%s", code, ExitTimeout, pid, stdout, stderr)
			}
			if left, _ := filepath.Glob(filepath.Join(l.backend, ".pulumi", "locks", "*", "*", name, "*.json")); len(left) != 1 {
				t.Fatalf("locks after the wait: %v, want the one lock kept", left)
			}
			_ = os.Remove(files[0]) // as its owner would, by hand
			continue
		}
		if code != 0 || !strings.Contains(stdout, "removed the lock left by") || !strings.Contains(stdout, fmt.Sprintf("(pid %d)", pid)) {
			t.Fatalf("up over a dead process's lock: exit %d, want 0 and a warning naming pid %d\n%s\n%s", code, pid, stdout, stderr)
		}
		if _, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), "deadlock", metaGet); err != nil {
			t.Fatalf("the up over the dead lock made no Deployment: %v", err)
		}
		if _, stderr, code := l.run("destroy", "-f", file, "--yes"); code != 0 {
			t.Fatalf("destroy: exit %d: %s", code, stderr)
		}
	}
}

// Several objects: each run is announced with a count; --parallel 2 runs two stacks at once,
// prints each one's output as one block when it ends, keeps the table in the file's order, and
// a bad --parallel is bad input.
func TestCommandsParallel(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	l := newRunner(t)
	file := filepath.Join(t.TempDir(), "crs.yaml")
	var docs []string
	names := []string{"par-a", "par-b", "par-c"}
	for _, n := range names {
		docs = append(docs, crDoc(ns, n))
	}
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := l.run("up", "-f", file, "--parallel", "0"); code != ExitInvalidInput || !strings.Contains(stderr, "--parallel 0: want at least 1") {
		t.Fatalf("--parallel 0: exit %d, %s", code, stderr)
	}
	out, stderr, code := l.run("up", "-f", file, "--parallel", "2")
	if code != 0 {
		t.Fatalf("up --parallel 2: exit %d\n%s\n%s", code, out, stderr)
	}
	var rows []string
	for i, n := range names {
		if !strings.Contains(out, fmt.Sprintf("[%d/3] up %s/%s", i+1, ns, n)) || !strings.Contains(out, fmt.Sprintf("--- up %s/%s: ", ns, n)) {
			t.Errorf("up --parallel 2 announced or printed no block for %s:\n%s", n, out)
		}
		if _, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), n, metaGet); err != nil {
			t.Errorf("no Deployment %s after up --parallel 2: %v", n, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, ns+"/"+n+" ") {
				rows = append(rows, n)
			}
		}
	}
	if !slices.Equal(rows, names) {
		t.Errorf("table rows %v, want the file's order %v:\n%s", rows, names, out)
	}
	if out, stderr, code := l.run("preview", "-f", file, "--parallel", "3", "--expect-no-changes"); code != 0 {
		t.Fatalf("preview --parallel 3 after up: exit %d\n%s\n%s", code, out, stderr)
	}
}

// On a terminal a preview's output streams as it runs (here the terminal is a buffer the
// test reads while the preview still runs) and is not printed a second time at the end.
func TestPreviewStreamsOnATerminal(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	dir := t.TempDir()
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "cli")
	m, err := stack.New(stack.Config{Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(dir, "backend"), WorkRoot: filepath.Join(dir, "work"),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := api.LoadDocuments([]string{writeCR(t, ns, "streamed")}, api.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	of := &objectFlags{diff: true, parallel: 1}
	var progress testenv.SyncBuffer
	done := make(chan []result, 1)
	go func() { done <- runAll(context.Background(), m, nil, docs, Preview, of, &progress, true) }()
	var results []result
	sawWhileRunning := false
	for results == nil {
		select {
		case results = <-done:
		case <-time.After(20 * time.Millisecond):
			if strings.Contains(progress.String(), "Previewing update") {
				sawWhileRunning = true
			}
		}
	}
	if !sawWhileRunning || len(results) != 1 || results[0].Error != "" || !results[0].streamed {
		t.Fatalf("preview on a terminal: streamed while running %v, results %+v\n%s", sawWhileRunning, results, progress.String())
	}
	var out bytes.Buffer
	if err := report(&out, of, Preview, results); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "--- "+ns+"/streamed") {
		t.Errorf("the streamed preview was printed again at the end:\n%s", out.String())
	}
}

// TestCommandsEnvFromNeedsADigestKey: with neither a passphrase nor --env-digest-key-file, an
// object with envFrom sources gets no digest (none an operator would compute) and the command
// says which to set, before any Pulumi run; a key file that cannot be read is named.
func TestCommandsEnvFromNeedsADigestKey(t *testing.T) {
	l := newRunner(t)
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	t.Setenv(desired.KeyFileEnv, "")
	manifest := filepath.Join(t.TempDir(), "env.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\n"+
		"metadata: {name: web, namespace: team-a}\nspec: {replicaCount: 1, port: 80, envFrom: [{configMapRef: {name: env}}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no key":              {[]string{"preview", "-f", manifest}, "--env-digest-key-file"},
		"unreadable key file": {[]string{"--env-digest-key-file", filepath.Join(t.TempDir(), "absent"), "preview", "-f", manifest}, "read --env-digest-key-file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, stderr, code := l.run(tc.args...)
			if code != ExitFailed || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "env.yaml") {
				t.Fatalf("exit %d, stderr %q; want %d naming the file and %q", code, stderr, ExitFailed, tc.want)
			}
			if s := l.stacks(); len(s) != 0 {
				t.Fatalf("wrote stacks %v", s)
			}
		})
	}
}

// TestPreviewAll: `preview --all` previews every KindCustomHttp of the cluster (of --namespace)
// as it is there, on the stacks the operator keeps: none would change after their ups, one
// whose spec was changed in the cluster would (exit ExitChanges with --expect-no-changes, and
// the Markdown summary counts it); --all with -f is refused before any Pulumi run.
func TestPreviewAll(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	objs := createCR(t, c, ns, "a")
	createCR(t, c, ns, "b")
	l := newRunner(t)
	for _, name := range []string{"a", "b"} {
		if _, stderr, code := l.run("up", "--from-cluster", ns+"/"+name); code != 0 {
			t.Fatalf("up %s: exit %d: %s", name, code, stderr)
		}
	}
	out, stderr, code := l.run("preview", "--all", "-n", ns, "--expect-no-changes")
	if code != 0 || !strings.Contains(out, ns+"/a") || !strings.Contains(out, ns+"/b") {
		t.Fatalf("preview --all of unchanged stacks: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, err := objs.Patch(context.Background(), "b", types.MergePatchType, []byte(`{"spec":{"replicaCount":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(t.TempDir(), "summary.md")
	out, stderr, code = l.run("preview", "--all", "-n", ns, "--expect-no-changes", "--summary-markdown", md)
	if code != ExitChanges {
		t.Fatalf("preview --all with one object changed: exit %d, want %d\n%s\n%s", code, ExitChanges, out, stderr)
	}
	summary, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(summary), "2 objects, 1 with changes") || !strings.Contains(string(summary), "| `"+ns+"/b` |") {
		t.Fatalf("markdown summary:\n%s (%v)", summary, err)
	}
	if _, stderr, code = l.run("preview", "--all", "-f", writeCR(t, ns, "a")); code != ExitInvalidInput || !strings.Contains(stderr, "one of them") {
		t.Fatalf("preview --all -f: exit %d (want %d): %s", code, ExitInvalidInput, stderr)
	}
}

// A preview of an object whose objects the original operator made says, in the table's notes and
// the Markdown summary, which of them the operator in the cluster takes over (the table counts
// them as creates); a preview cannot run over them unnoticed.
func TestPreviewNamesOriginalObjects(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	testenv.CreateOriginal(t, c.Kube, ns, "legacy", 1, 80, map[string]string{"hostports": "a,1"}, api.DefaultImage)
	l := newRunner(t)
	md := filepath.Join(t.TempDir(), "summary.md")
	out, stderr, code := l.run("preview", "-f", writeCR(t, ns, "legacy"), "--summary-markdown", md)
	if code != 0 {
		t.Fatalf("preview: exit %d\n%s\n%s", code, out, stderr)
	}
	want := ns + "/legacy: takes over Deployment/legacy, Service/legacy, ConfigMap/legacy-configmap from the original operator"
	if !strings.Contains(out, want) {
		t.Fatalf("preview output does not say %q:\n%s", want, out)
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "**"+ns+"/legacy takes over from the original operator:** Deployment/legacy, Service/legacy, ConfigMap/legacy-configmap") {
		t.Fatalf("summary (%v):\n%s", err, b)
	}
}

package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// hostManager is countingManager's Manager with the engine host (testenv.EngineHost): every
// pulumi CLI run goes to runs, an engine host request does not.
func hostManager(t *testing.T) (m *Manager, backend string, runs func() []string) {
	t.Helper()
	m, backend, runs = countingManager(t)
	attachHost(t, m)
	return m, backend, runs
}

// attachHost gives m the engine host (testenv.EngineHost) from now on, as Config.EngineHost
// would have from the start.
func attachHost(t *testing.T, m *Manager) {
	t.Helper()
	m.eng = m.engineFor(&engineHost{path: testenv.EngineHost(t), project: m.cfg.Project, maxRuns: engineHostRuns, idle: engineHostIdle,
		cancelGrace: engineHostCancelGrace, procs: m.procs})
	t.Cleanup(m.Close)
}

// hostOf is m's engine host; the test fails when m has none.
func hostOf(t *testing.T, m *Manager) *engineHost {
	t.Helper()
	h, ok := m.eng.(*hostEngine)
	if !ok {
		t.Fatalf("the Manager has no engine host (its engine is a %T)", m.eng)
	}
	return h.host
}

// cliOf is m's CLI-per-run engine, its own or its engine host's.
func cliOf(m *Manager) *cliPerRun {
	if h, ok := m.eng.(*hostEngine); ok {
		return h.cli
	}
	return m.eng.(*cliPerRun)
}

// hostPid is the pid of m's engine host process, 0 when none runs.
func hostPid(m *Manager) int {
	h := m.eng.(*hostEngine).host
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.proc; p != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

// TestEngineHostUp: with the engine host, an up is no CLI run at all (a new stack's creation
// included), it returns the outputs (a secret as "[secret]") and the change
// summary as the CLI path does, and the state it writes is the CLI's: a CLI up of the same
// program afterwards changes nothing and reads the secret back, and the host goes on from
// the CLI's state.
func TestEngineHostUp(t *testing.T) {
	m, backend, runs := hostManager(t)
	name, _ := m.StackName("ns", "host")
	res, err := m.Up(context.Background(), name, secretProgram("one"), RunOptions{})
	if err != nil {
		t.Fatalf("first up: %v", err)
	}
	if res.Outputs["greeting"] != "one" || res.Outputs["token"] != "[secret]" || res.Changes["create"] != 1 {
		t.Fatalf("first up: outputs %v, changes %v; want greeting one, token [secret], 1 create", res.Outputs, res.Changes)
	}
	if got := runs(); len(got) != 0 {
		t.Fatalf("first up ran the CLI %v, want no CLI run (init and up in the engine host)", got)
	}
	pid := hostPid(m)
	if pid == 0 {
		t.Fatal("no engine host process after an up through it")
	}
	res, err = m.Up(context.Background(), name, secretProgram("two"), RunOptions{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	if res.Outputs["greeting"] != "two" || res.Changes["same"] != 1 || res.Changed() {
		t.Fatalf("second up: outputs %v, changes %v; want greeting two, the stack same", res.Outputs, res.Changes)
	}
	if got := runs(); len(got) != 0 {
		t.Fatalf("second up ran %v, want no CLI run", got)
	}
	if got := hostPid(m); got != pid {
		t.Fatalf("second up ran in engine host pid %d, want the first's %d", got, pid)
	}
	if got := stackFiles(t, backend); len(got) != 1 {
		t.Fatalf("backend holds %v, want one stack", got)
	}
	// With the host running, a new stack is made by it: no CLI run either.
	other, _ := m.StackName("ns", "host-2")
	if res, err := m.Up(context.Background(), other, secretProgram("x"), RunOptions{}); err != nil || res.Changes["create"] != 1 {
		t.Fatalf("up of a second new stack: %v, %v", res.Changes, err)
	}
	if got := runs(); len(got) != 0 {
		t.Fatalf("a new stack's up with the engine host running ran %v, want nothing (the host creates the stack)", got)
	}
	if got := stackFiles(t, backend); len(got) != 2 {
		t.Fatalf("backend holds %v, want two stacks", got)
	}

	// The CLI path (no engine host, a new Manager: a restart without it) on the same state.
	cli, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err = cli.Up(context.Background(), name, secretProgram("two"), RunOptions{})
	if err != nil {
		t.Fatalf("CLI up after the host's: %v", err)
	}
	if res.Changed() || res.Outputs["greeting"] != "two" || res.Outputs["token"] != "[secret]" {
		t.Fatalf("CLI up after the host's: changes %v, outputs %v; want nothing changed, the same outputs", res.Changes, res.Outputs)
	}
	if got := runs(); !slices.Contains(got, "up") {
		t.Fatalf("the Manager without the engine host ran %v, want a CLI up", got)
	}
	res, err = cli.Up(context.Background(), name, secretProgram("three"), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "three" {
		t.Fatalf("CLI up of a change: %v, %v", res.Outputs, err)
	}
	res, err = m.Up(context.Background(), name, secretProgram("three"), RunOptions{})
	if err != nil || res.Changed() || res.Outputs["greeting"] != "three" {
		t.Fatalf("host up after the CLI's: changes %v, outputs %v, %v; want nothing changed", res.Changes, res.Outputs, err)
	}
}

// TestEngineHostErrorsReadAsTheCLIs: a program's error and a lock held by another update read
// the same through the engine host as through a CLI run: the same summary, ErrLocked with the
// holder's lock.
func TestEngineHostErrorsReadAsTheCLIs(t *testing.T) {
	m, _, _ := hostManager(t)
	cli, err := New(m.cfg)
	if err != nil {
		t.Fatal(err)
	}
	failing := func(ctx *pulumi.Context) error { return errors.New("spec.replicaCount: must be at least 1") }
	summaries := map[string]string{}
	for label, mgr := range map[string]*Manager{"host": m, "cli": cli} {
		name, _ := mgr.StackName("ns", "fail-"+label)
		_, err := mgr.Up(context.Background(), name, failing, RunOptions{})
		var oe *OperationError
		if !errors.As(err, &oe) {
			t.Fatalf("%s: up of a failing program: %v, want an *OperationError", label, err)
		}
		summaries[label] = strings.ReplaceAll(oe.Summary, name, "<stack>")
	}
	if !strings.Contains(summaries["host"], "spec.replicaCount: must be at least 1") || summaries["host"] != summaries["cli"] {
		t.Fatalf("a program's error through the engine host reads %q, through the CLI %q; want the same, with the program's message",
			summaries["host"], summaries["cli"])
	}

	name, _ := m.StackName("ns", "locked")
	if _, err := m.Up(context.Background(), name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, cli, name)
	_, err = m.Up(context.Background(), name, program("y", 0), RunOptions{})
	var oe *OperationError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].ID == "" {
		t.Fatalf("host up of a stack another update holds: %v, want ErrLocked naming one lock by its ID", err)
	}
	if gone, alive, _ := cli.HolderGone(oe.Locks[0], name); gone || !alive {
		t.Fatalf("HolderGone of the live lock = gone %v, alive %v; want its holder proven alive", gone, alive)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background(), name, program("y", 0), RunOptions{}); err != nil {
		t.Fatalf("host up once the lock is released: %v", err)
	}
}

// TestEngineHostCancel: a cancelled up through the engine host stops gracefully, as a CLI run
// on SIGINT does: it fails, leaves no lock and no pending operation, and the next up works
// without a stale-lock step.
func TestEngineHostCancel(t *testing.T) {
	m, backend, _ := hostManager(t)
	name, _ := m.StackName("ns", "cancel")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.Up(ctx, name, program("b", 5*time.Second), RunOptions{})
	if err == nil {
		t.Fatal("an up cancelled during its program succeeded")
	}
	t.Logf("cancelled up returned after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "*", "*", "*", "*.json")); len(locks) != 0 {
		t.Fatalf("a cancelled up left locks %v", locks)
	}
	res, err := m.Up(context.Background(), name, program("c", 0), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "c" {
		t.Fatalf("up after the cancelled one: %v, %v", res.Outputs, err)
	}
}

// TestEngineHostCancelledBeforeItRuns: an up whose context is already done when it reaches the
// engine host (its cancel line comes before the run has a cancellation scope) is cancelled too:
// it fails and changes nothing, where a lost cancel would have run it to the end.
func TestEngineHostCancelledBeforeItRuns(t *testing.T) {
	m, _, _ := hostManager(t)
	name, _ := m.StackName("ns", "early")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := m.Up(ctx, name, program("b", 0), RunOptions{}); err == nil {
		t.Fatalf("an up cancelled before it ran succeeded: %v", res.Outputs)
	}
	res, err := m.Up(context.Background(), name, program("a", 0), RunOptions{})
	if err != nil || res.Changed() {
		t.Fatalf("up of the first program after the cancelled one: changes %v, %v; want nothing changed (the cancelled up applied nothing)", res.Changes, err)
	}
}

// TestEngineHostKilled: an engine host killed during an up (SIGKILL, as the OOM killer might)
// fails that up with an error that says so; its lock is seen as stale (its process is gone),
// CancelLock removes it, and the next up starts a new host and works.
func TestEngineHostKilled(t *testing.T) {
	m, _, _ := hostManager(t)
	name, _ := m.StackName("ns", "killed")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := hostPid(m)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}()
	_, err := m.Up(context.Background(), name, program("b", 5*time.Second), RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "engine host exited") {
		t.Fatalf("up whose engine host was killed: %v, want an error saying the engine host exited", err)
	}
	_, err = m.Up(context.Background(), name, program("c", 0), RunOptions{})
	var oe *OperationError
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].Pid != pid {
		t.Fatalf("up after the kill: %v, want ErrLocked by the dead host (pid %d)", err, pid)
	}
	if gone, _, why := m.HolderGone(oe.Locks[0], name); !gone {
		t.Fatalf("HolderGone(%+v) = false: the killed engine host's holder record must prove it gone", oe.Locks[0])
	} else {
		t.Logf("lock judged: %s", why)
	}
	if err := m.CancelLock(context.Background(), name, []string{oe.Locks[0].ID}, oe.Locks); err != nil {
		t.Fatalf("CancelLock: %v", err)
	}
	res, err := m.Up(context.Background(), name, program("c", 0), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "c" {
		t.Fatalf("up after CancelLock: %v, %v", res.Outputs, err)
	}
	if got := hostPid(m); got == pid || got == 0 {
		t.Fatalf("engine host pid %d after the kill, want a new process (old %d)", got, pid)
	}
}

// TestEngineHostRecycled: a host that has served maxRuns requests is replaced by a new process
// for the next, and exits. The first up of a new stack is two requests (init and up), so with
// 3 runs a process the first two ups share one and the third starts another.
func TestEngineHostRecycled(t *testing.T) {
	m, _, _ := hostManager(t)
	hostOf(t, m).maxRuns = 3
	name, _ := m.StackName("ns", "recycled")
	var pids []int
	for i := range 3 {
		if _, err := m.Up(context.Background(), name, program("x", 0), RunOptions{}); err != nil {
			t.Fatalf("up %d: %v", i, err)
		}
		pids = append(pids, hostPid(m))
	}
	if pids[0] != pids[1] || pids[2] == pids[1] {
		t.Fatalf("engine host pids of 3 ups with 2 runs a process: %v, want the first two the same and the third new (init, up, up; then up)", pids)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pids[0]) && !zombie(pids[0]) {
		if time.Now().After(deadline) {
			t.Fatalf("the retired engine host (pid %d) still runs", pids[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombie reports whether pid has exited and awaits its parent's wait (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}

// TestEngineHostPassphraseChanged: a passphrase that changes under a running engine host (a
// rotated Secret's file) is read as the CLI would read it, by a new host: a wrong one fails the
// up with the CLI's words, and the right one works again. A host kept on would have gone on
// with the key it had derived before.
func TestEngineHostPassphraseChanged(t *testing.T) {
	m, _, _ := hostManager(t)
	file := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(file, []byte("right\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(m.env, "PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	m.env["PULUMI_CONFIG_PASSPHRASE_FILE"] = file
	name, _ := m.StackName("ns", "rotated")
	if _, err := m.Up(context.Background(), name, secretProgram("a"), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := hostPid(m)
	if err := os.WriteFile(file, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := m.Up(context.Background(), name, secretProgram("b"), RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "incorrect passphrase") {
		t.Fatalf("up with a changed, wrong passphrase: %v, want the CLI's incorrect passphrase error", err)
	}
	if hostPid(m) == pid {
		t.Fatal("the engine host was not replaced after the passphrase changed")
	}
	if err := os.WriteFile(file, []byte("right\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Up(context.Background(), name, secretProgram("c"), RunOptions{}); err != nil || res.Outputs["greeting"] != "c" {
		t.Fatalf("up with the right passphrase again: %v, %v", res.Outputs, err)
	}
}

// TestEngineHostNotUsed: an up that wants progress output, and a relative passphrase file, go
// to the CLI; New rejects an engine host path that does not exist.
func TestEngineHostNotUsed(t *testing.T) {
	m, _, runs := hostManager(t)
	name, _ := m.StackName("ns", "progress")
	var progress testenv.SyncBuffer
	if _, err := m.Up(context.Background(), name, program("x", 0), RunOptions{Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	if got := runs(); !slices.Contains(got, "up") || !strings.Contains(progress.String(), "Updating") {
		t.Fatalf("an up with progress ran %v and showed %q, want a CLI up with its progress", got, progress.String())
	}
	delete(m.env, "PULUMI_CONFIG_PASSPHRASE")
	m.env["PULUMI_CONFIG_PASSPHRASE_FILE"] = "relative/passphrase"
	if m.eng.(*hostEngine).takes(RunOptions{}) {
		t.Error("a relative PULUMI_CONFIG_PASSPHRASE_FILE goes to the engine host, want the CLI (it is relative to each workspace)")
	}

	cfg := m.cfg
	cfg.EngineHost = filepath.Join(t.TempDir(), "no-such-engine")
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "engine host") {
		t.Fatalf("New with a missing engine host: %v, want an error naming it", err)
	}
	cfg.EngineHost = testenv.EngineHost(t)
	cloud, err := ParseBackend("https://api.pulumi.com")
	if err != nil {
		t.Fatal(err)
	}
	if host, err := engineHostFor(cfg, cloud, &processSet{}); err != nil || host != nil {
		t.Fatalf("engine host for Pulumi Cloud: %v, %v; want none (the CLI runs those ups)", host, err)
	}
}

// TestEngineHostInitFallsBack: when the running engine host cannot create a stack (here a
// stand-in host that fails every request: a real one cannot be made to fail only that), `pulumi
// stack init` creates it, and the up itself still goes to the engine host, whose error it
// reports.
func TestEngineHostInitFallsBack(t *testing.T) {
	m, backend, runs := hostManager(t)
	hostOf(t, m).path = fakeEngine(t, "fail")
	first, _ := m.StackName("ns", "first")
	if _, err := m.Up(context.Background(), first, program("x", 0), RunOptions{}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("up through a failing engine host: %v, want its error", err)
	}
	if !hostOf(t, m).running() {
		t.Fatal("the stand-in engine host is not running after its first reply")
	}
	runs()
	name, _ := m.StackName("ns", "fallback")
	_, err := m.Up(context.Background(), name, program("x", 0), RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("up: %v, want the stand-in's error for the up itself", err)
	}
	if got := runs(); !slices.Equal(got, []string{"stack init"}) {
		t.Fatalf("after the engine host failed to create the stack, ran %v, want `pulumi stack init`", got)
	}
	found := false
	for _, f := range stackFiles(t, backend) {
		found = found || strings.HasSuffix(f, name+".json")
	}
	if !found {
		t.Fatalf("stack %s not created by the fallback: backend holds %v", name, stackFiles(t, backend))
	}
}

// TestEngineHostIdleExit: an engine host without requests for its idle time exits (its memory
// goes back after a burst), and the next up starts a new one and works.
func TestEngineHostIdleExit(t *testing.T) {
	m, _, _ := hostManager(t)
	hostOf(t, m).idle = 500 * time.Millisecond
	name, _ := m.StackName("ns", "idle")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := hostPid(m)
	deadline := time.Now().Add(10 * time.Second)
	for hostPid(m) != 0 || (processAlive(pid) && !zombie(pid)) {
		if time.Now().After(deadline) {
			t.Fatalf("the engine host (pid %d) still runs 10 s after its last request, with an idle time of 0.5 s", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := m.Up(context.Background(), name, program("b", 0), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "b" {
		t.Fatalf("up after the idle exit: %v, %v", res.Outputs, err)
	}
	if got := hostPid(m); got == 0 || got == pid {
		t.Fatalf("engine host pid %d after the idle exit, want a new process (old %d)", got, pid)
	}
}

// TestEngineHostStartAndPassphraseErrors: an engine host that cannot be started does not fail
// the up: it runs as a `pulumi up` process instead; and a passphrase file that
// is not there fails the up with the file's name before any request is sent, as the CLI path
// reports it; once the file is there the up works.
func TestEngineHostStartAndPassphraseErrors(t *testing.T) {
	m, _, runs := hostManager(t)
	name, _ := m.StackName("ns", "errors")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	real := hostOf(t, m).path
	notExec := filepath.Join(t.TempDir(), "pulumi-operator-engine")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostOf(t, m).path = notExec
	runs()
	if res, err := m.Up(context.Background(), name, program("b", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "b" {
		t.Fatalf("up with an engine host that cannot start: %v, %v; want it done by the CLI", res.Outputs, err)
	}
	if got := runs(); !slices.Contains(got, "up") {
		t.Fatalf("up with an engine host that cannot start ran %v, want a CLI up", got)
	}
	hostOf(t, m).path = real

	file := filepath.Join(t.TempDir(), "passphrase")
	delete(m.env, "PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	m.env["PULUMI_CONFIG_PASSPHRASE_FILE"] = file
	if _, err := m.Up(context.Background(), name, program("c", 0), RunOptions{}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("up with a passphrase file that is not there: %v, want an error naming %s", err, file)
	}
	if err := os.WriteFile(file, []byte("test-passphrase\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Up(context.Background(), name, program("c", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "c" {
		t.Fatalf("up once the passphrase file is there: %v, %v", res.Outputs, err)
	}
}

// TestEngineHostHungRunAbandoned: a run that does not answer its cancel (here a stand-in host
// that takes calls and never answers them: a real run cannot be made to hang on demand) is given
// up engineHost.cancelGrace after its cancel, its process retired and then killed, so that no
// caller and no process is held for ever; the next up starts a new process.
func TestEngineHostHungRunAbandoned(t *testing.T) {
	m, _, _ := hostManager(t)
	hostOf(t, m).path = fakeEngine(t, "hang")
	hostOf(t, m).cancelGrace = 300 * time.Millisecond
	name, _ := m.StackName("ns", "hung")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.eng.(*hostEngine).up(ctx, engineRun{stack: name, op: "up", client: "127.0.0.1:1"})
	if !errors.Is(err, errEngineHostHung) {
		t.Fatalf("up on a hung engine host: %v, want errEngineHostHung", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the caller was held %s, want about the deadline plus the cancel grace", took)
	}
	pid := hostPid(m)
	if pid == 0 {
		t.Fatal("no engine host process recorded")
	}
	for deadline := time.Now().Add(5 * time.Second); !zombie(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hung engine host %d still runs", pid)
		}
	}
	if hostOf(t, m).running() {
		t.Error("the hung engine host still takes requests")
	}
}

// TestStopEndsTheEngineHost: Stop ends an idle engine host the graceful way (its input
// closes) and returns only once the process has exited and been reaped, killing nothing: what a
// leader does before it releases its Lease.
func TestStopEndsTheEngineHost(t *testing.T) {
	m, _, _ := hostManager(t)
	name, _ := m.StackName("ns", "stop")
	if _, err := m.Up(context.Background(), name, program("a", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := hostPid(m)
	if pid == 0 {
		t.Fatal("no engine host process after an up through it")
	}
	if n := m.Stop(10 * time.Second); n != 0 {
		t.Fatalf("Stop killed %d processes, want 0: an idle host ends when told to", n)
	}
	if !zombie(pid) {
		t.Fatalf("the engine host %d still runs after Stop returned", pid)
	}
	if n := m.procs.len(); n != 0 {
		t.Fatalf("%d processes still in the set after Stop", n)
	}
	// The Manager stays usable after a Stop that killed nothing.
	if res, err := m.Up(context.Background(), name, program("b", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "b" {
		t.Fatalf("up after Stop: %v, %v", res.Outputs, err)
	}
}

// TestStopKillsARunThatDoesNotEnd: a run still under way (a stand-in host that never answers:
// a real run cannot be made to hang on demand) keeps the host past Stop's wait; Stop then kills
// it, returns 1, and returns only once it is gone; the run's caller gets an error, and no pulumi
// process starts afterwards.
func TestStopKillsARunThatDoesNotEnd(t *testing.T) {
	m, _, _ := hostManager(t)
	hostOf(t, m).path = fakeEngine(t, "hang")
	hostOf(t, m).cancelGrace = time.Hour // the run is never given up by its caller
	name, _ := m.StackName("ns", "stuck")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	upErr := make(chan error, 1)
	go func() {
		_, err := m.eng.(*hostEngine).up(ctx, engineRun{stack: name, op: "up", client: "127.0.0.1:1"})
		upErr <- err
	}()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		hostOf(t, m).mu.Lock()
		p := hostOf(t, m).proc
		hostOf(t, m).mu.Unlock()
		if p != nil {
			p.mu.Lock()
			inflight := p.inflight
			p.mu.Unlock()
			if inflight > 0 {
				pid = p.cmd.Process.Pid
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the run never reached the engine host")
		}
	}
	start := time.Now()
	if n := m.Stop(300 * time.Millisecond); n != 1 {
		t.Fatalf("Stop killed %d processes, want 1 (the host holding the run)", n)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop killed after %s, before its wait was over", took)
	}
	if !zombie(pid) || m.procs.len() != 0 {
		t.Fatalf("after Stop: host %d zombie or gone %v, %d processes in the set; want it gone", pid, zombie(pid), m.procs.len())
	}
	select {
	case err := <-upErr:
		if err == nil {
			t.Fatal("the killed run returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the killed run's caller is still held")
	}
	if _, err := m.Up(context.Background(), name, program("c", 0), RunOptions{}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("up after a Stop that killed: %v, want fence.ErrFenced (nothing starts)", err)
	}
}

// TestReplyKinds: a failed engine host reply is classified by its kind alone. The stderr of
// each reply here says nothing a text rule would match, and a reply whose text looks like a
// lock but whose kind is "failed" is a plain failure.
func TestReplyKinds(t *testing.T) {
	taken := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		reply     protocol.Reply
		sentinel  error
		locks     int
		stackGone bool
	}{
		"locked": {reply: protocol.Reply{Code: 255, Kind: protocol.KindLocked, Stderr: "error: busy\n",
			Locks: []protocol.Lock{{Pid: 7, Username: "u", Hostname: "elsewhere", Timestamp: taken}}}, sentinel: ErrLocked, locks: 1},
		"backend unreachable": {reply: protocol.Reply{Code: 1, Kind: protocol.KindBackendUnreachable, Stderr: "error: x\n"}, sentinel: ErrBackendUnavailable},
		"plugin missing":      {reply: protocol.Reply{Code: 1, Kind: protocol.KindPluginMissing, Stderr: "error: y\n"}, sentinel: ErrPluginMissing},
		"stack missing":       {reply: protocol.Reply{Code: 1, Kind: protocol.KindStackMissing, Stderr: "error: z\n"}, stackGone: true},
		"failed, lock-like text": {reply: protocol.Reply{Code: 1, Kind: protocol.KindFailed,
			Stderr: "error: the stack is currently locked by 1 lock(s)\n  x: created by u@h (pid 1) at 2026-11-25T00:00:00Z\nno stack named 'a' found\nno resource plugin\nunable to open bucket\n"}},
		"a kind this operator does not know": {reply: protocol.Reply{Code: 1, Kind: "from-the-future", Stderr: "error: w\n"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := classify(newReplyError("up", tc.reply))
			var oe *OperationError
			if !errors.As(err, &oe) {
				t.Fatalf("classify = %T %v, want an *OperationError", err, err)
			}
			for _, s := range []error{ErrLocked, ErrBackendUnavailable, ErrPluginMissing} {
				if got, want := errors.Is(err, s), s == tc.sentinel; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
			if len(oe.Locks) != tc.locks {
				t.Errorf("locks %+v, want %d", oe.Locks, tc.locks)
			}
			if tc.locks == 1 && (oe.Locks[0].Pid != 7 || oe.Locks[0].Host != "elsewhere" || !oe.Locks[0].Created.Equal(taken)) {
				t.Errorf("lock %+v, want pid 7 of elsewhere taken %s", oe.Locks[0], taken)
			}
			if got := stackNotFound(newReplyError("up", tc.reply)); got != tc.stackGone {
				t.Errorf("stackNotFound = %v, want %v", got, tc.stackGone)
			}
		})
	}
}

// TestNoEngineHostRequests: without an engine host (--engine-host none) no engine host process
// runs: every up is a `pulumi up` process, a new stack is made by one `pulumi operator-request`
// process (the engine host's code: no `pulumi stack init`, no key derivation), and the history is
// pruned by such a process after every KeepHistory-th up of a stack, so it holds at most twice
// KeepHistory updates.
func TestNoEngineHostRequests(t *testing.T) {
	m, backend, runs := countingManager(t)
	m.cfg.KeepHistory = 2
	name, _ := m.StackName("ns", "nohost")
	histories := func() int {
		files, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "history", "kindcustomhttp", name, "*.history.json"))
		return len(files)
	}
	want := []struct {
		runs      []string
		histories int
	}{
		{[]string{"operator-request", "up"}, 1},
		{[]string{"up", "operator-request"}, 2}, // the 2nd up prunes to KeepHistory
		{[]string{"up"}, 3},
		{[]string{"up", "operator-request"}, 2},
	}
	for i, w := range want {
		if _, err := m.Up(context.Background(), name, program(fmt.Sprint(i), 0), RunOptions{}); err != nil {
			t.Fatalf("up %d: %v", i+1, err)
		}
		if got := runs(); !slices.Equal(got, w.runs) {
			t.Fatalf("up %d without an engine host ran %q, want %q", i+1, got, w.runs)
		}
		if got := histories(); got != w.histories {
			t.Errorf("after up %d the history holds %d updates, want %d", i+1, got, w.histories)
		}
	}
	if _, ok := m.eng.(*hostEngine); ok {
		t.Fatal("a Manager without Config.EngineHost has an engine host")
	}
	if locks, ok := m.Locks(context.Background()); !ok || len(locks) != 0 {
		t.Fatalf("Locks without an engine host = %v, %v; want none held, read by a request process", locks, ok)
	}
}

// TestEngineHostIsThePinnedCLI: what `make build` puts beside the pinned CLI under the name
// EngineHost is the CLI's own file (agent/cmd/pulumi: one binary, so the image carries pkg/v3
// once), and that file is the engine host when started by that name (its usage, exit 2, with no
// project) and the CLI when started as pulumi.
func TestEngineHostIsThePinnedCLI(t *testing.T) {
	host, cli := testenv.EngineHost(t), testenv.PulumiCLI(t)
	hi, err := os.Stat(host)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.Stat(cli)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(hi, ci) {
		t.Errorf("%s and %s are two files: `make build` links the engine host to the CLI", host, cli)
	}
	out, err := exec.Command(host).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "usage: PULUMI_BACKEND_URL=<DIY backend URL> pulumi-operator-engine") {
		t.Errorf("%s with no project: %v, output %q; want the engine host's usage and exit 2", host, err, out)
	}
	out, err = exec.Command(cli, "version").Output()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "v3.") {
		t.Errorf("%s version: %v, output %q; want the CLI's version", cli, err, out)
	}
}

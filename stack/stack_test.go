package stack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// newManager returns a Manager on the real pinned CLI with a fresh file backend.
func newManager(t *testing.T) (*Manager, string) {
	t.Helper()
	dir := t.TempDir()
	backend := filepath.Join(dir, "backend")
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://" + backend,
		WorkRoot:    filepath.Join(dir, "workspaces"),
		PulumiPath:  testenv.PulumiCLI(t),
		ClusterName: "test",
		Env:         map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, backend
}

// program needs no provider plugin: it only exports its input.
func program(greeting string, sleep time.Duration) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		time.Sleep(sleep)
		ctx.Export("greeting", pulumi.String(greeting))
		return nil
	}
}

func stackFiles(t *testing.T, backend string) []string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", "*.json"))
	return matches
}

func TestUpPreviewDestroy(t *testing.T) {
	m, backend := newManager(t)
	ctx := context.Background()
	name, err := m.StackName("peerns", "web")
	if err != nil {
		t.Fatal(err)
	}

	pre, err := m.Preview(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	if pre.Changes["create"] != 1 { // the stack resource itself
		t.Fatalf("preview of a new stack = %v, want 1 create", pre.Changes)
	}
	if got := stackFiles(t, backend); len(got) != 0 {
		t.Fatalf("a preview of a new stack left it in the backend: %v", got)
	}

	up, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if up.Outputs["greeting"] != "hello" || !up.Changed() {
		t.Fatalf("up = %+v", up)
	}
	if got := stackFiles(t, backend); len(got) != 1 || !strings.HasSuffix(got[0], name+".json") {
		t.Fatalf("backend holds %v, want the state of %s", got, name)
	}

	again, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	if again.Changed() {
		t.Fatalf("an unchanged program changed %v", again.Changes)
	}

	// A preview changes nothing: the state still holds the applied output, not the previewed one.
	if _, err = m.Preview(ctx, name, program("bye", 0), RunOptions{}); err != nil {
		t.Fatalf("preview: %v", err)
	}
	state, err := os.ReadFile(stackFiles(t, backend)[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(state), `"hello"`) || strings.Contains(string(state), `"bye"`) {
		t.Fatalf("preview wrote to the stack's state:\n%s", state)
	}
	if exists, err := m.Exists(ctx, name); err != nil || !exists {
		t.Fatalf("Exists = %v, %v", exists, err)
	}
	if r, err := m.Refresh(ctx, name, RunOptions{}); err != nil || r.Changes["same"] != 1 {
		t.Fatalf("refresh = %+v, %v", r, err)
	}
	list, err := m.ListStacks(ctx)
	if err != nil || len(list) != 1 || list[0].Name != name || list[0].Namespace != "peerns" || list[0].CRName != "web" ||
		list[0].Cluster != "test" || list[0].LastUpdate == "" {
		t.Fatalf("ListStacks = %+v, %v", list, err)
	}

	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if got := stackFiles(t, backend); len(got) != 0 {
		t.Fatalf("destroy left stack state %v", got)
	}
	if exists, err := m.Exists(ctx, name); err != nil || exists {
		t.Fatalf("after destroy Exists = %v, %v", exists, err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.WorkRoot, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("destroy left the workspace directory: %v", err)
	}
	// A second destroy of a stack that is gone is not an error (a retried delete).
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy of a removed stack: %v", err)
	}
	if _, err := m.Refresh(ctx, name, RunOptions{}); err == nil {
		t.Fatal("refresh of a removed stack succeeded")
	}
}

func TestTwoStacksAtOnce(t *testing.T) {
	m, backend := newManager(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	outs := make([]string, 2)
	for i, n := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, _ := m.StackName("ns", n)
			res, err := m.Up(context.Background(), name, program("from-"+n, 0), RunOptions{})
			errs[i], outs[i] = err, res.Outputs["greeting"]
		}()
	}
	wg.Wait()
	for i, n := range []string{"a", "b"} {
		if errs[i] != nil || outs[i] != "from-"+n {
			t.Fatalf("stack %s: %q, %v", n, outs[i], errs[i])
		}
	}
	if got := stackFiles(t, backend); len(got) != 2 {
		t.Fatalf("backend holds %v, want two stacks", got)
	}
}

// holdLock starts an up of the existing stack name whose program blocks, and returns once that
// update certainly holds the stack's lock: its program runs (the CLI takes the lock before it
// runs the program) and the engine has applied the program's one registration (so no
// checkpoint write is under way while the test probes). release unblocks the program and
// returns the update's error, once it ended; the test's end releases it too, and waits for it.
func holdLock(t *testing.T, m *Manager, name string) (release func() error) {
	t.Helper()
	held, unblock := make(chan struct{}), make(chan struct{})
	var heldOnce, unblockOnce sync.Once
	prog := func(ctx *pulumi.Context) error {
		var c pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:LockHolder", "holder", &c); err != nil {
			return err
		}
		// The URN resolves when the engine answers the registration, after it wrote the step.
		c.URN().ApplyT(func(pulumi.URN) int { heldOnce.Do(func() { close(held) }); return 0 })
		<-unblock
		return nil
	}
	finished := make(chan struct{})
	var result error
	go func() {
		_, result = m.Up(context.Background(), name, prog, RunOptions{})
		close(finished)
	}()
	stop := func() { unblockOnce.Do(func() { close(unblock) }) }
	release = func() error { stop(); <-finished; return result }
	// Before the test's directories go: the update writes into them until it ends.
	t.Cleanup(func() {
		stop()
		select {
		case <-finished:
		case <-time.After(2 * time.Minute):
		}
	})
	select {
	case <-held:
	case <-finished:
		t.Fatalf("the lock holder's up ended before its program ran: %v", result)
	case <-time.After(2 * time.Minute):
		t.Fatal("the lock holder's program never ran")
	}
	return release
}

// A second update of a stack that is being updated gets ErrLocked, naming the holder, not a
// generic failure and never success. A torn checkpoint read is ErrLocked only while the lock
// is held.
func TestLockedStack(t *testing.T) {
	m, _ := newManager(t)
	name, _ := m.StackName("ns", "locked")
	ctx := context.Background()
	if _, err := m.Up(ctx, name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, m, name)
	_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
	if err == nil {
		t.Fatal("an up succeeded while another update held the stack's lock")
	}
	var oe *OperationError
	host, _ := os.Hostname()
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].Host != host ||
		oe.Locks[0].Pid <= 0 || time.Since(oe.Locks[0].Created) > time.Minute {
		t.Fatalf("concurrent up = %v (%+v), want ErrLocked naming one lock of this host taken just now", err, oe)
	}
	holder := oe.Locks[0]

	torn := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: " + tornRead + "\n")
	err = m.classifyStack(name, torn)
	if oe = nil; !errors.As(err, &oe) || !errors.Is(err, ErrLocked) || len(oe.Locks) != 1 || !sameLock(oe.Locks[0], holder) {
		t.Fatalf("torn read while %+v holds the lock = %v, want ErrLocked naming it", holder, err)
	}

	if err := release(); err != nil {
		t.Fatalf("the lock holder's up failed: %v", err)
	}
	if err := m.classifyStack(name, torn); errors.Is(err, ErrLocked) || err == nil {
		t.Fatalf("torn read with no lock held = %v, want a plain failure", err)
	}
	if res, err := m.Up(ctx, name, program("z", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "z" {
		t.Fatalf("up after the lock was released = %+v, %v", res, err)
	}
}

// sameLock compares two reports of a lock; the CLI's message has the time to the second, the
// lock file to the nanosecond.
func sameLock(a, b Lock) bool {
	return a.User == b.User && a.Host == b.Host && a.Pid == b.Pid && a.Created.Truncate(time.Second).Equal(b.Created.Truncate(time.Second))
}

// TestClassifyTornRead: the empty checkpoint read ("failed to load checkpoint: EOF") is a lock's
// wait only while a lock file of that stack exists in the file backend.
func TestClassifyTornRead(t *testing.T) {
	const stackName = "test.ns.torn"
	torn := errors.New("failed to run update: exit status 255\ncode: 255\nstdout: \nstderr: error: " + tornRead + "\n")
	lockJSON := `{"pid":4242,"username":"op","hostname":"pod-a","timestamp":"2026-01-02T03:04:05Z"}`
	tests := map[string]struct {
		backend   string            // "" for a fresh file backend
		files     map[string]string // lock files, relative to <backend>/.pulumi/locks
		err       error
		want      bool // ErrLocked
		wantLocks []Lock
	}{
		"torn read, lock held": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": lockJSON}, err: torn,
			want: true, wantLocks: []Lock{{User: "op", Host: "pod-a", Pid: 4242, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}},
		"torn read, lock being written": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": ""}, err: torn,
			want: true},
		"torn read, no lock":                 {err: torn},
		"torn read, lock of another stack":   {files: map[string]string{"organization/kindcustomhttp/test.ns.other/a.json": lockJSON}, err: torn},
		"torn read, lock of another project": {files: map[string]string{"organization/other/" + stackName + "/a.json": lockJSON}, err: torn},
		"torn read, not a file backend":      {backend: "postgres://u:p@localhost/db", err: torn},
		"another failure, lock held": {files: map[string]string{"organization/kindcustomhttp/" + stackName + "/a.json": lockJSON},
			err: errors.New("failed to run update: exit status 255\nstderr: error: boom\n")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			backend := "file://" + t.TempDir()
			if tc.backend != "" {
				backend = tc.backend
			}
			for rel, content := range tc.files {
				p := filepath.Join(strings.TrimPrefix(backend, "file://"), ".pulumi", "locks", filepath.FromSlash(rel))
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			m := &Manager{cfg: Config{Project: "kindcustomhttp", BackendURL: backend}}
			err := m.classifyStack(stackName, tc.err)
			var oe *OperationError
			if err == nil || !errors.As(err, &oe) || !errors.Is(err, tc.err) {
				t.Fatalf("classifyStack = %v, want an *OperationError wrapping the CLI's error", err)
			}
			if got := errors.Is(err, ErrLocked); got != tc.want {
				t.Fatalf("classifyStack = %v: ErrLocked %v, want %v", err, got, tc.want)
			}
			if !slices.EqualFunc(oe.Locks, tc.wantLocks, sameLock) {
				t.Fatalf("locks = %+v, want %+v", oe.Locks, tc.wantLocks)
			}
		})
	}
}

// killedLock creates stack name with one up, holds its lock with a second up (holdLock),
// SIGKILLs that up's pulumi process (as a crashed pod would), and returns the lock it left
// behind.
func killedLock(t *testing.T, m *Manager, name string) Lock {
	t.Helper()
	ctx := context.Background()
	if _, err := m.Up(ctx, name, program("x", 0), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdLock(t, m, name)
	_, err := m.Up(ctx, name, program("z", 0), RunOptions{})
	var oe *OperationError
	if err == nil {
		t.Fatal("an up succeeded while another update held the stack's lock")
	}
	if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 {
		t.Fatalf("up while the lock is held = %v, want ErrLocked naming one lock", err)
	}
	lock := oe.Locks[0]
	p, err := os.FindProcess(lock.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("kill the lock holder (pid %d): %v", lock.Pid, err)
	}
	if err := release(); err == nil {
		t.Fatal("the killed update reported success")
	}
	return lock
}

// A lock left by a pulumi process that was killed (SIGKILL, as a crashed pod) stays until
// CancelLock removes it; then updates work again.
func TestStaleLockCancel(t *testing.T) {
	m, _ := newManager(t)
	name, _ := m.StackName("ns", "stale")
	ctx := context.Background()
	killedLock(t, m, name)
	if _, err := m.Up(ctx, name, program("z", 0), RunOptions{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("up after the kill = %v, want ErrLocked (the lock is left behind)", err)
	}
	if err := m.CancelLock(ctx, name); err != nil {
		t.Fatalf("CancelLock: %v", err)
	}
	res, err := m.Up(ctx, name, program("z", 0), RunOptions{})
	if err != nil || res.Outputs["greeting"] != "z" {
		t.Fatalf("up after CancelLock = %+v, %v", res, err)
	}
}

func TestParseLocks(t *testing.T) {
	msg := "stderr: error: the stack is currently locked by 2 lock(s). Either wait...\n" +
		"  file:///b/.pulumi/locks/o/p/s/1.json: created by root@pod-a (pid 42) at 2026-11-22T12:00:00Z\n" +
		"  file:///b/.pulumi/locks/o/p/s/2.json: created by @host-b (pid 7) at 2026-11-22T12:01:00Z\n" +
		"  file:///b/.pulumi/locks/o/p/s/3.json: created by x@y (pid 9) at not-a-time\n"
	got := parseLocks(msg + msg)
	if len(got) != 2 || got[0].Host != "pod-a" || got[0].Pid != 42 || got[0].User != "root" ||
		got[1].Host != "host-b" || got[1].Created.Minute() != 1 {
		t.Fatalf("parseLocks = %+v", got)
	}
}

// TestNewAcceptsKMSWithoutPassphrase: a KMS secrets provider needs no passphrase (nothing here
// reaches a KMS: New only checks and runs `pulumi version`).
func TestNewAcceptsKMSWithoutPassphrase(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for _, p := range []string{"awskms://alias/pulumi?region=eu-west-1", "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k", "hashivault://pulumi", "default"} {
		if _, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: testenv.PulumiCLI(t),
			ClusterName: "c", SecretsProvider: p}); err != nil {
			t.Errorf("New with secrets provider %s: %v", p, err)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	cli := testenv.PulumiCLI(t)
	dir := t.TempDir()
	ok := Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c",
		Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"}}
	tests := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"no project":                             {func(c *Config) { c.Project = "" }, "project"},
		"bad project":                            {func(c *Config) { c.Project = "a b" }, "project name"},
		"no backend":                             {func(c *Config) { c.BackendURL = "" }, "backend URL"},
		"backend no URL":                         {func(c *Config) { c.BackendURL = "/just/a/dir" }, "want file:///dir"},
		"password hidden":                        {func(c *Config) { c.BackendURL = "::postgres://u:hunter2@h/db" }, "backend URL"},
		"no workroot":                            {func(c *Config) { c.WorkRoot = "" }, "workspace root"},
		"no CLI":                                 {func(c *Config) { c.PulumiPath = filepath.Join(dir, "nope") }, "make tools"},
		"bad cluster":                            {func(c *Config) { c.ClusterName = "Not_A_Label" }, "cluster name"},
		"bad secrets provider":                   {func(c *Config) { c.SecretsProvider = "kms://x" }, "want passphrase, default (Pulumi Cloud) or a KMS URL"},
		"passphrase provider without passphrase": {func(c *Config) { c.Env = nil }, "PULUMI_CONFIG_PASSPHRASE"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the backend password: %v", err)
			}
		})
	}
}

// A missing passphrase is a clear error before any CLI run, never a prompt or a hang.
func TestNoPassphrase(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE_FILE")
	dir := t.TempDir()
	_, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c"})
	if !errors.Is(err, ErrNoPassphrase) {
		t.Fatalf("New without passphrase = %v, want ErrNoPassphrase", err)
	}
	// Another secrets provider needs no passphrase.
	if _, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: dir, PulumiPath: cli, ClusterName: "c",
		SecretsProvider: "awskms://alias/x"}); err != nil {
		t.Fatalf("New with a KMS secrets provider: %v", err)
	}
}

// The engine asks for the plugin version of the SDK in go.mod; KubernetesPluginVersion must
// name the same one, or FindKubernetesPlugin would look for the wrong directory.
func TestKubernetesPluginVersionMatchesSDK(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github.com/pulumi/pulumi-kubernetes/sdk/v4 v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod does not require github.com/pulumi/pulumi-kubernetes/sdk/v4")
	}
	if string(m[1]) != KubernetesPluginVersion {
		t.Fatalf("go.mod has v%s, KubernetesPluginVersion is %s", m[1], KubernetesPluginVersion)
	}
}

func TestSummarize(t *testing.T) {
	msg := "failed to run update: exit status 255\ncode: 255\nstdout: Updating...\n    error: boom\nstderr: error: boom\nerror: update failed\n"
	if got := summarize(msg); got != "error: boom; error: update failed" {
		t.Fatalf("summarize = %q", got)
	}
	if got := summarize("first line\nsecond"); got != "first line" {
		t.Fatalf("summarize without error lines = %q", got)
	}
}

// A second workspace directory on the same backend (the laptop next to the watcher, or a pod
// restarted on an empty volume) reaches the same stack and can decrypt its secrets: the
// passphrase provider's salt travels with the stack's state, not only with the workspace.
func TestFreshWorkspaceReadsSecrets(t *testing.T) {
	m1, backend := newManager(t)
	ctx := context.Background()
	name, _ := m1.StackName("ns", "secrets")
	secret := func(v string) pulumi.RunFunc {
		return func(ctx *pulumi.Context) error {
			ctx.Export("token", pulumi.ToSecret(pulumi.String(v)))
			return nil
		}
	}
	if _, err := m1.Up(ctx, name, secret("first"), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + backend, WorkRoot: t.TempDir(),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m2.Up(ctx, name, secret("second"), RunOptions{})
	if err != nil {
		t.Fatalf("up from a fresh workspace: %v", err)
	}
	if res.Outputs["token"] != "[secret]" {
		t.Fatalf("outputs = %v", res.Outputs)
	}
	// And back in the first workspace, after the second changed the state.
	if _, err := m1.Up(ctx, name, secret("third"), RunOptions{}); err != nil {
		t.Fatalf("up from the first workspace again: %v", err)
	}
	// A wrong passphrase cannot read it: the secret is really encrypted.
	m3, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + backend, WorkRoot: t.TempDir(),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m3.Up(ctx, name, secret("fourth"), RunOptions{}); err == nil {
		t.Fatal("a wrong passphrase decrypted the stack's secrets")
	}
}

// A `stack rm` killed after it removed the stack but before it released the stack's lock
// (DIY RemoveStack locks; so does `stack init`) leaves a lock of a stack that no longer
// exists; the crash test met one. Destroy must not call such a stack destroyed while its lock
// stays, and an up must not wait for it forever: both report the lock (ErrLocked, with the
// dead owner); CancelLock removes it although `pulumi cancel` refuses a missing stack; then
// both succeed and no lock is left. The situation is made with a real lock of a killed
// pulumi process, and the stack's checkpoint then deleted as that `stack rm` had done.
func TestLockOfRemovedStack(t *testing.T) {
	m, backend := newManager(t)
	name, _ := m.StackName("ns", "removed")
	ctx := context.Background()
	lock := killedLock(t, m, name)
	checkpoints, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", name+".json*"))
	if len(checkpoints) == 0 {
		t.Fatal("no checkpoint file to remove")
	}
	for _, f := range checkpoints {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := m.Exists(ctx, name); err != nil || ok {
		t.Fatalf("Exists after the checkpoint is gone = %v, %v; want false", ok, err)
	}

	for _, op := range []string{"destroy", "up"} {
		var err error
		if op == "destroy" {
			_, err = m.Destroy(ctx, name, RunOptions{})
		} else {
			_, err = m.Up(ctx, name, program("w", 0), RunOptions{})
		}
		var oe *OperationError
		if !errors.Is(err, ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) != 1 || oe.Locks[0].Pid != lock.Pid {
			t.Fatalf("%s of the removed stack = %v, want ErrLocked naming pid %d", op, err, lock.Pid)
		}
	}
	if err := m.CancelLock(ctx, name); err != nil {
		t.Fatalf("CancelLock: %v", err)
	}
	if ok, err := m.Exists(ctx, name); err != nil || ok {
		t.Fatalf("Exists after CancelLock = %v, %v; want false (the stack stays removed)", ok, err)
	}
	if res, err := m.Up(ctx, name, program("w", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "w" {
		t.Fatalf("up after CancelLock = %+v, %v", res, err)
	}
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy after CancelLock: %v", err)
	}
	if locks, _ := filepath.Glob(filepath.Join(backend, ".pulumi", "locks", "*", "kindcustomhttp", name, "*.json")); len(locks) > 0 {
		t.Errorf("locks left: %v", locks)
	}
	if ok, err := m.Exists(ctx, name); err != nil || ok {
		t.Errorf("Exists after the destroy = %v, %v; want false", ok, err)
	}
}

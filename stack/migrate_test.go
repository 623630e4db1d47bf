package stack

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// migrationCluster is the cluster name of the migration tests: long enough that a 63-character
// object name in a test namespace is shortened with the cut in the name part, so that the legacy
// name's tail is a DNS label, the name another object can take.
var migrationCluster = strings.Repeat("c", 30)

// migrationManager is a Manager on the real pinned CLI, one "process" of the operator: dir
// holds the file backend and the workspaces, shared by every Manager made on it (a restart).
// host attaches the engine host; kubeconfig, when set, is the provider's cluster.
func migrationManager(t *testing.T, dir string, host bool, kubeconfig string) *Manager {
	t.Helper()
	env := map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}
	if kubeconfig != "" {
		env["KUBECONFIG"] = kubeconfig
	}
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  "file://" + filepath.Join(dir, "backend"),
		WorkRoot:    filepath.Join(dir, "workspaces"),
		PulumiPath:  testenv.PulumiCLI(t),
		ClusterName: migrationCluster,
		Env:         env,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if host {
		attachHost(t, m)
	}
	return m
}

// legacyUp is an up as the code before '_' ran it: on the stack name given, with no look at
// its name (settleName marked done).
func legacyUp(t *testing.T, m *Manager, stackName string, program pulumi.RunFunc) {
	t.Helper()
	m.mu.Lock()
	m.named[stackName] = true
	m.mu.Unlock()
	if _, err := m.Up(context.Background(), stackName, program, RunOptions{}); err != nil {
		t.Fatalf("up of the legacy stack %s: %v", stackName, err)
	}
}

// namedProgram needs no provider plugin: it exports the outputs by which infra.Program's stack
// names its object, and declares a component, whose URN holds the stack name.
func namedProgram(ns, name string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		var c struct{ pulumi.ResourceState }
		if err := ctx.RegisterComponentResource("test:index:Thing", "thing", &c); err != nil {
			return err
		}
		ctx.Export(infra.OutputNamespace, pulumi.String(ns))
		ctx.Export(infra.OutputDeploymentName, pulumi.String(name))
		return nil
	}
}

// stackNames lists the backend's stacks, sorted.
func stackNames(t *testing.T, m *Manager) []string {
	t.Helper()
	list, err := m.ListStacks(context.Background())
	if err != nil {
		t.Fatalf("ListStacks: %v", err)
	}
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// victimAndClaimant are a victim object with a 63-character name in namespace ns, its stack
// under Name and under the rule before it, and the name of the claimant: the object of ns whose
// whole name is the victim's legacy name.
func victimAndClaimant(t *testing.T, ns string) (victim, newName, legacy, claimant string) {
	t.Helper()
	victim = "victim-" + strings.Repeat("v", 56)
	newName, _ = Name(migrationCluster, ns, victim)
	legacy, _ = LegacyName(migrationCluster, ns, victim)
	claimant = strings.TrimPrefix(legacy, migrationCluster+"."+ns+".")
	if c, err := Name(migrationCluster, ns, claimant); err != nil || c != legacy {
		t.Fatalf("the claimant %q of namespace %s gets stack %q, %v: want the victim's legacy name %q", claimant, ns, c, err, legacy)
	}
	return victim, newName, legacy, claimant
}

func desired(ns, name string) api.Desired {
	return api.Desired{Namespace: ns, Name: name, ReplicaCount: 1, Port: 8080, ContainerPort: 8080, Image: api.DefaultImage,
		ServiceType: api.ServiceTypeClusterIP, RolloutOnConfigChange: true}
}

// TestMigrateLegacyStack: a stack that the rule before '_' named, holding its object's objects
// (the real program and provider on the local cluster), is renamed to the object's Name by the
// first operation of a new process, a preview as well as an up: the preview and the up find no
// change (the rename rewrote the URNs), the objects are the same (same UIDs) and the backend
// holds one stack, the new one. Without and with the engine host. Fails on the code before
// settleName: the new name's stack is made empty, so the preview and the up create.
func TestMigrateLegacyStack(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	for mode, host := range map[string]bool{"cli": false, "engine host": true} {
		t.Run(mode, func(t *testing.T) {
			ns := c.Namespace(t)
			victim, newName, legacy, _ := victimAndClaimant(t, ns)
			dir := t.TempDir()
			legacyUp(t, migrationManager(t, dir, host, c.Kubeconfig), legacy, infra.Program(desired(ns, victim)))
			dep, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), victim, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}

			m := migrationManager(t, dir, host, c.Kubeconfig)
			prev, err := m.Preview(context.Background(), newName, infra.Program(desired(ns, victim)), RunOptions{})
			if err != nil || prev.Changed() {
				t.Fatalf("preview of the migrated stack: %v, %v: want no change", prev.Changes, err)
			}
			up, err := m.Up(context.Background(), newName, infra.Program(desired(ns, victim)), RunOptions{})
			if err != nil || up.Changed() {
				t.Fatalf("up of the migrated stack: %v, %v: want no change", up.Changes, err)
			}
			if got := stackNames(t, m); !slices.Equal(got, []string{newName}) {
				t.Fatalf("stacks %v, want only %s", got, newName)
			}
			after, err := c.Kube.AppsV1().Deployments(ns).Get(context.Background(), victim, metav1.GetOptions{})
			if err != nil || after.UID != dep.UID {
				t.Fatalf("the victim's Deployment after the migration: %v (uid %s, was %s)", err, after.GetUID(), dep.UID)
			}
		})
	}
}

// TestClaimantCannotTakeLegacyStack: a tenant names an object after the tail of a victim's
// legacy stack name, so that its whole name is that stack's name, and its first up comes before
// any operation of the victim's (the real program and provider on the local cluster). The
// victim's stack moves to the victim's new name, the claimant gets a stack of its own, and
// neither its up nor its delete touches the victim's objects; the victim's next preview finds no
// change. Without and with the engine host. Fails on the code before settleName: the claimant's
// up replaces the victim's objects in the victim's stack, and its destroy deletes them.
func TestClaimantCannotTakeLegacyStack(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	for mode, host := range map[string]bool{"cli": false, "engine host": true} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			ns := c.Namespace(t)
			victim, newName, legacy, claimant := victimAndClaimant(t, ns)
			dir := t.TempDir()
			legacyUp(t, migrationManager(t, dir, host, c.Kubeconfig), legacy, infra.Program(desired(ns, victim)))
			dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, victim, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			victimIntact := func(when string) {
				t.Helper()
				got, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, victim, metav1.GetOptions{})
				if err != nil || got.UID != dep.UID || got.DeletionTimestamp != nil {
					t.Fatalf("%s: the victim's Deployment: %v (uid %s, was %s)", when, err, got.GetUID(), dep.UID)
				}
			}

			m := migrationManager(t, dir, host, c.Kubeconfig)
			if _, err := m.Up(ctx, legacy, infra.Program(desired(ns, claimant)), RunOptions{}); err != nil {
				t.Fatalf("the claimant's up: %v", err)
			}
			if _, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, claimant, metav1.GetOptions{}); err != nil {
				t.Fatalf("the claimant's Deployment: %v", err)
			}
			victimIntact("after the claimant's up")
			if got, want := stackNames(t, m), []string{legacy, newName}; !slices.Equal(got, want) {
				t.Fatalf("stacks %v, want %v", got, want)
			}
			prev, err := m.Preview(ctx, newName, infra.Program(desired(ns, victim)), RunOptions{})
			if err != nil || prev.Changed() {
				t.Fatalf("the victim's preview: %v, %v: want no change", prev.Changes, err)
			}
			if _, err := m.Destroy(ctx, legacy, RunOptions{}); err != nil {
				t.Fatalf("the claimant's destroy: %v", err)
			}
			victimIntact("after the claimant's destroy")
			if got := stackNames(t, m); !slices.Equal(got, []string{newName}) {
				t.Fatalf("stacks %v, want only the victim's %s", got, newName)
			}
		})
	}
}

// TestMigrateLegacyDecisions: what settleName does with a legacy stack for each content, on
// programs that need no plugin (their outputs name the object).
//   - it holds another object's objects (the claimant ran last under the '-' rule): the victim
//     gets a new empty stack, the claimant's stays;
//   - it holds nothing, and its name is a claimant's whole name: left to the claimant;
//   - it holds nothing, and its name is nobody's (cut in the namespace): renamed;
//   - a claimant meets a stack naming an object whose legacy name it is not, or the victim's
//     stack both under its legacy and its new name: ErrStackOfAnother, nothing changed.
func TestMigrateLegacyDecisions(t *testing.T) {
	ctx := context.Background()
	ns := "team-a"
	victim, newName, legacy, claimant := victimAndClaimant(t, ns)

	t.Run("claimant's stack stays", func(t *testing.T) {
		dir := t.TempDir()
		legacyUp(t, migrationManager(t, dir, false, ""), legacy, namedProgram(ns, claimant))
		m := migrationManager(t, dir, false, "")
		up, err := m.Up(ctx, newName, namedProgram(ns, victim), RunOptions{})
		if err != nil || up.Changes["create"] == 0 {
			t.Fatalf("the victim's up: %v, %v: want creates in a new stack", up.Changes, err)
		}
		if got, want := stackNames(t, m), []string{legacy, newName}; !slices.Equal(got, want) {
			t.Fatalf("stacks %v, want %v", got, want)
		}
		again, err := m.Up(ctx, legacy, namedProgram(ns, claimant), RunOptions{})
		if err != nil || again.Changed() {
			t.Fatalf("the claimant's up: %v, %v: want its own stack, unchanged", again.Changes, err)
		}
	})
	t.Run("empty with a claimant stays", func(t *testing.T) {
		dir := t.TempDir()
		legacyUp(t, migrationManager(t, dir, false, ""), legacy, program("x", 0))
		m := migrationManager(t, dir, false, "")
		if _, err := m.Up(ctx, newName, namedProgram(ns, victim), RunOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, want := stackNames(t, m), []string{legacy, newName}; !slices.Equal(got, want) {
			t.Fatalf("stacks %v, want %v", got, want)
		}
	})
	t.Run("empty without a claimant moves", func(t *testing.T) {
		longNS := strings.Repeat("s", 63)
		n, _ := Name(migrationCluster, longNS, "web-server-1")
		l, _ := LegacyName(migrationCluster, longNS, "web-server-1")
		if wholeName(l) {
			t.Fatalf("%s is a whole name", l)
		}
		dir := t.TempDir()
		legacyUp(t, migrationManager(t, dir, false, ""), l, program("x", 0))
		m := migrationManager(t, dir, false, "")
		up, err := m.Up(ctx, n, program("x", 0), RunOptions{})
		if err != nil || up.Changed() {
			t.Fatalf("up: %v, %v: want the moved stack, unchanged", up.Changes, err)
		}
		if got := stackNames(t, m); !slices.Equal(got, []string{n}) {
			t.Fatalf("stacks %v, want only %s", got, n)
		}
	})
	t.Run("another object's stack is refused", func(t *testing.T) {
		dir := t.TempDir()
		legacyUp(t, migrationManager(t, dir, false, ""), legacy, namedProgram(ns, "someone-else"))
		m := migrationManager(t, dir, false, "")
		_, err := m.Up(ctx, legacy, namedProgram(ns, claimant), RunOptions{})
		if !errors.Is(err, ErrStackOfAnother) || !strings.Contains(err.Error(), ns+"/someone-else") {
			t.Fatalf("the claimant's up: %v, want ErrStackOfAnother naming %s/someone-else", err, ns)
		}
		if _, err := m.Destroy(ctx, legacy, RunOptions{}); !errors.Is(err, ErrStackOfAnother) {
			t.Fatalf("the claimant's destroy: %v, want ErrStackOfAnother", err)
		}
		if _, err := m.Preview(ctx, legacy, namedProgram(ns, claimant), RunOptions{}); !errors.Is(err, ErrStackOfAnother) {
			t.Fatalf("the claimant's preview: %v, want ErrStackOfAnother", err)
		}
		if got := stackNames(t, m); !slices.Equal(got, []string{legacy}) {
			t.Fatalf("stacks %v, want %s untouched", got, legacy)
		}
	})
	t.Run("both names exist", func(t *testing.T) {
		dir := t.TempDir()
		old := migrationManager(t, dir, false, "")
		legacyUp(t, old, legacy, namedProgram(ns, victim))
		legacyUp(t, old, newName, namedProgram(ns, victim))
		m := migrationManager(t, dir, false, "")
		if _, err := m.Up(ctx, legacy, namedProgram(ns, claimant), RunOptions{}); !errors.Is(err, ErrStackOfAnother) || !strings.Contains(err.Error(), "exists too") {
			t.Fatalf("the claimant's up: %v, want ErrStackOfAnother: the victim's new stack exists too", err)
		}
		// The victim goes on with its new stack; the legacy one is left for a person.
		if up, err := m.Up(ctx, newName, namedProgram(ns, victim), RunOptions{}); err != nil || up.Changed() {
			t.Fatalf("the victim's up: %v, %v", up.Changes, err)
		}
		if got, want := stackNames(t, m), []string{legacy, newName}; !slices.Equal(got, want) {
			t.Fatalf("stacks %v, want %v", got, want)
		}
	})
}

// TestMigrateRenameFails: a rename that the backend refuses (the legacy stack's lock held by an
// update) fails the operation with that error, ErrLocked, and leaves the legacy stack; the next
// operation, once the lock is gone, migrates. A rename another process did meanwhile (the old
// name gone, the new one there) is no error. (The namespace is long, so that the legacy name is
// nobody's whole name and is moved whatever the holder's up leaves in it.)
func TestMigrateRenameFails(t *testing.T) {
	ctx := context.Background()
	longNS := strings.Repeat("s", 63)
	newName, _ := Name(migrationCluster, longNS, "web-server-1")
	legacy, _ := LegacyName(migrationCluster, longNS, "web-server-1")
	dir := t.TempDir()
	old := migrationManager(t, dir, false, "")
	legacyUp(t, old, legacy, namedProgram(longNS, "web-server-1"))
	release := holdLock(t, old, legacy)
	m := migrationManager(t, dir, false, "")
	_, err := m.Up(ctx, newName, namedProgram(longNS, "web-server-1"), RunOptions{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "rename stack") {
		t.Fatalf("up while the legacy stack is locked: %v, want ErrLocked from the rename", err)
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if got := stackNames(t, m); !slices.Equal(got, []string{legacy}) {
		t.Fatalf("stacks %v, want %s left", got, legacy)
	}
	if _, err := m.Up(ctx, newName, namedProgram(longNS, "web-server-1"), RunOptions{}); err != nil {
		t.Fatalf("up once the lock is gone: %v", err)
	}
	if got := stackNames(t, m); !slices.Equal(got, []string{newName}) {
		t.Fatalf("stacks %v, want only %s", got, newName)
	}
	if err := m.rename(ctx, legacy, newName); err != nil {
		t.Fatalf("a rename done already: %v", err)
	}
}

func TestLegacyShaped(t *testing.T) {
	_, newName, legacy, _ := victimAndClaimant(t, "team-a")
	for name, want := range map[string]bool{
		legacy:                               true,
		newName:                              false,
		legacy[:99]:                          false,
		legacy[:99] + "g":                    false,
		"c.team-a.web":                       false,
		legacy[:84] + "ABCDEF" + legacy[90:]: false,
	} {
		if got := legacyShaped(name); got != want {
			t.Errorf("legacyShaped(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestOwnerOf: the object a state names, from its Kubernetes resources (recorded, or of a
// pending operation: outputs or, before any, inputs) and its outputs; an error when it names two.
func TestOwnerOf(t *testing.T) {
	kube := func(key, ns, name string) map[string]any {
		return map[string]any{"type": "kubernetes:apps/v1:Deployment", key: map[string]any{"metadata": map[string]any{
			"namespace": ns, "labels": map[string]any{infra.LabelInstance: name}}}}
	}
	stackRes := func(ns, name string) map[string]any {
		return map[string]any{"type": "pulumi:pulumi:Stack", "outputs": map[string]any{infra.OutputNamespace: ns, infra.OutputDeploymentName: name}}
	}
	provider := map[string]any{"type": "pulumi:providers:kubernetes", "inputs": map[string]any{"metadata": map[string]any{"labels": map[string]any{infra.LabelInstance: "x"}}}}
	tests := map[string]struct {
		d           map[string]any
		ns, name    string
		wantErrText string
	}{
		"empty":           {d: map[string]any{}},
		"stack only":      {d: map[string]any{"resources": []any{map[string]any{"type": "pulumi:pulumi:Stack"}, provider}}},
		"outputs":         {d: map[string]any{"resources": []any{stackRes("a", "web")}}, ns: "a", name: "web"},
		"objects":         {d: map[string]any{"resources": []any{stackRes("a", "web"), kube("outputs", "a", "web")}}, ns: "a", name: "web"},
		"inputs only":     {d: map[string]any{"resources": []any{kube("inputs", "a", "web")}}, ns: "a", name: "web"},
		"pending":         {d: map[string]any{"pending_operations": []any{map[string]any{"resource": kube("inputs", "a", "web")}}}, ns: "a", name: "web"},
		"two objects":     {d: map[string]any{"resources": []any{stackRes("a", "web"), kube("outputs", "a", "other")}}, wantErrText: "a/other, a/web"},
		"pending another": {d: map[string]any{"resources": []any{kube("outputs", "a", "web")}, "pending_operations": []any{map[string]any{"resource": kube("inputs", "b", "web")}}}, wantErrText: "a/web, b/web"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns, n, err := ownerOf(tc.d)
			if tc.wantErrText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrText) {
					t.Fatalf("ownerOf = %q %q %v, want an error naming %s", ns, n, err, tc.wantErrText)
				}
				return
			}
			if err != nil || ns != tc.ns || n != tc.name {
				t.Fatalf("ownerOf = %q %q %v, want %q %q", ns, n, err, tc.ns, tc.name)
			}
		})
	}
}

// TestMigrateBackendDown: the looks of settleName at a backend that cannot be reached fail with
// ErrBackendUnavailable (which fails the operation: operate), and are taken again next time, for a shortened name (is its stack there, or a legacy
// one?) and for a whole name of a legacy name's shape (whose objects does it hold?).
func TestMigrateBackendDown(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", unusedPort(t))
	m := backendManager(t, stateBackend{url: "postgres://pulumi@" + addr + "/pulumi?sslmode=disable&connect_timeout=5"})
	shortened, _ := m.StackName(strings.Repeat("s", 63), strings.Repeat("w", 63))
	ns := strings.Repeat("s", 30)
	shaped, _ := m.StackName(ns, strings.Repeat("a", MaxStackNameLength-len(m.cfg.ClusterName)-len(ns)-2-nameHashLength-1)+"-0123456789abcdef")
	if legacyNameOf(shortened) == "" || !legacyShaped(shaped) || !wholeName(shaped) {
		t.Fatalf("want a shortened name and a whole one of a legacy shape: %q, %q", shortened, shaped)
	}
	for _, name := range []string{shortened, shaped} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		err := m.settleName(ctx, name)
		cancel()
		if !errors.Is(err, ErrBackendUnavailable) || !strings.Contains(err.Error(), addr) {
			t.Errorf("settleName of %s with the backend down: %v, want ErrBackendUnavailable naming %s", name, err, addr)
		}
		if m.named[name] {
			t.Errorf("settleName of %s failed and recorded it as done: the next operation would not look again", name)
		}
	}
}

package watcher

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// An object that failed with PluginMissing is retried within seconds of the plugin appearing,
// not after its backoff. Real parts throughout: the real program and CLI run with a Pulumi home
// that has no plugin (a real PluginMissing), and the object's retries are put 5 minutes apart.
// Then, at a moment when no up runs, the provider appears in that home at once
// (installed with `pulumi plugin install --file` into a staging home and renamed into place),
// and an up must start within PluginPoll plus a margin and succeed. Every up that started
// before the plugin appeared must have failed, so a lucky retry cannot pass the test.
func TestPluginMissingRecoversWhenPluginAppears(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	installed := testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	dir := t.TempDir()
	home, staging := filepath.Join(dir, "pulumi-home"), filepath.Join(dir, "staging-home")
	if err := os.MkdirAll(filepath.Join(home, "plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(cli, "plugin", "install", "resource", "kubernetes", "v"+stack.KubernetesPluginVersion, "--file", installed)
	install.Env = append(os.Environ(), "PULUMI_HOME="+staging, "PULUMI_SKIP_UPDATE_CHECK=true")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("pulumi plugin install: %v\n%s", err, out)
	}
	m, err := stack.New(stack.Config{
		Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(dir, "backend"), WorkRoot: filepath.Join(dir, "ws"),
		PulumiPath: cli, PulumiHome: home, ClusterName: "test",
		Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test", "KUBECONFIG": c.Kubeconfig},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.KubernetesPlugin(); err == nil {
		t.Fatalf("the empty Pulumi home %s already has the plugin (is pulumi-resource-kubernetes on PATH?)", home)
	}
	ups := &recordingStacks{Manager: m}
	reg := prometheus.NewRegistry()
	w := New(c.Client, c.Kube, ups, Options{Namespace: ns, Resync: time.Minute, Registry: reg, Logger: testLogger(),
		FindPlugin: m.KubernetesPlugin, PluginPoll: 500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, 1) }()
	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	f := &fixture{cluster: c, ns: ns, cr: crs, registry: reg}
	t.Cleanup(func() {
		_ = crs.Delete(context.Background(), "web", metav1.DeleteOptions{})
		f.waitGone(t, "web")
		cancel()
		<-done
	})

	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "Ready False with reason PluginMissing", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonPluginMissing
	})
	// Make the backoff long and certain: the object's failure count is pushed up so that every
	// retry scheduled from now on is 5 minutes away (retryMax). Then wait for an up that fails
	// after that and 5 s in which none starts: every shorter retry scheduled before has fired.
	key := cache.ObjectName{Namespace: ns, Name: "web"}
	for range 12 {
		w.retry.When(key)
	}
	pushed := time.Now()
	var appeared time.Time
	pollFor(t, 2*time.Minute, "a failed up after the backoff was pushed, then 5 s with no up", func() bool {
		last, ok := ups.last()
		if !ok || !ups.idle() || !last.start.After(pushed) || last.err == nil || time.Since(last.start) < 5*time.Second {
			return false
		}
		dirName := "resource-kubernetes-v" + stack.KubernetesPluginVersion
		if err := os.Rename(filepath.Join(staging, "plugins", dirName), filepath.Join(home, "plugins", dirName)); err != nil {
			t.Fatal(err)
		}
		appeared = time.Now()
		return true
	})
	f.waitFor(t, "web", "Ready after the plugin appeared", readyAt(1))
	first, ok := ups.firstStartAfter(appeared)
	if !ok {
		t.Fatal("Ready, but no up started after the plugin appeared")
	}
	if wait := first.Sub(appeared); wait > 2500*time.Millisecond {
		t.Fatalf("the first up started %s after the plugin appeared; want within PluginPoll (0.5 s) plus a margin, not the backoff (5 min)",
			wait.Round(100*time.Millisecond))
	}
	if n := ups.succeededStartingBefore(appeared); n > 0 {
		t.Fatalf("%d up(s) that started before the plugin appeared succeeded", n)
	}
	t.Logf("up started %s after the plugin appeared, after %d failed ups", first.Sub(appeared).Round(10*time.Millisecond), ups.failed())
}

// recordingStacks is the real Manager, recording when each up started and how it ended.
type recordingStacks struct {
	*stack.Manager
	mu      sync.Mutex
	running int
	ups     []upRecord
}

type upRecord struct {
	start time.Time
	err   error
	ended bool
}

func (r *recordingStacks) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	r.mu.Lock()
	r.running++
	i := len(r.ups)
	r.ups = append(r.ups, upRecord{start: time.Now()})
	r.mu.Unlock()
	res, err := ManagerStacks{r.Manager}.Up(ctx, d, adopt, opts)
	r.mu.Lock()
	r.running--
	r.ups[i].err, r.ups[i].ended = err, true
	r.mu.Unlock()
	return res, err
}

// last is the most recent up.
func (r *recordingStacks) last() (upRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ups) == 0 {
		return upRecord{}, false
	}
	return r.ups[len(r.ups)-1], true
}

func (r *recordingStacks) idle() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.running == 0 }

func (r *recordingStacks) failed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, u := range r.ups {
		if u.ended && u.err != nil {
			n++
		}
	}
	return n
}

func (r *recordingStacks) firstStartAfter(t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range r.ups {
		if u.start.After(t) {
			return u.start, true
		}
	}
	return time.Time{}, false
}

func (r *recordingStacks) succeededStartingBefore(t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, u := range r.ups {
		if u.start.Before(t) && u.ended && u.err == nil {
			n++
		}
	}
	return n
}

// waitGone waits until the object no longer exists (its finalizer removed after destroy).
func (f *fixture) waitGone(t *testing.T, name string) {
	t.Helper()
	pollFor(t, 60*time.Second, name+" deleted", func() bool {
		_, err := f.cr.Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// pollFor polls cond every 100 ms until it holds, failing the test after timeout.
func pollFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened within %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

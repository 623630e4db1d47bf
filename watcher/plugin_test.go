package watcher

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// An object that failed with PluginMissing is retried within seconds of the plugin appearing,
// not after its backoff. Real parts throughout: the real program and CLI run with a Pulumi home
// that has no plugin (a real PluginMissing), the object fails until its backoff has grown to
// 8 s or more, then the installed provider appears in that home (a link to the one `make
// plugins` installed), and the next up must start within PluginPoll plus a margin.
func TestPluginMissingRecoversWhenPluginAppears(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	installed := testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	dir := t.TempDir()
	home := filepath.Join(dir, "pulumi-home")
	if err := os.MkdirAll(filepath.Join(home, "plugins"), 0o700); err != nil {
		t.Fatal(err)
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
	reg := prometheus.NewRegistry()
	w := New(c.Client, c.Kube, m, Options{Namespace: ns, Resync: time.Minute, Registry: reg, Logger: testLogger(),
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
		return cond(o, ConditionReady).Reason == ReasonPluginMissing
	})
	// Four failed ups (after 1, 2 and 4 s of backoff): the next retry is 8 s or more away.
	pollFor(t, 60*time.Second, "four failed reconciles", func() bool {
		return counter(t, reg, "pulumi_operator_reconciles_total", "result", "error") >= 4
	})

	link := filepath.Join(home, "plugins", "resource-kubernetes-v"+stack.KubernetesPluginVersion)
	if err := os.Symlink(filepath.Dir(installed), link); err != nil {
		t.Fatal(err)
	}
	appeared := time.Now()
	o := f.waitFor(t, "web", "Ready after the plugin appeared", readyAt(1))
	// lastUpdate.startTime is truncated to the second, hence the extra second.
	if started := o.Status.LastUpdate.StartTime.Time; started.Sub(appeared) > 4*time.Second {
		t.Fatalf("the up started %s after the plugin appeared; want within PluginPoll (0.5 s) plus a margin, not the backoff",
			started.Sub(appeared).Round(100*time.Millisecond))
	}
}

// waitGone waits until the object no longer exists (its finalizer removed after destroy).
func (f *fixture) waitGone(t *testing.T, name string) {
	t.Helper()
	pollFor(t, 60*time.Second, name+" deleted", func() bool {
		_, err := f.cr.Get(context.Background(), name, metav1.GetOptions{})
		return err != nil
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

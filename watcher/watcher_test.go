package watcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

type fixture struct {
	cluster  *testenv.Cluster
	stacks   *programStacks
	backend  string
	ns       string
	cr       dynamic.ResourceInterface
	registry *prometheus.Registry
	stop     func() // stops the watcher (idempotent)
	workers  int
	// watched is what the watcher runs ups with: stacks, or a wrapper of it (startWrapped).
	watched Stacks
}

func start(t *testing.T) *fixture { return startWith(t, Options{}) }

// startWith runs a watcher on a fresh namespace and file backend; opts.Namespace, Resync
// (1 s), Registry and Logger are filled in.
func startWith(t *testing.T, opts Options) *fixture { return startWrapped(t, opts, nil) }

// startWrapped is startWith with the watcher's Stacks made by wrap from the fixture's
// programStacks (nil: the programStacks itself), for a test that changes what an up runs. The
// stack.Manager has KUBECONFIG set to the test cluster's, for wrappers that run the real
// program (realProgram).
func startWrapped(t *testing.T, opts Options, wrap func(*programStacks) Stacks) *fixture {
	t.Helper()
	c := testenv.Connect(t)
	c.InstallCRD(t)
	dir := t.TempDir()
	backend := filepath.Join(dir, "backend")
	m, err := stack.New(stack.Config{
		Project: "kindcustomhttp", BackendURL: "file://" + backend, WorkRoot: filepath.Join(dir, "ws"),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test",
		Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test", "KUBECONFIG": c.Kubeconfig},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{cluster: c, stacks: &programStacks{Manager: m, kube: c.Kube}, backend: backend, ns: c.Namespace(t),
		registry: prometheus.NewRegistry(), workers: 2}
	f.watched = f.stacks
	if wrap != nil {
		f.watched = wrap(f.stacks)
	}
	if w, err := strconv.Atoi(os.Getenv("TEST_WORKERS")); err == nil {
		f.workers = w
	}
	f.cr = c.Client.Resource(api.GroupVersionResource).Namespace(f.ns)
	opts.Namespace, opts.Registry, opts.Logger = f.ns, f.registry, testLogger()
	if opts.Metadata == nil {
		if opts.Metadata, err = metadata.NewForConfig(c.Config); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Resync == 0 {
		opts.Resync = time.Second
	}
	f.stop = f.run(t, opts)
	t.Cleanup(func() {
		// Delete what the test left while the watcher still runs, so finalizers are removed.
		_ = f.cr.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true,
			func(ctx context.Context) (bool, error) {
				l, err := f.cr.List(ctx, metav1.ListOptions{})
				return err == nil && len(l.Items) == 0, nil
			})
		f.stop()
	})
	return f
}

func testLogger() *slog.Logger {
	if os.Getenv("PULUMI_OPERATOR_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testEnvDigestKey is the digest key of the tests' watchers (Options.EnvDigestKey).
var testEnvDigestKey = []byte("watcher tests' env digest key")

// run starts a Watcher with opts, in the fixture's namespace (opts.Namespace, when set, must be
// it), and returns its stop function, which waits for Run.
func (f *fixture) run(t *testing.T, opts Options) func() {
	t.Helper()
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.EnvDigestKey == nil {
		opts.EnvDigestKey = testEnvDigestKey
	}
	// The cluster is shared with the other tests and packages that run beside this one: a
	// watcher started without a namespace would reconcile all of their objects (and write their
	// status) as well as this test's.
	if opts.Namespace == "" {
		opts.Namespace = f.ns
	}
	if opts.Namespace != f.ns {
		t.Fatalf("a test's watcher watches its own namespace %s, not %q", f.ns, opts.Namespace)
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	var stacks Stacks = f.stacks
	if f.watched != nil {
		stacks = f.watched
	}
	w := New(f.cluster.Client, f.cluster.Kube, stacks, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, f.workers) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

func (f *fixture) create(t *testing.T, name, specYAML string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	doc := fmt.Sprintf("apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", name, f.ns, specYAML)
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cr.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

// waitFor polls the object until done holds, failing with the last status seen.
func (f *fixture) waitFor(t *testing.T, name, what string, done func(*api.KindCustomHttp) bool) *api.KindCustomHttp {
	t.Helper()
	var last *api.KindCustomHttp
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) {
			u, err := f.cr.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			o, err := api.FromUnstructured(u)
			if err != nil {
				return false, err
			}
			last = o
			return done(o), nil
		})
	if err != nil {
		if last != nil {
			last.ManagedFields = nil
		}
		b, _ := yaml.Marshal(last)
		ready := "no object read"
		if last != nil {
			c := cond(last, api.ConditionReady)
			ready = fmt.Sprintf("%s %s since %s at generation %d: %s", c.Status, c.Reason, c.LastTransitionTime.UTC().Format(time.RFC3339), c.ObservedGeneration, c.Message)
		}
		t.Fatalf("%s never happened (%v); last object:\n%s\n%sthe object's Ready: %s", what, err, b, f.describeRollout(name), ready)
	}
	return last
}

// describeRollout says, for a failure message, what the cluster holds of name's rollout: the
// Events of name's objects, the Nodes' Ready conditions and taints, the namespace's pods, what
// kube-controller-manager logged of name's Deployment and ReplicaSets, the ReplicaSets with
// their controllers, and last its Deployment (UID, resourceVersion, generation, replica counts,
// collision count, conditions with their times). Last, because CI shows the tail of a long
// failure.
func (f *fixture) describeRollout(name string) string {
	ctx := context.Background()
	var b strings.Builder
	if l, err := f.cluster.Kube.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range l.Items {
			if strings.HasPrefix(e.InvolvedObject.Name, name) {
				fmt.Fprintf(&b, "Event %s %s %s: %s (%d times, last %s)\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message,
					e.Count, e.LastTimestamp.UTC().Format(time.RFC3339))
			}
		}
	}
	if l, err := f.cluster.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range l.Items {
			fmt.Fprintf(&b, "Node %s: taints %v", n.Name, n.Spec.Taints)
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					fmt.Fprintf(&b, ", Ready %s since %s (%s)", c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Reason)
				}
			}
			b.WriteString("\n")
		}
	}
	controller := func(m metav1.Object) string {
		if r := metav1.GetControllerOf(m); r != nil {
			return r.Kind + " " + r.Name + " " + string(r.UID)
		}
		return "none"
	}
	if l, err := f.cluster.Kube.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "Pod %s (controller %s, deleting %v): %s, node %q\n", p.Name, controller(&p), p.DeletionTimestamp != nil, p.Status.Phase, p.Spec.NodeName)
		}
	}
	b.WriteString(f.cluster.ComponentLog("kube-controller-manager", f.ns+"/"+name, 20))
	if l, err := f.cluster.Kube.AppsV1().ReplicaSets(f.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rs := range l.Items {
			fmt.Fprintf(&b, "ReplicaSet %s uid %s rv %s (controller %s, deleting %v): replicas %d, ready %d, available %d\n", rs.Name, rs.UID,
				rs.ResourceVersion, controller(&rs), rs.DeletionTimestamp != nil, rs.Status.Replicas, rs.Status.ReadyReplicas, rs.Status.AvailableReplicas)
		}
	}
	if d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(&b, "Deployment %s: %v\n", name, err)
	} else {
		st := d.Status
		for _, c := range st.Conditions {
			fmt.Fprintf(&b, "  Deployment condition %s %s %s, updated %s: %s\n", c.Type, c.Status, c.Reason, c.LastUpdateTime.UTC().Format(time.RFC3339), c.Message)
		}
		fmt.Fprintf(&b, "Deployment %s uid %s rv %s generation %d, created %s: observed %d, replicas %d, updated %d, ready %d, available %d, collisions %v\n",
			name, d.UID, d.ResourceVersion, d.Generation, d.CreationTimestamp.UTC().Format(time.RFC3339), st.ObservedGeneration,
			st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, ptrString(st.CollisionCount))
	}
	fmt.Fprintf(&b, "described at %s\n", time.Now().UTC().Format(time.RFC3339))
	return b.String()
}

// ptrString is *p in %v, or "nil".
func ptrString[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func cond(o *api.KindCustomHttp, typ string) metav1.Condition {
	for _, c := range o.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func readyAt(gen int64) func(*api.KindCustomHttp) bool {
	return func(o *api.KindCustomHttp) bool {
		c := cond(o, api.ConditionReady)
		return c.Status == metav1.ConditionTrue && o.Status.ObservedGeneration == gen && c.ObservedGeneration == gen
	}
}

func (f *fixture) stackFiles(t *testing.T) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(f.backend, ".pulumi", "stacks", "kindcustomhttp", "*.json"))
	return m
}

func TestReconcileLifecycle(t *testing.T) {
	f := start(t)
	f.create(t, "web", "  replicaCount: 2\n  port: 80\n  configMapData:\n    hostports: |\n      localhost,8080\n")
	o := f.waitFor(t, "web", "Ready at generation 1", readyAt(1))

	if !strings.Contains(strings.Join(o.Finalizers, ","), Finalizer) {
		t.Fatalf("finalizers = %v, want %s", o.Finalizers, Finalizer)
	}
	if want := "organization/kindcustomhttp/test." + f.ns + ".web"; o.Status.Stack != want {
		t.Errorf("status.stack = %q, want %q", o.Status.Stack, want)
	}
	if o.Status.Outputs == nil || o.Status.Outputs.DeploymentName != "web" || o.Status.Outputs.ConfigMapName != "web-configmap" {
		t.Errorf("status.outputs = %+v", o.Status.Outputs)
	}
	lu := o.Status.LastUpdate
	if lu == nil || lu.Kind != "up" || lu.Result != "succeeded" || lu.ResourceChanges["create"] != 1 || lu.EndTime.Before(&lu.StartTime) {
		t.Errorf("status.lastUpdate = %+v", lu)
	}
	for _, typ := range []string{api.ConditionReconciling, api.ConditionStalled} {
		if c := cond(o, typ); c.Status != metav1.ConditionFalse {
			t.Errorf("%s = %+v, want False", typ, c)
		}
	}
	if got := f.stackFiles(t); len(got) != 1 {
		t.Fatalf("backend stacks = %v, want one", got)
	}
	if o.Status.Replicas != 2 || o.Status.AvailableReplicas != 2 || o.Status.ReadyReplicas != 2 {
		t.Errorf("status replicas = %d/%d/%d, want 2/2/2", o.Status.Replicas, o.Status.ReadyReplicas, o.Status.AvailableReplicas)
	}
	f.waitEvent(t, "web", ReasonCreated)

	// Resyncs every second: nothing changed, so no Pulumi run.
	f.noUpsThrough(t, 3, "resyncs of an unchanged object")
	ups := f.stacks.ups.Load()

	// A spec change is applied and reported at the new generation.
	patch := []byte(`{"spec":{"replicaCount":3}}`)
	if _, err := f.cr.Patch(context.Background(), "web", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	o = f.waitFor(t, "web", "Ready at generation 2", readyAt(2))
	if f.stacks.ups.Load() != ups+1 {
		t.Errorf("ups after one change = %d, want %d", f.stacks.ups.Load(), ups+1)
	}
	if o.Status.LastUpdate.ResourceChanges["same"] != 1 {
		t.Errorf("lastUpdate after change = %+v", o.Status.LastUpdate)
	}

	// Delete destroys the stack, removes it from the backend, then lets the object go.
	if err := f.cr.Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) {
			_, err := f.cr.Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	if err != nil {
		t.Fatalf("object not gone after delete: %v", err)
	}
	if got := f.stackFiles(t); len(got) != 0 {
		t.Fatalf("stack state left after delete: %v", got)
	}
	f.waitEvent(t, "web", ReasonDestroyed)
	if _, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(context.Background(), "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deployment after delete: %v", err)
	}
	// One destroy: the informer's copies from before the finalizer's removal must not start
	// another (it would re-create and remove the stack while sweeping for a lost lock).
	time.Sleep(2 * time.Second)
	if n := f.stacks.destroys.Load(); n != 1 {
		t.Errorf("%d destroys for one delete, want 1", n)
	}
}

// waitEvent waits for an Event with reason on the object called name.
func (f *fixture) waitEvent(t *testing.T, name, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.cluster.Kube.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s Event on %s", reason, name)
	}
}

// A spec the CRD admits but the Go rules reject is Stalled with a message that names the
// field, is not retried, and is reconciled once fixed.
func TestInvalidSpecStalls(t *testing.T) {
	f := start(t)
	f.create(t, "bad", "  replicaCount: 1\n  port: 80\n  configMapData:\n    a/b: x\n")
	o := f.waitFor(t, "bad", "Stalled", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionStalled).Status == metav1.ConditionTrue
	})
	c := cond(o, api.ConditionStalled)
	if c.Reason != api.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.configMapData[a/b]") {
		t.Fatalf("Stalled = %+v, want reason %s naming the key", c, api.ReasonInvalidSpec)
	}
	f.waitEvent(t, "bad", api.ReasonInvalidSpec)
	if r := cond(o, api.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != api.ReasonInvalidSpec {
		t.Fatalf("Ready = %+v", r)
	}
	rv := o.ResourceVersion
	f.noUpsThrough(t, 3, "resyncs of an invalid spec")
	if n := f.stacks.ups.Load(); n != 0 {
		t.Fatalf("%d ups for an invalid spec, want 0", n)
	}
	u, err := f.cr.Get(context.Background(), "bad", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u.GetResourceVersion() != rv {
		t.Fatal("the status of a stalled object kept being rewritten")
	}

	patch := []byte(`{"spec":{"configMapData":{"a/b":null,"hostports":"x,1"}}}`)
	if _, err := f.cr.Patch(context.Background(), "bad", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	o = f.waitFor(t, "bad", "Ready after the fix", readyAt(2))
	if c := cond(o, api.ConditionStalled); c.Status != metav1.ConditionFalse {
		t.Fatalf("Stalled after fix = %+v", c)
	}
}

// A failed up is reported (Ready False, Reconciling True) and retried with backoff until it
// succeeds.
func TestUpFailureIsRetried(t *testing.T) {
	f := start(t)
	f.stacks.failures.Store(2)
	f.create(t, "flaky", "  replicaCount: 1\n  port: 80\n")
	sawFailure := false
	o := f.waitFor(t, "flaky", "Ready after retries", func(o *api.KindCustomHttp) bool {
		if c := cond(o, api.ConditionReady); c.Reason == api.ReasonUpdateFailed && strings.Contains(c.Message, "injected failure") &&
			cond(o, api.ConditionReconciling).Status == metav1.ConditionTrue && o.Status.LastUpdate != nil &&
			o.Status.LastUpdate.Result == "failed" {
			sawFailure = true
		}
		return readyAt(1)(o)
	})
	if !sawFailure {
		t.Error("the failed up was never reported in status")
	}
	if n := f.stacks.ups.Load(); n != 3 {
		t.Errorf("ups = %d, want 3 (two failures, one success)", n)
	}
	f.waitEvent(t, "flaky", api.ReasonUpdateFailed)
	if o.Status.LastUpdate.Result != "succeeded" {
		t.Errorf("lastUpdate = %+v", o.Status.LastUpdate)
	}
}

// The CRD itself rejects what it can at admission, with the original sample still accepted.
func TestCRDValidation(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	tests := map[string]struct {
		name, spec string
		want       string
	}{
		"port zero":             {"a", "replicaCount: 1\n  port: 0", "spec.port"},
		"port too high":         {"a", "replicaCount: 1\n  port: 70000", "spec.port"},
		"negative replicas":     {"a", "replicaCount: -1\n  port: 80", "spec.replicaCount"},
		"missing port":          {"a", "replicaCount: 1", "spec.port"},
		"unknown service type":  {"a", "replicaCount: 1\n  port: 80\n  serviceType: External", "spec.serviceType"},
		"name not a DNS label":  {"a.b", "replicaCount: 1\n  port: 80", "Service's name"},
		"containerPort too low": {"a", "replicaCount: 1\n  port: 80\n  containerPort: 0", "spec.containerPort"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			doc := fmt.Sprintf("apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: %q}\nspec:\n  %s\n", tc.name, tc.spec)
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			_, err := cr.Create(context.Background(), u, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create error = %v, want Invalid naming %q", err, tc.want)
			}
		})
	}
	u, _ := testenv.Sample(t, ns)
	if _, err := cr.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the original sample is rejected: %v", err)
	}
	// No watcher runs here, so no finalizer was added: the object can simply go.
	_ = cr.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
}

// TestStaleDeleteDeliveryDestroysOnce: after the destroy and the finalizer's removal, the
// workqueue can hand the worker the object again from an informer cache that still shows the
// finalizer (the destroy's own deletions of the owned objects queue it). That copy must not
// start a second destroy. A watcher that is not running (no informer to catch up) is given
// the same stale copy twice.
func TestStaleDeleteDeliveryDestroysOnce(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	dir := t.TempDir()
	m, err := stack.New(stack.Config{
		Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(dir, "backend"), WorkRoot: filepath.Join(dir, "ws"),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	stacks := &programStacks{Manager: m, kube: c.Kube}
	ns := c.Namespace(t)
	w := New(c.Client, c.Kube, stacks, Options{Namespace: ns, Registry: prometheus.NewRegistry(), Logger: testLogger()})
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "gone", "namespace": ns, "finalizers": []any{Finalizer}},
		"spec":     map[string]any{"replicaCount": int64(1), "port": int64(80)},
	}}
	if _, err := cr.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cr.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stale, err := cr.Get(ctx, "gone", metav1.GetOptions{})
	if err != nil || stale.GetDeletionTimestamp() == nil {
		t.Fatalf("object being deleted: %v (deletionTimestamp %v)", err, stale.GetDeletionTimestamp())
	}
	for i := 0; i < 2; i++ {
		if err := w.reconcileDelete(ctx, newObject(stale.DeepCopy())); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if _, err := cr.Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("object still there after its destroy: %v", err)
	}
	if n := stacks.destroys.Load(); n != 1 {
		t.Errorf("%d destroys for two deliveries of one deleted object, want 1", n)
	}
}

// reconciles is pulumi_operator_reconciles_total of reg summed over its results (0 before the
// first reconcile, when the family is not exported yet).
func reconciles(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, fam := range fams {
		if fam.GetName() == "pulumi_operator_reconciles_total" {
			for _, m := range fam.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// noUpsThrough waits until the watcher has finished n more reconciles (at a 1 s resync, one
// per object and second) and fails if an up started meanwhile. The window is proven by the
// reconciles it covers, not by a sleep: a watcher that stopped looking at its objects (no
// resync, a stuck worker) fails here instead of passing for want of a chance to run an up.
func (f *fixture) noUpsThrough(t *testing.T, n int, what string) {
	t.Helper()
	ups, from := f.stacks.ups.Load(), reconciles(t, f.registry)
	deadline := time.Now().Add(60 * time.Second)
	for reconciles(t, f.registry) < from+float64(n) {
		if got := f.stacks.ups.Load(); got != ups {
			t.Fatalf("%s: %d ups, want 0", what, got-ups)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v reconciles in 60 s, want %d (no resync?)", what, reconciles(t, f.registry)-from, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := f.stacks.ups.Load(); got != ups {
		t.Fatalf("%s: %d ups over %d reconciles, want 0", what, got-ups, n)
	}
}

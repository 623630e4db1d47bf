package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestLostStackRebuilt: the stack of a Ready object is lost (its file removed from the backend,
// as a restore of an older backup does). A reconcile request's up rebuilds it over the live
// objects (the provider's upsert, the same spec): the Deployment keeps its UID and generation and
// every pod its UID (0 pods restarted), the rebuilt stack holds the three objects, and a delete
// then destroys them as usual. A second object whose stack is lost is deleted with
// on-missing-stack=adopt: the stack is rebuilt by an import that changes nothing (Normal
// StackRebuilt) and destroyed, and the delete finishes with the objects gone. The real program and
// provider. The delete fails on the code before adopt: it stalls with StackMissing.
func TestLostStackRebuilt(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	f := startWrapped(t, Options{Resync: time.Hour}, func(p *programStacks) Stacks { return realProgram{p} })
	ctx := context.Background()
	adopt := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.OnMissingStackAnnotation, api.OnMissingStackAdopt)

	f.create(t, "kept", "  replicaCount: 2\n  port: 80\n")
	f.waitFor(t, "kept", "Ready", readyAt(1))
	dep, pods := f.deploymentAndPods(t, "kept", 2)
	f.loseStack(t, "kept")

	f.patch(t, "kept", fmt.Sprintf(`{"metadata":{"annotations":{%q:"rebuild"}}}`, api.ReconcileRequestAnnotation))
	o := f.waitFor(t, "kept", "the reconcile request handled", func(o *api.KindCustomHttp) bool {
		return o.Status.LastHandledReconcileAt == "rebuild" && readyAt(1)(o)
	})
	if lu := o.Status.LastUpdate; lu == nil || lu.ResourceChanges["create"] != 4 {
		t.Fatalf("status.lastUpdate %+v: want the stack and its 3 objects created over the live ones", lu)
	}
	after, afterPods := f.deploymentAndPods(t, "kept", 2)
	if after.UID != dep.UID || after.Generation != dep.Generation || !slices.Equal(afterPods, pods) {
		t.Fatalf("after the rebuild: Deployment %s generation %d, pods %v; before: %s %d %v: want nothing touched",
			after.UID, after.Generation, afterPods, dep.UID, dep.Generation, pods)
	}
	state := f.stackState(t, "kept")
	for _, typ := range []string{"kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service", "kubernetes:core/v1:ConfigMap"} {
		if !strings.Contains(state, typ) {
			t.Errorf("the rebuilt stack holds no %s", typ)
		}
	}
	if err := f.cr.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitGone(t, "kept")
	f.objectsGone(t, "kept")

	// Lost, then deleted with the annotation.
	f.create(t, "deleted", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "deleted", "Ready", readyAt(1))
	f.loseStack(t, "deleted")
	f.patch(t, "deleted", adopt)
	if err := f.cr.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitGone(t, "deleted")
	f.waitEvent(t, "deleted", api.ReasonStackRebuilt)
	f.waitEvent(t, "deleted", ReasonDestroyed)
	f.objectsGone(t, "deleted")
}

// deploymentAndPods waits until name's Deployment has n pods and returns it with their UIDs,
// sorted.
func (f *fixture) deploymentAndPods(t *testing.T, name string, n int) (dep *metav1.ObjectMeta, uids []string) {
	t.Helper()
	ctx := context.Background()
	poll(t, fmt.Sprintf("%d pods of %s", n, name), func() bool {
		l, err := f.cluster.Kube.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{LabelSelector: infra.LabelInstance + "=" + name})
		if err != nil {
			return false
		}
		uids = uids[:0]
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				uids = append(uids, string(p.UID))
			}
		}
		return len(uids) == n && len(l.Items) == n
	})
	slices.Sort(uids)
	d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &d.ObjectMeta, uids
}

// loseStack removes name's stack from the file backend, as a restore of a backup taken before
// the stack existed does, and waits a moment so no up of it is still writing.
func (f *fixture) loseStack(t *testing.T, name string) {
	t.Helper()
	stackName, _ := f.stacks.StackName(f.ns, name)
	files, _ := filepath.Glob(filepath.Join(f.backend, ".pulumi", "stacks", "kindcustomhttp", stackName+".json*"))
	if len(files) == 0 {
		t.Fatalf("no state file of stack %s", stackName)
	}
	for _, p := range files {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// stackState is the text of name's stack state in the file backend.
func (f *fixture) stackState(t *testing.T, name string) string {
	t.Helper()
	stackName, _ := f.stacks.StackName(f.ns, name)
	b, err := os.ReadFile(filepath.Join(f.backend, ".pulumi", "stacks", "kindcustomhttp", stackName+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// objectsGone waits until name's Deployment, Service and ConfigMap no longer exist.
func (f *fixture) objectsGone(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	poll(t, "the objects of "+name+" gone", func() bool {
		_, e1 := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, name, metav1.GetOptions{})
		_, e2 := f.cluster.Kube.CoreV1().Services(f.ns).Get(ctx, name, metav1.GetOptions{})
		_, e3 := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(ctx, name+api.ConfigMapSuffix, metav1.GetOptions{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3)
	})
}

// TestStateOutlivesObjects: the backend keeps a stack whose objects the cluster no longer has,
// and a KindCustomHttp of the same namespace and name is created anew, as after a cluster is
// rebuilt (or a namespace deleted without the operator running) with the backend kept. The
// first up meets a state that names objects that do not exist; the object must still become
// Ready with its three objects, at the new spec, and no retry loop of "not found" may remain.
// One object comes back with the same spec (Pulumi sees no difference to apply), another with
// a changed one (Pulumi would update a Service that is gone). The real program and provider.
func TestStateOutlivesObjects(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	opts := Options{Resync: time.Hour}
	f := startWrapped(t, opts, func(p *programStacks) Stacks { return realProgram{p} })
	ctx := context.Background()
	const spec = "  replicaCount: 1\n  port: 80\n  configMapData: {hostports: \"a,1\"}\n"
	start := time.Now()
	phase := func(what string) { t.Logf("%s after %s", what, time.Since(start).Round(10*time.Millisecond)) }
	for _, name := range []string{"same", "changed"} {
		f.create(t, name, spec)
		f.waitFor(t, name, "Ready", readyAt(1))
	}
	phase("both objects Ready")
	// The cluster loses the objects and the KindCustomHttps; the backend keeps the stacks.
	f.stop()
	for _, name := range []string{"same", "changed"} {
		if _, err := f.cr.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := f.cr.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// In the foreground, as a rebuilt cluster has none left: the Deployment is gone only
		// once its ReplicaSet and pods are (objectsGone waits for it).
		foreground := metav1.DeletePropagationForeground
		_ = f.cluster.Kube.AppsV1().Deployments(f.ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &foreground})
		_ = f.cluster.Kube.CoreV1().Services(f.ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Delete(ctx, name+api.ConfigMapSuffix, metav1.DeleteOptions{})
		f.objectsGone(t, name)
		poll(t, "the ReplicaSets and pods of "+name+" gone", func() bool {
			sel := metav1.ListOptions{LabelSelector: infra.LabelInstance + "=" + name}
			rs, e1 := f.cluster.Kube.AppsV1().ReplicaSets(f.ns).List(ctx, sel)
			pods, e2 := f.cluster.Kube.CoreV1().Pods(f.ns).List(ctx, sel)
			return e1 == nil && e2 == nil && len(rs.Items) == 0 && len(pods.Items) == 0
		})
		if !strings.Contains(f.stackState(t, name), "kubernetes:core/v1:Service") {
			t.Fatalf("the stack of %s holds no Service: nothing to test", name)
		}
	}
	phase("the objects and KindCustomHttps gone, the stacks kept")
	f.create(t, "same", spec)
	f.create(t, "changed", "  replicaCount: 2\n  port: 8080\n  configMapData: {hostports: \"b,2\"}\n")
	f.stop = f.run(t, opts)

	for _, name := range []string{"same", "changed"} {
		f.waitFor(t, name, "Ready", readyAt(1))
		phase(name + " Ready again")
	}
	svc, err := f.cluster.Kube.CoreV1().Services(f.ns).Get(ctx, "changed", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Service of changed after Ready: %v", err)
	}
	if p := svc.Spec.Ports[0].Port; p != 8080 {
		t.Errorf("Service changed port %d, want the new spec's 8080", p)
	}
	cm, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(ctx, "changed"+api.ConfigMapSuffix, metav1.GetOptions{})
	if err != nil || cm.Data["hostports"] != "b,2" {
		t.Errorf("ConfigMap of changed: %v %v, want hostports b,2", cm, err)
	}
	if f.deploymentReplicas(t, "changed") != 2 {
		t.Errorf("Deployment changed: want the new spec's 2 replicas")
	}
	for _, name := range []string{"same"} {
		for _, get := range []func() error{
			func() error {
				_, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, name, metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := f.cluster.Kube.CoreV1().Services(f.ns).Get(ctx, name, metav1.GetOptions{})
				return err
			},
			func() error {
				_, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(ctx, name+api.ConfigMapSuffix, metav1.GetOptions{})
				return err
			},
		} {
			if err := get(); err != nil {
				t.Errorf("%s Ready but its object is missing: %v", name, err)
			}
		}
	}
}

// TestFixtureWatchesItsNamespaceOnly: a test's watcher, one restarted with options that name no
// namespace too (as TestStateOutlivesObjects restarts its watcher), reconciles the objects of
// its own namespace only. The cluster is shared with the tests and packages that run beside
// this one: a watcher of every namespace would reconcile their objects too, write their status
// under its own digest (so that their operator runs ups nobody asked for), and keep this test's
// objects waiting behind all of theirs.
func TestFixtureWatchesItsNamespaceOnly(t *testing.T) {
	f := startWrapped(t, Options{Resync: time.Hour}, nil)
	ctx := context.Background()
	other := f.cluster.Namespace(t)
	theirs := f.cluster.Client.Resource(api.GroupVersionResource).Namespace(other)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(api.GroupVersionResource.GroupVersion().String())
	u.SetKind("KindCustomHttp")
	u.SetName("theirs")
	if err := unstructured.SetNestedField(u.Object, map[string]any{"replicaCount": int64(1), "port": int64(80)}, "spec"); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.stop()
	f.stop = f.run(t, Options{Resync: time.Hour})
	f.create(t, "mine", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "mine", "Ready", readyAt(1))
	got, err := theirs.Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _, _ := unstructured.NestedMap(got.Object, "status"); len(got.GetFinalizers()) > 0 || len(st) > 0 {
		t.Fatalf("the object of namespace %s got finalizers %v and status %v from the watcher of namespace %s", other, got.GetFinalizers(), st, f.ns)
	}
}

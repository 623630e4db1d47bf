package crash

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestPendingCreateAdopted kills the operator (SIGKILL, with its pulumi processes) while its
// up creates a Deployment, at a moment chosen to leave a pending create in the state: the
// operator reaches the API server through testenv.HoldingProxy, which holds back the answer to
// the Deployment's create, so the Deployment exists while Pulumi still waits to record it. Pulumi keeps such an entry forever and the next up would fail
// on "already exists". After a restart the operator must adopt the Deployment and then
// either converge the object ("up") or, when the object was deleted while the operator was
// down, destroy everything including that Deployment ("delete"): no pending operation, no
// orphan, the PendingOperationsResolved Event.
func TestPendingCreateAdopted(t *testing.T) {
	requirePlugin(t)
	for _, then := range []string{"up", "delete"} {
		t.Run(then, func(t *testing.T) { pendingCreate(t, then) })
	}
}

func pendingCreate(t *testing.T, then string) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase, cluster, name = "pending-passphrase", "pending", "p"
	backendURL := "file://" + filepath.Join(t.TempDir(), "backend")
	proxy := c.HoldingProxy(t, func(r *http.Request) bool {
		return r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/"+ns+"/deployments")
	})
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: proxy.Kubeconfig, backendURL: backendURL, stateDir: t.TempDir(),
		cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
	t.Cleanup(func() {
		if op.pid() == 0 {
			op.start()
		}
		deleteAllAndWait(t, c, ns, 3*time.Minute)
	})
	s := spec{replicas: 1, data: map[string]string{"hostports": "a,8080\n"}}
	if err := createCR(ctx, c, ns, name, s, nil); err != nil {
		t.Fatal(err)
	}
	op.start()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			break
		} else if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("the up never created Deployment %s/%s: %v", ns, name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for proxy.Held() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the Deployment's create was never held")
		}
		time.Sleep(50 * time.Millisecond)
	}
	op.kill()
	proxy.Release()

	b := openBackend(t, backendURL, cluster, passphrase)
	pending := pendingOperations(t, b, cluster, ns, name)
	if !strings.Contains(strings.Join(pending, ","), string(apitype.OperationTypeCreating)+" kubernetes:apps/v1:Deployment") {
		t.Fatalf("precondition: after the kill the state should hold a pending create of the Deployment, has %v", pending)
	}
	t.Logf("after the kill: pending operations %v", pending)

	live, gone := map[string]spec{name: s}, []string(nil)
	if then == "delete" {
		if err := c.Client.Resource(api.GroupVersionResource).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		live, gone = map[string]spec{}, []string{name}
	}
	mark := op.logs.Len()
	op.start()
	took := waitConverged(t, c, ns, live, gone, 3*time.Minute)
	rep := checkState(t, c, b, ns, live)
	log := op.logs.since(mark)
	if !strings.Contains(log, "resolved pending operations") || !strings.Contains(log, "adopted kubernetes:apps/v1:Deployment "+ns+"/"+name) {
		t.Errorf("the operator's log does not say it adopted the Deployment")
	}
	if ev := eventTexts(t, c, ns); !strings.Contains(ev, watcher.ReasonPendingOperationsResolved) {
		t.Errorf("no %s Event", watcher.ReasonPendingOperationsResolved)
	}
	t.Logf("converged %s after the restart; stacks checked %d (resources %d, cluster objects %d)",
		took.Round(time.Second), rep.stacks, rep.resources, rep.liveObjects)
}

// TestAdoptedCreateKeepsItsFieldManager kills the operator while its first up creates the
// ConfigMap (the API server's answer held back, so the ConfigMap exists with a key "extra.txt"
// and the state holds only a pending create), removes that key from the object's
// configMapData while the operator is down, and restarts it. The ConfigMap must lose the key:
// the adopted ConfigMap must be applied as the field manager that created it: applied as a new
// manager, the server-side apply keeps the key the dead run's manager owns, and the object goes
// Ready with the key still there, in the cluster and in the state.
func TestAdoptedCreateKeepsItsFieldManager(t *testing.T) {
	requirePlugin(t)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase, cluster, name = "pending-passphrase", "pending", "p"
	backendURL := "file://" + filepath.Join(t.TempDir(), "backend")
	var holding atomic.Bool
	holding.Store(true)
	proxy := c.HoldingProxy(t, func(r *http.Request) bool {
		return holding.Load() && r.Method != http.MethodGet && r.Method != http.MethodDelete &&
			strings.Contains(r.URL.Path, "/namespaces/"+ns+"/configmaps")
	})
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: proxy.Kubeconfig, backendURL: backendURL, stateDir: t.TempDir(),
		cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
	t.Cleanup(func() {
		if op.pid() == 0 {
			op.start()
		}
		deleteAllAndWait(t, c, ns, 3*time.Minute)
	})
	first := spec{replicas: 1, data: map[string]string{"hostports": "a,8080\n", "extra.txt": "1"}}
	then := spec{replicas: 1, data: map[string]string{"hostports": "b,8080\n"}}
	if err := createCR(ctx, c, ns, name, first, nil); err != nil {
		t.Fatal(err)
	}
	op.start()
	deadline := time.Now().Add(2 * time.Minute)
	for proxy.Held() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the ConfigMap's create was never held")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-configmap", metav1.GetOptions{})
	if err != nil || cm.Data["extra.txt"] != "1" {
		t.Fatalf("precondition: the held create should have made the ConfigMap with extra.txt: %v %v", cm.Data, err)
	}
	op.kill()
	holding.Store(false)
	proxy.Release()

	b := openBackend(t, backendURL, cluster, passphrase)
	pending := pendingOperations(t, b, cluster, ns, name)
	if !slices.Contains(pending, string(apitype.OperationTypeCreating)+" kubernetes:core/v1:ConfigMap") {
		t.Fatalf("precondition: after the kill the state should hold a pending create of the ConfigMap, has %v", pending)
	}
	if err := patchCR(ctx, c, ns, name, then); err != nil {
		t.Fatal(err)
	}
	mark := op.logs.Len()
	op.start()
	took := waitConverged(t, c, ns, map[string]spec{name: then}, nil, 3*time.Minute)
	rep := checkState(t, c, b, ns, map[string]spec{name: then})
	if log := op.logs.since(mark); !strings.Contains(log, "restored field manager pulumi-kubernetes-") {
		t.Errorf("the operator's log does not say it restored the adopted ConfigMap's field manager")
	}
	cm, err = c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-configmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var appliers []string
	for _, e := range cm.ManagedFields {
		if e.Operation == metav1.ManagedFieldsOperationApply && strings.HasPrefix(e.Manager, "pulumi-kubernetes-") {
			appliers = append(appliers, e.Manager)
		}
	}
	if len(appliers) != 1 {
		t.Errorf("the ConfigMap has %d pulumi-kubernetes field managers %v, want the one that created it", len(appliers), appliers)
	}
	t.Logf("converged %s after the restart with data %v, field managers %v; stacks checked %d (resources %d, cluster objects %d)",
		took.Round(time.Second), cm.Data, appliers, rep.stacks, rep.resources, rep.liveObjects)
}

// pendingOperations lists the pending operations in the state of object ns/name's stack (of
// cluster, in backend b) as "<operation> <resource type>", e.g. "creating kubernetes:apps/v1:Deployment".
func pendingOperations(t *testing.T, b *backend, cluster, ns, name string) []string {
	t.Helper()
	stackName, err := stack.Name(cluster, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.export(stackName)
	if err != nil {
		t.Fatal(err)
	}
	var pending []string
	for _, o := range d.PendingOperations {
		pending = append(pending, string(o.Type)+" "+string(o.Resource.Type))
	}
	return pending
}

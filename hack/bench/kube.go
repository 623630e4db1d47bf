package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// PoolLabel marks the KindCustomHttps that the idle measurement reuses: the burst objects,
// which are Ready in the shared backend, and the ones created for it.
const PoolLabel = "bench.measutosh.dev/pool"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// kube holds the bench's clients and the two trackers that time what the operator does: when
// a KindCustomHttp becomes Ready at a generation, and when a managed Deployment's
// spec.replicas changes.
type kube struct {
	kubeconfig string
	dyn        dynamic.Interface
	cs         kubernetes.Interface
	crs        *crTracker
	deps       *deployTracker
}

func connect(kubeconfig string) (*kube, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	rc.QPS, rc.Burst = 200, 400
	rc.UserAgent = "pulumi-operator-bench"
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	abs, _ := filepath.Abs(kubeconfig)
	return &kube{kubeconfig: abs, dyn: dyn, cs: cs, crs: newCRTracker(), deps: newDeployTracker()}, nil
}

// serverVersion is the apiserver's git version, e.g. v1.35.4.
func (k *kube) serverVersion() string {
	v, err := k.cs.Discovery().ServerVersion()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return v.GitVersion
}

// installCRD creates or updates the CRD from config/crd and waits until it is Established.
func (k *kube) installCRD(ctx context.Context, repo string) error {
	b, err := os.ReadFile(filepath.Join(repo, "config", "crd", "groupsp.measutosh.dev_kindcustomhttps.yaml"))
	if err != nil {
		return fmt.Errorf("read CRD: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return fmt.Errorf("parse CRD: %w", err)
	}
	c := k.dyn.Resource(crdGVR)
	cur, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, u, metav1.CreateOptions{})
	case err == nil:
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = c.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("install CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, x := range conds {
			if m, ok := x.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// ensureNamespace creates ns if it does not exist.
func (k *kube) ensureNamespace(ctx context.Context, ns string) error {
	_, err := k.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// addFakeNode adds one more kwok node, for 20,000 pods (cluster-up.sh makes one, for 1000):
// the idle measurement alone runs 1000 pods, the cost curve (make bench-scale) up to 10,000
// and its shards 2000 more. The pods of the program request no resources.
func (k *kube) addFakeNode(ctx context.Context, name string) error {
	list := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("20000"),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": ""}},
		Status: corev1.NodeStatus{Allocatable: list, Capacity: list,
			NodeInfo: corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux", KubeletVersion: "fake"}},
	}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// crObject is the KindCustomHttp every measurement creates: the original sample's spec
// (configMapData with one peer) with replicaCount replicas.
func crObject(ns, name string, replicas int32, pool bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersion.String(),
		"kind":       "KindCustomHttp",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"replicaCount":  int64(replicas),
			"port":          int64(80),
			"configMapData": map[string]any{"hostports": "localhost,8080\n"},
		},
	}}
	if pool {
		u.SetLabels(map[string]string{PoolLabel: "idle"})
	}
	return u
}

// desiredOf is what the operator would compute for crObject(ns, name, replicas): the input of
// the raw Automation API ups that serve as the floor.
func desiredOf(ns, name string, replicas int32) (api.Desired, error) {
	cr, err := api.FromUnstructured(crObject(ns, name, replicas, false))
	if err != nil {
		return api.Desired{}, err
	}
	return api.Resolve(cr)
}

func (k *kube) createCR(ctx context.Context, u *unstructured.Unstructured) error {
	_, err := k.dyn.Resource(api.GroupVersionResource).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// createMany creates objs with up to parallel requests at once ("applied at once").
func (k *kube) createMany(ctx context.Context, objs []*unstructured.Unstructured, parallel int) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(objs))
	sem := make(chan struct{}, parallel)
	for _, u := range objs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := k.createCR(ctx, u); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (k *kube) patchReplicas(ctx context.Context, ns, name string, replicas int32) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicaCount":%d}}`, replicas)
	_, err := k.dyn.Resource(api.GroupVersionResource).Namespace(ns).Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patch %s/%s: %w", ns, name, err)
	}
	return nil
}

// scale does what `kubectl scale deployment` does: an update of the scale subresource. It
// returns the Deployment's generation before the change.
func (k *kube) scale(ctx context.Context, ns, name string, replicas int32) (int64, error) {
	d := k.cs.AppsV1().Deployments(ns)
	dep, err := d.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get deployment %s/%s: %w", ns, name, err)
	}
	sc, err := d.GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get scale of %s/%s: %w", ns, name, err)
	}
	sc.Spec.Replicas = replicas
	if _, err := d.UpdateScale(ctx, name, sc, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("scale %s/%s: %w", ns, name, err)
	}
	return dep.Generation, nil
}

// startInformers runs the trackers' informers (all namespaces) until ctx ends and waits
// for their caches.
func (k *kube) startInformers(ctx context.Context) error {
	df := dynamicinformer.NewDynamicSharedInformerFactory(k.dyn, 0)
	ci := df.ForResource(api.GroupVersionResource).Informer()
	_, _ = ci.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.crs.observe,
		UpdateFunc: func(_, n any) { k.crs.observe(n) },
	})
	sel := infra.LabelManagedBy + "=" + infra.ManagedBy
	f := informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sel }))
	di := f.Apps().V1().Deployments().Informer()
	_, _ = di.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.deps.observe,
		UpdateFunc: func(_, n any) { k.deps.observe(n) },
	})
	df.Start(ctx.Done())
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ci.HasSynced, di.HasSynced) {
		return fmt.Errorf("wait for the bench's informers: %w", ctx.Err())
	}
	return nil
}

// notifier wakes every waiter on each change: wait on ch(), call notify() after a change.
type notifier struct {
	mu sync.Mutex
	c  chan struct{}
}

func (n *notifier) ch() chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c == nil {
		n.c = make(chan struct{})
	}
	return n.c
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.c != nil {
		close(n.c)
		n.c = nil
	}
}

// crTracker records, per object, when the bench first saw it Ready=True at each generation
// (condition and status.observedGeneration both at it), with the time the watch event
// arrived.
type crTracker struct {
	mu    sync.Mutex
	ready map[string]map[int64]time.Time // "ns/name" -> generation -> first seen Ready
	n     notifier
}

func newCRTracker() *crTracker { return &crTracker{ready: map[string]map[int64]time.Time{}} }

func (t *crTracker) observe(obj any) {
	now := time.Now()
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	cr, err := api.FromUnstructured(u)
	if err != nil || cr.Status.ObservedGeneration != cr.Generation {
		return
	}
	for _, c := range cr.Status.Conditions {
		if c.Type != "Ready" || c.Status != metav1.ConditionTrue || c.ObservedGeneration != cr.Generation {
			continue
		}
		key := u.GetNamespace() + "/" + u.GetName()
		t.mu.Lock()
		m := t.ready[key]
		if m == nil {
			m = map[int64]time.Time{}
			t.ready[key] = m
		}
		_, seen := m[cr.Generation]
		if !seen {
			m[cr.Generation] = now
		}
		t.mu.Unlock()
		if !seen {
			t.n.notify()
		}
	}
}

// readyAt returns when key was first seen Ready at generation gen.
func (t *crTracker) readyAt(key string, gen int64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.ready[key][gen]
	return at, ok
}

// waitAll waits until every key is Ready at gen and returns the latest of their times; on
// timeout it returns how many were Ready.
func (t *crTracker) waitAll(ctx context.Context, keys []string, gen int64, timeout time.Duration) (time.Time, int, error) {
	deadline := time.After(timeout)
	for {
		ch := t.n.ch()
		var last time.Time
		n := 0
		for _, k := range keys {
			if at, ok := t.readyAt(k, gen); ok {
				n++
				if at.After(last) {
					last = at
				}
			}
		}
		if n == len(keys) {
			return last, n, nil
		}
		select {
		case <-ch:
		case <-time.After(time.Second): // belt and braces
		case <-deadline:
			return time.Time{}, n, fmt.Errorf("%d of %d objects Ready at generation %d after %s", n, len(keys), gen, timeout)
		case <-ctx.Done():
			return time.Time{}, n, ctx.Err()
		}
	}
}

// deployTracker records the spec changes (generation, replicas) of managed Deployments with
// the time the watch event arrived.
type deployTracker struct {
	mu     sync.Mutex
	events map[string][]deployEvent // "ns/name" -> spec changes in order
	n      notifier
}

type deployEvent struct {
	at         time.Time
	generation int64
	replicas   int32
}

func newDeployTracker() *deployTracker { return &deployTracker{events: map[string][]deployEvent{}} }

func (t *deployTracker) observe(obj any) {
	now := time.Now()
	d, ok := obj.(*appsv1.Deployment)
	if !ok || d.Spec.Replicas == nil {
		return
	}
	key := d.Namespace + "/" + d.Name
	t.mu.Lock()
	ev := t.events[key]
	if len(ev) == 0 || ev[len(ev)-1].generation != d.Generation {
		t.events[key] = append(ev, deployEvent{at: now, generation: d.Generation, replicas: *d.Spec.Replicas})
	}
	t.mu.Unlock()
	t.n.notify()
}

// waitReplicas waits for a spec of key with a generation above minGen and replicas
// replicas, and returns when it was first seen.
func (t *deployTracker) waitReplicas(ctx context.Context, key string, minGen int64, replicas int32, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		ch := t.n.ch()
		t.mu.Lock()
		for _, e := range t.events[key] {
			if e.generation > minGen && e.replicas == replicas {
				t.mu.Unlock()
				return e.at, nil
			}
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			return time.Time{}, fmt.Errorf("deployment %s: spec.replicas never back to %d within %s", key, replicas, timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

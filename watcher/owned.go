package watcher

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// ownedObjects watches the Deployments, Services and ConfigMaps that carry
// app.kubernetes.io/managed-by=pulumi-operator and maps each event back to its
// KindCustomHttp (same namespace, name from app.kubernetes.io/instance), so that replica
// health reaches status and hand-made changes are seen as they happen. Only the objects named as
// a live KindCustomHttp's objects are cached whole; a look-alike (the label set by someone else)
// is kept as a stub of its name and version (ownedTransform), and a ConfigMap's data never.
type ownedObjects struct {
	kube        kubeclient.Interface
	informers   []cache.SharedIndexInformer // the Deployments', Services' and ConfigMaps'
	deployments appslisters.DeploymentLister
	services    corelisters.ServiceLister
	// configMaps is the ConfigMaps' cache: their metadata only (a metadata informer) when the
	// watcher has a metadata client, else typed, each ConfigMap's data replaced by its digest
	// (ownedcache.go). Read it with configMap.
	configMaps cache.Indexer
	hasSynced  []cache.InformerSynced
	// inSync holds, per KindCustomHttp (cache.ObjectName), the last drift check that found the
	// live objects as declared (syncedAt), so that a resync that finds the same digest and the
	// same object versions does not compare again.
	inSync sync.Map
	// deployed holds, per KindCustomHttp (cache.ObjectName), the Deployment its last live read
	// found (deployedAt): readiness trusts a cached copy only when it covers that.
	deployed sync.Map
}

// configMap is the cached ConfigMap namespace/name (a *metav1.PartialObjectMetadata, or a
// *corev1.ConfigMap without its data), nil when the cache has none.
func (o *ownedObjects) configMap(namespace, name string) metav1.Object {
	obj, exists, err := o.configMaps.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil
	}
	m, _ := obj.(metav1.Object)
	return m
}

// syncedAt is what a drift check compared and found in sync: the digest of everything that
// decides what the program declares (Watcher.digest) and the resourceVersions of the live
// Deployment, Service and ConfigMap. The apiserver gives every change of an object a new
// resourceVersion, so while all four stay the same the comparison would find the same.
type syncedAt struct{ digest, deployment, service, configMap string }

// versions is the syncedAt of digest and the three live objects; ok is false when one is
// missing or has no resourceVersion (nothing to remember then).
func versions(digest string, dep *appsv1.Deployment, svc *corev1.Service, cm metav1.Object) (at syncedAt, ok bool) {
	if dep == nil || svc == nil || cm == nil {
		return syncedAt{}, false
	}
	at = syncedAt{digest, dep.ResourceVersion, svc.ResourceVersion, cm.GetResourceVersion()}
	return at, at.deployment != "" && at.service != "" && at.configMap != ""
}

// forget drops what drift and readiness remember of the KindCustomHttp key.
func (o *ownedObjects) forget(key cache.ObjectName) {
	o.inSync.Delete(key)
	o.deployed.Delete(key)
}

// newOwnedObjects watches the owned objects of namespace ("" for all) through kube, and the
// ConfigMaps' metadata only through meta when it is not nil: a ConfigMap's data (up to 1 MiB,
// anybody's who can set a label) then never reaches the operator, and the drift check reads a
// ConfigMap from the API server when its resourceVersion says it changed. live reports whether a
// KindCustomHttp namespace/name exists (the watcher's informer cache, synced before these informers
// start): only objects named as the program names those of a live KindCustomHttp are cached whole
// (ownedTransform).
func newOwnedObjects(kube kubeclient.Interface, meta metadata.Interface, namespace string, resync time.Duration, enqueue func(cache.ObjectName), live func(namespace, name string) bool) *ownedObjects {
	selector := labels.SelectorFromSet(labels.Set{infra.LabelManagedBy: infra.ManagedBy}).String()
	deployments := newInformer(kube, kube.AppsV1().Deployments(namespace), &appsv1.Deployment{}, selector, resync, ownedTransform(live))
	services := newInformer(kube, kube.CoreV1().Services(namespace), &corev1.Service{}, selector, resync, ownedTransform(live))
	var configMaps cache.SharedIndexInformer
	if meta != nil {
		configMaps = metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("configmaps"), namespace, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, func(lo *metav1.ListOptions) { lo.LabelSelector = selector }).Informer()
		_ = configMaps.SetTransform(ownedTransform(live))
	} else {
		configMaps = newInformer(kube, kube.CoreV1().ConfigMaps(namespace), &corev1.ConfigMap{}, selector, resync, ownedTransform(live))
	}
	o := &ownedObjects{kube: kube, informers: []cache.SharedIndexInformer{deployments, services, configMaps},
		deployments: appslisters.NewDeploymentLister(deployments.GetIndexer()),
		services:    corelisters.NewServiceLister(services.GetIndexer()),
		configMaps:  configMaps.GetIndexer(),
	}
	toOwner := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		m, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		if name := m.GetLabels()[infra.LabelInstance]; name != "" {
			enqueue(cache.ObjectName{Namespace: m.GetNamespace(), Name: name})
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: toOwner, UpdateFunc: func(_, n any) { toOwner(n) }, DeleteFunc: toOwner}
	for _, inf := range o.informers {
		_, _ = inf.AddEventHandler(h)
		o.hasSynced = append(o.hasSynced, inf.HasSynced)
	}
	return o
}

// listWatcher is the part of a client-go typed resource client (DeploymentInterface, ...) an
// informer needs; L is the resource's list type.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// newInformer is the informer of the objects of c (one resource in one namespace, or all with
// "") that match selector, each passed through transform (ownedTransform), as client-go's
// generated informers (informers/apps/v1.NewFilteredDeploymentInformer, ...) make it. Those
// take the whole kubernetes.Interface, which kubeclient does not implement (its package
// comment says why), so the ListWatch is written here, as theirs is; kube is passed on for
// client-go's watch-list check (the fake clientset has no watch-list).
func newInformer[L runtime.Object](kube kubeclient.Interface, c listWatcher[L], obj runtime.Object, selector string,
	resync time.Duration, transform cache.TransformFunc,
) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return c.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, kube), obj, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(transform) // fails only once the informer runs
	return inf
}

// start runs the informers until ctx ends.
func (o *ownedObjects) start(ctx context.Context) {
	for _, inf := range o.informers {
		go inf.RunWithContext(ctx)
	}
}

func (o *ownedObjects) synced() []cache.InformerSynced { return o.hasSynced }

// readiness judges the rollout of d's Deployment (internal/rollout), read from the cache, or
// from the API server when live is set (right after an up: the cache may not have seen the
// Deployment the up just changed) or when the cached copy does not cover the Deployment the
// last live read found (covers). Each live read becomes that floor, so Ready never comes from
// a cached Deployment older than the template an up wrote: after an up that changed the pod
// template, the Service's or ConfigMap's event may queue the object before the Deployment's
// does, while the cache still holds the old, fully rolled-out Deployment. A live read that
// fails is a rollout not known to be done (ReasonReplicasUnavailable, with the error), and the
// next look reads live again. The pods are listed, from the API server, only when the rollout
// is not done, to say why: no pod informer is kept for the common case.
func (o *ownedObjects) readiness(ctx context.Context, d api.Desired, live bool) rollout.Health {
	key := cache.ObjectName{Namespace: d.Namespace, Name: d.Name}
	var dep *appsv1.Deployment
	if !live {
		dep, _ = o.deployments.Deployments(d.Namespace).Get(d.Name)
		if at, ok := o.deployed.Load(key); (ok && !at.(deployedAt).covers(dep)) || isStub(dep) {
			live = true
		}
	}
	if live {
		x, err := o.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			dep = x
			o.deployed.Store(key, deployedAt{uid: x.UID, generation: x.Generation})
		case apierrors.IsNotFound(err):
			dep = nil
			o.deployed.Store(key, deployedAt{}) // any cached copy is older than this
		default:
			o.deployed.Store(key, deployedAt{})
			return rollout.Health{Desired: d.ReplicaCount, Reason: rollout.ReasonReplicasUnavailable,
				Message: fmt.Sprintf("Deployment %s could not be read: %v", d.Name, err)}
		}
	}
	h := rollout.Assess(dep, d.ReplicaCount, nil)
	if h.Done || dep == nil {
		return h
	}
	pods, err := rollout.ListPods(ctx, o.kube, dep)
	if err != nil {
		return h
	}
	return rollout.Assess(dep, d.ReplicaCount, pods)
}

// deployedAt is the Deployment a live read found (readiness): its UID and metadata.generation;
// the zero value when it was missing or could not be read.
type deployedAt struct {
	uid        types.UID
	generation int64
}

// covers reports whether dep, a cached Deployment, is at least as new as at: the same object
// at the same or a later generation. A missing Deployment (nil) covers anything: it is never
// Ready, so a stale absence cannot make Ready run ahead. The generation orders one object's
// specs (the apiserver raises it with each spec change); another UID, or the zero at, may be
// older or newer, so it does not cover.
func (at deployedAt) covers(dep *appsv1.Deployment) bool {
	return dep == nil || (at.uid != "" && dep.UID == at.uid && dep.Generation >= at.generation)
}

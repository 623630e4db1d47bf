package watcher

import (
	"context"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// ownedObjects watches the Deployments, Services and ConfigMaps that carry
// app.kubernetes.io/managed-by=pulumi-operator and maps each event back to its
// KindCustomHttp (same namespace, name from app.kubernetes.io/instance), so that replica
// health reaches status and hand-made changes are seen within seconds.
type ownedObjects struct {
	kube        kubernetes.Interface
	factory     informers.SharedInformerFactory
	deployments appslisters.DeploymentLister
	services    corelisters.ServiceLister
	configMaps  corelisters.ConfigMapLister
	hasSynced   []cache.InformerSynced
}

func newOwnedObjects(kube kubernetes.Interface, namespace string, resync time.Duration, enqueue func(cache.ObjectName)) *ownedObjects {
	selector := labels.SelectorFromSet(labels.Set{infra.LabelManagedBy: infra.ManagedBy}).String()
	f := informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = selector }),
		informers.WithTransform(stripMetadata(false)))
	o := &ownedObjects{kube: kube, factory: f,
		deployments: f.Apps().V1().Deployments().Lister(),
		services:    f.Core().V1().Services().Lister(),
		configMaps:  f.Core().V1().ConfigMaps().Lister(),
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
	for _, inf := range []cache.SharedIndexInformer{
		f.Apps().V1().Deployments().Informer(), f.Core().V1().Services().Informer(), f.Core().V1().ConfigMaps().Informer(),
	} {
		_, _ = inf.AddEventHandler(h)
		o.hasSynced = append(o.hasSynced, inf.HasSynced)
	}
	return o
}

func (o *ownedObjects) start(ctx context.Context)      { o.factory.Start(ctx.Done()) }
func (o *ownedObjects) synced() []cache.InformerSynced { return o.hasSynced }

// readiness judges the rollout of d's Deployment (internal/rollout), read from the cache, or
// from the API server when live is set (right after an up the cache may not have seen the
// Deployment the up just changed). The pods are listed, from the API server, only when the
// rollout is not done, to say why: no pod informer is kept for the common case.
func (o *ownedObjects) readiness(ctx context.Context, d api.Desired, live bool) rollout.Health {
	var dep *appsv1.Deployment
	if live {
		if x, err := o.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil {
			dep = x
		} else if !apierrors.IsNotFound(err) {
			live = false
		}
	}
	if !live {
		dep, _ = o.deployments.Deployments(d.Namespace).Get(d.Name)
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

// drift lists how the live objects differ from d, in the fields the program sets and people
// change by hand (replicas, image, ports, service type, ConfigMap data, existence). The cache
// may lag behind an up that just ran, so a difference seen there is confirmed with a live read
// before it counts: no false repair, and no API call while nothing differs.
func (o *ownedObjects) drift(ctx context.Context, d api.Desired) []string {
	dep, _ := o.deployments.Deployments(d.Namespace).Get(d.Name)
	svc, _ := o.services.Services(d.Namespace).Get(d.Name)
	cm, _ := o.configMaps.ConfigMaps(d.Namespace).Get(d.ConfigMapName())
	if len(compare(d, dep, svc, cm)) == 0 {
		return nil
	}
	dep, svc, cm = nil, nil, nil
	if x, err := o.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil {
		dep = x
	} else if !apierrors.IsNotFound(err) {
		return nil // cannot tell now; the next event or resync looks again
	}
	if x, err := o.kube.CoreV1().Services(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil {
		svc = x
	} else if !apierrors.IsNotFound(err) {
		return nil
	}
	if x, err := o.kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, d.ConfigMapName(), metav1.GetOptions{}); err == nil {
		cm = x
	} else if !apierrors.IsNotFound(err) {
		return nil
	}
	return compare(d, dep, svc, cm)
}

// compare is drift's pure part; nil objects are missing ones. It reads the fields people change
// by hand in what Declare sets for d: TestCompareFollowsDeclare runs Declare (infra.Expected)
// for a table of specs and checks that compare finds no drift in what it declares and finds
// each of these fields changed. It does not call infra.Expected itself: that runs the program
// against Pulumi's mocks, about a millisecond per object, which every object would pay on each
// restart of the operator.
func compare(d api.Desired, dep *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap) []string {
	var diffs []string
	if dep == nil {
		diffs = append(diffs, "Deployment "+d.Name+" deleted")
	} else {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != d.ReplicaCount {
			diffs = append(diffs, fmt.Sprintf("Deployment %s replicas %v, want %d", d.Name, deref(dep.Spec.Replicas), d.ReplicaCount))
		}
		cs := dep.Spec.Template.Spec.Containers
		if len(cs) != 1 || cs[0].Image != d.Image || len(cs[0].Ports) != 1 || cs[0].Ports[0].ContainerPort != d.ContainerPort {
			diffs = append(diffs, "Deployment "+d.Name+" container changed")
		}
	}
	if svc == nil {
		diffs = append(diffs, "Service "+d.Name+" deleted")
	} else {
		wantType, headless := corev1.ServiceType(d.ServiceType), d.ServiceType == api.ServiceTypeHeadless
		if headless {
			wantType = corev1.ServiceTypeClusterIP
		}
		if svc.Spec.Type != wantType || headless != (svc.Spec.ClusterIP == corev1.ClusterIPNone) {
			diffs = append(diffs, fmt.Sprintf("Service %s type %s", d.Name, svc.Spec.Type))
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != d.Port {
			diffs = append(diffs, "Service "+d.Name+" ports changed")
		}
	}
	if cm == nil {
		diffs = append(diffs, "ConfigMap "+d.ConfigMapName()+" deleted")
	} else if !(len(cm.Data) == 0 && len(d.ConfigMapData) == 0) && !maps.Equal(cm.Data, d.ConfigMapData) {
		diffs = append(diffs, "ConfigMap "+d.ConfigMapName()+" data changed")
	}
	return diffs
}

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}

package watcher

import (
	"context"
	"fmt"
	"maps"
	"sync"
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
	// wants holds, per object (cache.ObjectName), what drift compares the live objects with,
	// for the digest it was made for (wanted): infra.Expected runs the program against mocks,
	// which costs milliseconds, and drift is checked on every event of an owned object.
	wants sync.Map
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

// drift lists how the live objects differ from what the program declares for d (infra.Expected,
// made once per digest, the plan's), in the fields people change by hand: replicas, the
// container's image and port, the Service's type and port, the ConfigMap's data, existence.
// The cache may lag behind an up that just ran, so a difference seen there is confirmed with a
// live read before it counts: no false repair, and no API call while nothing differs.
func (o *ownedObjects) drift(ctx context.Context, digest string, d api.Desired) []string {
	want, err := o.want(digest, d)
	if err != nil {
		return nil // cannot tell; Expected fails only for a program bug, which an up reports
	}
	dep, _ := o.deployments.Deployments(d.Namespace).Get(d.Name)
	svc, _ := o.services.Services(d.Namespace).Get(d.Name)
	cm, _ := o.configMaps.ConfigMaps(d.Namespace).Get(d.ConfigMapName())
	if len(compare(want, dep, svc, cm)) == 0 {
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
	return compare(want, dep, svc, cm)
}

// wanted is the part of infra.Expected that drift compares, for one digest.
type wanted struct {
	digest        string
	deployment    string
	replicas      *int32
	containers    []corev1.Container
	service       string
	serviceType   corev1.ServiceType
	headless      bool
	ports         []corev1.ServicePort
	configMap     string
	configMapData map[string]string
}

// want is d's wanted for digest, from the cache or made now (infra.Expected).
func (o *ownedObjects) want(digest string, d api.Desired) (wanted, error) {
	key := cache.ObjectName{Namespace: d.Namespace, Name: d.Name}
	if v, ok := o.wants.Load(key); ok && v.(wanted).digest == digest {
		return v.(wanted), nil
	}
	objs, err := infra.Expected(d)
	if err != nil {
		return wanted{}, err
	}
	w := wanted{
		digest:        digest,
		deployment:    objs.Deployment.Name,
		replicas:      objs.Deployment.Spec.Replicas,
		containers:    objs.Deployment.Spec.Template.Spec.Containers,
		service:       objs.Service.Name,
		serviceType:   objs.Service.Spec.Type,
		headless:      objs.Service.Spec.ClusterIP == corev1.ClusterIPNone,
		ports:         objs.Service.Spec.Ports,
		configMap:     objs.ConfigMap.Name,
		configMapData: objs.ConfigMap.Data,
	}
	o.wants.Store(key, w)
	return w, nil
}

// forget drops what was kept for the object key.
func (o *ownedObjects) forget(key cache.ObjectName) { o.wants.Delete(key) }

// compare is drift's pure part; nil objects are missing ones. Only the fields a person changes
// by hand are compared, each with what the program declares: the apiserver fills in defaults
// (a container's pull policy, a Service's cluster IP) that the program leaves out.
func compare(w wanted, dep *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap) []string {
	var diffs []string
	if dep == nil {
		diffs = append(diffs, "Deployment "+w.deployment+" deleted")
	} else {
		if dep.Spec.Replicas == nil || w.replicas == nil || *dep.Spec.Replicas != *w.replicas {
			diffs = append(diffs, fmt.Sprintf("Deployment %s replicas %v, want %v", w.deployment, deref(dep.Spec.Replicas), deref(w.replicas)))
		}
		if !sameContainers(dep.Spec.Template.Spec.Containers, w.containers) {
			diffs = append(diffs, "Deployment "+w.deployment+" container changed")
		}
	}
	if svc == nil {
		diffs = append(diffs, "Service "+w.service+" deleted")
	} else {
		if svc.Spec.Type != w.serviceType || w.headless != (svc.Spec.ClusterIP == corev1.ClusterIPNone) {
			diffs = append(diffs, fmt.Sprintf("Service %s type %s", w.service, svc.Spec.Type))
		}
		if !samePorts(svc.Spec.Ports, w.ports) {
			diffs = append(diffs, "Service "+w.service+" ports changed")
		}
	}
	if cm == nil {
		diffs = append(diffs, "ConfigMap "+w.configMap+" deleted")
	} else if !(len(cm.Data) == 0 && len(w.configMapData) == 0) && !maps.Equal(cm.Data, w.configMapData) {
		diffs = append(diffs, "ConfigMap "+w.configMap+" data changed")
	}
	return diffs
}

// sameContainers compares the containers' names, images and ports (number, protocol).
func sameContainers(live, want []corev1.Container) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		if live[i].Name != want[i].Name || live[i].Image != want[i].Image || len(live[i].Ports) != len(want[i].Ports) {
			return false
		}
		for j := range want[i].Ports {
			if live[i].Ports[j].ContainerPort != want[i].Ports[j].ContainerPort {
				return false
			}
		}
	}
	return true
}

// samePorts compares the Service's ports (number).
func samePorts(live, want []corev1.ServicePort) bool {
	if len(live) != len(want) {
		return false
	}
	for i := range want {
		if live[i].Port != want[i].Port {
			return false
		}
	}
	return true
}

func deref(p *int32) any {
	if p == nil {
		return "unset"
	}
	return *p
}

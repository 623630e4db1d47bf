package watcher

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/ownership"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestAdoptOriginal: objects made exactly as the original operator made them (Deployment with
// the hard-coded selector, headless Service, ConfigMap), 2 ready pods. A KindCustomHttp of
// their name is refused with ObjectConflict, its message naming the adoption annotation, and
// nothing is touched. With the annotation, the operator takes them over (the real program and
// provider): the Service keeps serving through the whole handover (its ready endpoints, read
// from a watch of its EndpointSlices, never drop to 0 once there), ConfigMap and Service keep
// their UIDs, the Service stays headless, the original Deployment and its ReplicaSet and pods
// go, the new Deployment is the program's, and the Events say where it stands. A look-alike
// (another selector) is still refused with the annotation. On the code before the handover,
// the annotated object stays ObjectConflict.
func TestAdoptOriginal(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	f := startWrapped(t, Options{Resync: time.Hour, HandoverDrain: time.Hour}, func(p *programStacks) Stacks { return realProgram{p} })
	ctx := context.Background()
	kube := f.cluster.Kube
	data := map[string]string{"hostports": "localhost,8080\n"}
	testenv.CreateOriginal(t, kube, f.ns, "legacy", 2, 80, data, api.DefaultImage)
	origDep, err := kube.AppsV1().Deployments(f.ns).Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc0, _ := kube.CoreV1().Services(f.ns).Get(ctx, "legacy", metav1.GetOptions{})
	cm0, _ := kube.CoreV1().ConfigMaps(f.ns).Get(ctx, "legacy-configmap", metav1.GetOptions{})
	origPods := f.originalPods(t, 2)
	ready := watchReadyEndpoints(t, f, "legacy")
	poll(t, "the original Service has 2 ready endpoints", func() bool { return ready.last() == 2 })

	// Without the annotation: refused, untouched.
	f.create(t, "legacy", "  replicaCount: 2\n  port: 80\n  configMapData:\n    hostports: |\n      localhost,8080\n")
	o := f.waitFor(t, "legacy", "Ready False ObjectConflict", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonObjectConflict
	})
	if msg := cond(o, api.ConditionReady).Message; !strings.Contains(msg, api.AdoptOriginalAnnotation) || !strings.Contains(msg, "original operator") {
		t.Fatalf("ObjectConflict message %q: want it to name the original operator and %s", msg, api.AdoptOriginalAnnotation)
	}
	if d, err := kube.AppsV1().Deployments(f.ns).Get(ctx, "legacy", metav1.GetOptions{}); err != nil || d.UID != origDep.UID || d.Generation != origDep.Generation {
		t.Fatalf("the original Deployment after the refusal: %v: want it untouched", err)
	}

	// With it: taken over.
	f.patch(t, "legacy", fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, api.AdoptOriginalAnnotation))
	f.waitEvent(t, "legacy", ReasonAdoptingOriginal)
	f.waitFor(t, "legacy", "Ready", func(o *api.KindCustomHttp) bool { return cond(o, api.ConditionReady).Status == metav1.ConditionTrue })
	// The original pods out of the Service, waiting out the drain: the operator stops there,
	// and one started afterwards (with a short drain) finishes from what the cluster holds.
	poll(t, "the original ReplicaSet stamped drained", func() bool {
		l, err := kube.AppsV1().ReplicaSets(f.ns).List(ctx, metav1.ListOptions{LabelSelector: HandoverLabel + "=legacy"})
		return err == nil && len(l.Items) == 1 && l.Items[0].Annotations[DrainedAtAnnotation] != ""
	})
	poll(t, "2 ready endpoints, the program's only", func() bool { return ready.last() == 2 })
	f.stop()
	f.stop = f.run(t, Options{Namespace: f.ns, Resync: time.Hour, Logger: testLogger(), HandoverDrain: 2 * time.Second})
	f.waitEvent(t, "legacy", ReasonAdoptedOriginal)
	poll(t, "the original pods gone", func() bool {
		for _, name := range origPods {
			if _, err := kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	poll(t, "2 ready endpoints, the program's", func() bool { return ready.last() == 2 })
	if min, seen := ready.minAfterFirst(); min < 1 {
		t.Fatalf("ready endpoints of Service legacy through the handover: %v: want never 0 once there", seen)
	} else {
		t.Logf("ready endpoints through the handover: %v", seen)
	}

	dep, err := kube.AppsV1().Deployments(f.ns).Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil || dep.UID == origDep.UID || !maps.Equal(dep.Spec.Selector.MatchLabels, infra.SelectorLabels(api.Desired{Name: "legacy"})) {
		t.Fatalf("Deployment legacy after the handover: %v %+v: want the program's", err, dep.Spec.Selector)
	}
	if _, ok := dep.Spec.Template.Labels[ownership.OriginalLabelKey]; ok {
		t.Fatalf("the program's pod template carries the original label: %v", dep.Spec.Template.Labels)
	}
	svc, err := kube.CoreV1().Services(f.ns).Get(ctx, "legacy", metav1.GetOptions{})
	if err != nil || svc.UID != svc0.UID || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Labels[infra.LabelManagedBy] != infra.ManagedBy ||
		!maps.Equal(svc.Spec.Selector, infra.SelectorLabels(api.Desired{Name: "legacy"})) {
		t.Fatalf("Service legacy after the handover: %v, uid %s (was %s), clusterIP %q, labels %v, selector %v: want the same Service, headless, the program's",
			err, svc.GetUID(), svc0.UID, svc.Spec.ClusterIP, svc.GetLabels(), svc.Spec.Selector)
	}
	cm, err := kube.CoreV1().ConfigMaps(f.ns).Get(ctx, "legacy-configmap", metav1.GetOptions{})
	if err != nil || cm.UID != cm0.UID || cm.Labels[infra.LabelInstance] != "legacy" || len(cm.OwnerReferences) != 1 {
		t.Fatalf("ConfigMap after the handover: %v, uid %s (was %s), labels %v, owners %v: want the same ConfigMap, the program's",
			err, cm.GetUID(), cm0.UID, cm.GetLabels(), cm.GetOwnerReferences())
	}
	rsets, _ := kube.AppsV1().ReplicaSets(f.ns).List(ctx, metav1.ListOptions{LabelSelector: HandoverLabel})
	if len(rsets.Items) > 0 {
		t.Fatalf("ReplicaSets still labelled %s after the handover: %d", HandoverLabel, len(rsets.Items))
	}
	state := f.stackState(t, "legacy")
	for _, typ := range []string{"kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service", "kubernetes:core/v1:ConfigMap"} {
		if !strings.Contains(state, typ) {
			t.Errorf("the stack holds no %s", typ)
		}
	}

	// A look-alike: the name's objects, another selector: refused even with the annotation.
	other := "other"
	testenv.CreateOriginal(t, kube, f.ns, other, 1, 80, nil, api.DefaultImage)
	if _, err := kube.CoreV1().Services(f.ns).Patch(ctx, other, "application/merge-patch+json",
		[]byte(`{"spec":{"selector":{"app":"somebody-else"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	otherDep, err := kube.AppsV1().Deployments(f.ns).Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.create(t, other, "  replicaCount: 1\n  port: 80\n")
	f.patch(t, other, fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, api.AdoptOriginalAnnotation))
	o = f.waitFor(t, other, "Ready False ObjectConflict", func(o *api.KindCustomHttp) bool {
		c := cond(o, api.ConditionReady)
		return c.Reason == api.ReasonObjectConflict && strings.Contains(c.Message, "Service/"+other)
	})
	if msg := cond(o, api.ConditionReady).Message; strings.Contains(msg, "original operator") {
		t.Fatalf("a look-alike's ObjectConflict says it can be adopted: %q", msg)
	}
	if d, err := kube.AppsV1().Deployments(f.ns).Get(ctx, other, metav1.GetOptions{}); err != nil || d.UID != otherDep.UID {
		t.Fatalf("the look-alike's Deployment: %v: want it untouched (nothing taken over while one object is foreign)", err)
	}
}

// originalPods waits until the original Deployment has n running pods and returns their names.
func (f *fixture) originalPods(t *testing.T, n int) []string {
	t.Helper()
	var names []string
	poll(t, fmt.Sprintf("%d original pods running", n), func() bool {
		l, err := f.cluster.Kube.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=measutosh-http-server"})
		if err != nil {
			return false
		}
		names = names[:0]
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning {
				names = append(names, p.Name)
			}
		}
		return len(names) == n
	})
	return names
}

// readyEndpoints records, from a watch of a Service's EndpointSlices, the number of ready
// endpoints after every change.
type readyEndpoints struct {
	mu     sync.Mutex
	slices map[string]int
	seen   []int
}

func (r *readyEndpoints) last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return -1
	}
	return r.seen[len(r.seen)-1]
}

// minAfterFirst is the least count seen after the first non-zero one, and every count seen.
func (r *readyEndpoints) minAfterFirst() (int, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	least, started := -1, false
	for _, n := range r.seen {
		if n > 0 {
			started = true
		}
		if started && (least < 0 || n < least) {
			least = n
		}
	}
	return least, append([]int(nil), r.seen...)
}

func watchReadyEndpoints(t *testing.T, f *fixture, service string) *readyEndpoints {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := f.cluster.Kube.DiscoveryV1().EndpointSlices(f.ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		t.Fatal(err)
	}
	r := &readyEndpoints{slices: map[string]int{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			n := 0
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					n += len(e.Addresses)
				}
			}
			r.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(r.slices, s.Name)
			} else {
				r.slices[s.Name] = n
			}
			total := 0
			for _, v := range r.slices {
				total += v
			}
			if len(r.seen) == 0 || r.seen[len(r.seen)-1] != total {
				r.seen = append(r.seen, total)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

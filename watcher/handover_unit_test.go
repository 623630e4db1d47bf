package watcher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktesting "k8s.io/client-go/testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// adopting is kch(name) with the adoption annotation and the finalizer.
func adopting(name string) *unstructured.Unstructured {
	u := kch(name, nil, Finalizer)
	u.SetAnnotations(map[string]string{api.AdoptOriginalAnnotation: "true"})
	return u
}

// A takeover whose first write is refused (the original Deployment's delete, forbidden) runs
// no up and reports Ready False AdoptionFailed naming the call; nothing was changed but labels.
func TestUnitAdoptionDeleteRefused(t *testing.T) {
	f := newUnit(t, Options{})
	testenv.CreateOriginal(t, f.kube, unitNS, "web", 2, 80, map[string]string{"hostports": "a,1"}, api.DefaultImage)
	f.kube.PrependReactor("delete", "deployments", func(ktesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web", nil)
	})
	f.create(adopting("web"))
	err := f.reconcile("web")
	if err == nil || !strings.Contains(err.Error(), "delete the original Deployment") {
		t.Fatalf("reconcile = %v: want the refused delete", err)
	}
	if len(f.stacks.ups) != 0 {
		t.Fatalf("%d ups with the original Deployment still there, want none", len(f.stacks.ups))
	}
	wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonAdoptionFailed)
	if _, err := f.kube.AppsV1().Deployments(unitNS).Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("the original Deployment: %v: want it kept", err)
	}
}

// The takeover with the fake apiserver, step by step: before the up the original Deployment
// goes (orphan) and Service and ConfigMap become the object's; after the up, the original
// ReplicaSet's pods leave the Service (the program's selector labels removed, the ReplicaSet
// stamped) and the object is queued again; once the drain has passed, the ReplicaSet is
// deleted (AdoptedOriginal); a refused delete there is Ready False AdoptionFailed, retried.
func TestUnitAdoptionSteps(t *testing.T) {
	ctx := context.Background()
	for name, refuse := range map[string]bool{"drained, deleted": false, "drained, delete refused": true} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{HandoverDrain: time.Hour})
			testenv.CreateOriginal(t, f.kube, unitNS, "web", 2, 80, map[string]string{"hostports": "a,1"}, api.DefaultImage)
			orig, _ := f.kube.AppsV1().Deployments(unitNS).Get(ctx, "web", metav1.GetOptions{})
			orig.UID = "uid-original"
			_ = f.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), orig, unitNS)
			ctl := true
			rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: unitNS, UID: "uid-rs",
				Labels:          map[string]string{"app": "measutosh-http-server", "pod-template-hash": "abc"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: orig.UID, Controller: &ctl}}}}
			if _, err := f.kube.AppsV1().ReplicaSets(unitNS).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-abc-1", Namespace: unitNS, UID: "uid-pod",
				Labels:          map[string]string{"app": "measutosh-http-server", "pod-template-hash": "abc"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &ctl}}}}
			if _, err := f.kube.CoreV1().Pods(unitNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			u := adopting("web")
			f.create(u)
			// The fake stacks make no objects: the program's Deployment, available, as the up
			// would leave it once rolled out.
			dep, _, _ := owned(t, u)
			f.stacks.onUp = func() {
				f.putOwned(dep.DeepCopy())
				// The garbage collector's part of the orphaning delete.
				r, _ := f.kube.AppsV1().ReplicaSets(unitNS).Get(ctx, rs.Name, metav1.GetOptions{})
				r.OwnerReferences = nil
				_ = f.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("replicasets"), r, unitNS)
			}

			if err := f.reconcile("web"); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if len(f.stacks.ups) != 1 {
				t.Fatalf("%d ups, want 1", len(f.stacks.ups))
			}
			p, _ := f.kube.CoreV1().Pods(unitNS).Get(ctx, pod.Name, metav1.GetOptions{})
			if p.Labels[HandoverLabel] != "web" || p.Labels[infra.LabelInstance] != "" {
				t.Fatalf("original pod labels after the up: %v: want the handover mark, out of the Service", p.Labels)
			}
			r, _ := f.kube.AppsV1().ReplicaSets(unitNS).Get(ctx, rs.Name, metav1.GetOptions{})
			if r.Labels[HandoverLabel] != "web" || r.Annotations[DrainedAtAnnotation] == "" {
				t.Fatalf("original ReplicaSet after the up: labels %v annotations %v: want marked and stamped", r.Labels, r.Annotations)
			}
			if o := r.OwnerReferences; len(o) != 1 || o[0].UID != u.GetUID() || o[0].Controller != nil {
				t.Fatalf("original ReplicaSet owners after the up: %+v: want the KindCustomHttp (not as controller), so that its delete removes it", o)
			}
			for _, obj := range []string{"Service", "ConfigMap"} {
				var m metav1.Object
				if obj == "Service" {
					m, _ = f.kube.CoreV1().Services(unitNS).Get(ctx, "web", metav1.GetOptions{})
				} else {
					m, _ = f.kube.CoreV1().ConfigMaps(unitNS).Get(ctx, "web-configmap", metav1.GetOptions{})
				}
				if m.GetLabels()[infra.LabelManagedBy] != infra.ManagedBy || len(m.GetOwnerReferences()) != 1 || m.GetOwnerReferences()[0].UID != u.GetUID() {
					t.Fatalf("%s after the takeover: labels %v owners %v: want the object's", obj, m.GetLabels(), m.GetOwnerReferences())
				}
			}

			// The drain has passed.
			r.Annotations[DrainedAtAnnotation] = time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
			_ = f.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("replicasets"), r, unitNS)
			if refuse {
				f.kube.PrependReactor("delete", "replicasets", func(ktesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, rs.Name, nil)
				})
			}
			err := f.reconcile("web")
			_, getErr := f.kube.AppsV1().ReplicaSets(unitNS).Get(ctx, rs.Name, metav1.GetOptions{})
			events := f.events()
			if refuse {
				if err == nil || !strings.Contains(err.Error(), "delete the original ReplicaSet") || getErr != nil {
					t.Fatalf("reconcile = %v (ReplicaSet: %v): want the refused delete, the ReplicaSet kept", err, getErr)
				}
				wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonAdoptionFailed)
				return
			}
			if err != nil || !apierrors.IsNotFound(getErr) || !slices.Contains(events, "Normal "+ReasonAdoptedOriginal) {
				t.Fatalf("reconcile = %v, ReplicaSet %v, events %v: want it deleted and AdoptedOriginal", err, getErr, events)
			}
		})
	}
}

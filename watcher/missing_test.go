package watcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// A delete whose stack is missing from the backend while the objects it created still exist
// never orphans them silently: the finalizer stays with Ready False StackMissing (Stalled)
// saying how to proceed, until the on-missing-stack annotation says orphan (the objects stay,
// without their ownerReference, so the garbage collector keeps them) or delete (they go).
// Without any object left, the delete finishes as before.
func TestUnitStackMissing(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		annotation string
		noObjects  bool
		// foreign: the objects carry the labels and names, but their owner is another UID (a
		// tenant's look-alikes, or an earlier object of the same name).
		foreign bool
		// finished: the finalizer went; kept: the objects still exist; event: the Event reason.
		finished, kept bool
		event          string
		msg            string
		// normal: Normal Events wanted, in this order (Warning event above otherwise).
		normal []string
	}{
		"no annotation: waits, says how": {kept: true, event: api.ReasonStackMissing, msg: "on-missing-stack=adopt"},
		"unknown value: waits, names it": {annotation: "keep", kept: true, event: api.ReasonStackMissing, msg: `"keep" is none of orphan, delete and adopt`},
		// The fake's destroy deletes nothing, so the objects are still there afterwards; the
		// import is the up's infra.Adopt (checked below), the destroy the second Destroy.
		"adopt: the stack is rebuilt by import, then destroyed": {annotation: api.OnMissingStackAdopt, finished: true, kept: true,
			normal: []string{"Normal " + api.ReasonStackRebuilt, "Normal " + ReasonDestroyed}},
		"orphan: objects stay, disowned":    {annotation: api.OnMissingStackOrphan, finished: true, kept: true, event: ReasonObjectsOrphaned},
		"delete: objects go":                {annotation: api.OnMissingStackDelete, finished: true, event: ReasonObjectsDeleted},
		"nothing left: the delete finishes": {noObjects: true, finished: true},
		"delete, look-alikes owned by another UID: left alone, the delete finishes": {annotation: api.OnMissingStackDelete, foreign: true,
			finished: true, kept: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			u := kch("web", nil, Finalizer)
			f.applied(u)
			dep, svc, cm := owned(t, u)
			objs := []runtime.Object{dep, svc, cm}
			for _, o := range objs {
				m := o.(metav1.Object)
				uid := u.GetUID()
				if tc.foreign {
					uid = "another-uid"
				}
				m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: infra.OwnerAPIVersion, Kind: infra.OwnerKind,
					Name: "web", UID: uid}})
			}
			if tc.noObjects {
				for _, o := range objs {
					f.deleteOwned(o)
				}
			} else {
				f.putOwned(objs...)
			}
			if tc.annotation != "" {
				f.change("web", false, func(u *unstructured.Unstructured) {
					u.SetAnnotations(map[string]string{api.OnMissingStackAnnotation: tc.annotation})
				})
			}
			f.stacks.destroyMissing = true
			f.stacks.adopts = nil // the first up's
			f.markDeleted("web")
			f.events()
			if err := f.reconcile("web"); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			_, err := f.dyn.Tracker().Get(api.GroupVersionResource, unitNS, "web")
			if gone := apierrors.IsNotFound(err); gone != tc.finished {
				t.Fatalf("object gone %v, want %v (finalizer removed only when the user chose, or nothing is left)", gone, tc.finished)
			}
			events := f.events()
			if tc.event != "" && !slices.Contains(events, "Warning "+tc.event) {
				t.Errorf("events %q, want a Warning %s", events, tc.event)
			}
			if tc.normal != nil && !slices.Equal(events, tc.normal) {
				t.Errorf("events %q, want %q", events, tc.normal)
			}
			wantAdopt := []infra.Adopt(nil)
			if tc.annotation == api.OnMissingStackAdopt {
				wantAdopt = []infra.Adopt{{ConfigMap: true, Deployment: true, Service: true}}
			}
			if !slices.Equal(f.stacks.adopts, wantAdopt) {
				t.Errorf("ups' imports %+v, want %+v (only an adopting delete rebuilds, importing and changing nothing)", f.stacks.adopts, wantAdopt)
			}
			if !tc.finished {
				cr := f.storedCR("web")
				wantCondition(t, cr, api.ConditionReady, metav1.ConditionFalse, api.ReasonStackMissing)
				wantCondition(t, cr, api.ConditionStalled, metav1.ConditionTrue, api.ReasonStackMissing)
				c := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionReady)
				if !strings.Contains(c.Message, tc.msg) || !strings.Contains(c.Message, "Deployment/web, Service/web, ConfigMap/web-configmap") {
					t.Errorf("message %q: want it to name the objects and %q", c.Message, tc.msg)
				}
				f.deliver("web")
				if err := f.reconcile("web"); err != nil {
					t.Fatal(err)
				}
				if again := f.events(); len(again) != 0 {
					t.Errorf("the same StackMissing again: events %q, want none", again)
				}
			}
			d, err := f.kube.AppsV1().Deployments(unitNS).Get(ctx, "web", metav1.GetOptions{})
			if tc.noObjects {
				return
			}
			if exists := err == nil; exists != tc.kept {
				t.Fatalf("Deployment exists %v, want %v (%v)", exists, tc.kept, err)
			}
			if tc.annotation == api.OnMissingStackOrphan && len(d.OwnerReferences) != 0 {
				t.Errorf("orphaned Deployment still owned: %v", d.OwnerReferences)
			}
			if !tc.finished && len(d.OwnerReferences) != 1 {
				t.Errorf("Deployment's ownerReferences %v while waiting, want them untouched", d.OwnerReferences)
			}
		})
	}
}

// An up never takes over an object of the same name that the operator did not make for this
// KindCustomHttp (the provider upserts): the object waits with ObjectConflict naming it, and no
// up runs until it is gone.
func TestUnitForeignObjectBlocksUp(t *testing.T) {
	f := newUnit(t, Options{})
	if _, err := f.kube.CoreV1().Services(unitNS).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.create(kch("web", nil, Finalizer))
	err := f.reconcile("web")
	if err == nil || !strings.Contains(err.Error(), "Service/web") {
		t.Fatalf("reconcile = %v, want the conflict naming Service/web", err)
	}
	if len(f.stacks.ups) != 0 {
		t.Fatalf("%d ups over a foreign object, want none", len(f.stacks.ups))
	}
	wantCondition(t, f.storedCR("web"), api.ConditionReady, metav1.ConditionFalse, api.ReasonObjectConflict)
}

// No destroy awaits a deletion (infra.SkipAwait): the finalizer goes only once the objects the
// destroy deleted are gone, so a `kubectl delete` that returns has left nothing behind; the
// wait runs no second destroy.
func TestUnitDeleteWaitsForTheObjects(t *testing.T) {
	f := newUnit(t, Options{})
	u := kch("web", nil, Finalizer)
	f.applied(u)
	dep, _, _ := owned(t, u)
	now := metav1.Now()
	going := dep.DeepCopy()
	going.DeletionTimestamp = &now
	going.Finalizers = []string{"foregroundDeletion"}
	f.markDeleted("web")
	f.cacheOwned(going)
	err := f.reconcileRaw("web")
	if !errors.Is(err, errObjectsTerminating) || !strings.Contains(err.Error(), "Deployment/web") {
		t.Fatalf("reconcile = %v, want a wait for Deployment/web", err)
	}
	if o := f.storedCR("web"); len(o.Finalizers) != 1 {
		t.Fatalf("finalizers %v while the Deployment goes, want ours", o.Finalizers)
	}
	f.deliver("web")
	_ = f.reconcileRaw("web")
	if got := f.journal.take(); !slices.Equal(got, []string{"destroy test.ns.web"}) {
		t.Errorf("journal %q: want one destroy", got)
	}
	f.deleteOwned(dep)
	if err := f.reconcileRaw("web"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyn.Tracker().Get(api.GroupVersionResource, unitNS, "web"); !apierrors.IsNotFound(err) {
		t.Errorf("the object is still there once its Deployment went (%v)", err)
	}
}

// A delete whose destroyed objects do not go is reported once it has waited
// Options.DeleteBlockedAfter, not waited out in silence: Ready False, DeleteBlocked, naming the
// objects and, for a Deployment deleted in the foreground, its pods that are being deleted,
// with their finalizers; one Warning Event; pulumi_operator_deletes_blocked. A shorter wait
// writes nothing. When they go, the finalizer goes and the gauge falls.
func TestUnitDeleteBlockedReported(t *testing.T) {
	f := newUnit(t, Options{DeleteBlockedAfter: 200 * time.Millisecond})
	u := kch("web", nil, Finalizer)
	f.applied(u)
	dep, _, _ := owned(t, u)
	now := metav1.Now()
	going := dep.DeepCopy()
	going.DeletionTimestamp = &now
	going.Finalizers = []string{metav1.FinalizerDeleteDependents}
	going.Spec.Selector = &metav1.LabelSelector{MatchLabels: infra.SelectorLabels(desiredOf(t, u))}
	f.putOwned(going)
	held := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "web-7d4-x2", Labels: infra.Labels(desiredOf(t, u)),
		DeletionTimestamp: &now, Finalizers: []string{"example.com/hold"}}}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "web-7d4-a1", Labels: infra.Labels(desiredOf(t, u))}}
	for _, p := range []*corev1.Pod{held, running} {
		if _, err := f.kube.CoreV1().Pods(unitNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.markDeleted("web")
	f.journal.take()
	f.events()
	if err := f.reconcileRaw("web"); !errors.Is(err, errObjectsTerminating) {
		t.Fatalf("reconcile = %v, want a wait", err)
	}
	if got, ev := f.journal.take(), f.events(); !slices.Equal(got, []string{"destroy test.ns.web"}) || !slices.Equal(ev, []string{"Normal " + ReasonDestroyed}) {
		t.Errorf("a short wait: journal %q, events %q; want the destroy alone", got, ev)
	}
	if v := gauge(t, f.registry, "pulumi_operator_deletes_blocked"); v != 0 {
		t.Errorf("deletes_blocked %v during a short wait, want 0", v)
	}

	time.Sleep(250 * time.Millisecond)
	for range 2 {
		f.deliver("web")
		if err := f.reconcileRaw("web"); !errors.Is(err, errObjectsTerminating) {
			t.Fatalf("reconcile = %v, want a wait", err)
		}
	}
	o := f.storedCR("web")
	ready := meta.FindStatusCondition(o.Status.Conditions, api.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != api.ReasonDeleteBlocked ||
		!strings.Contains(ready.Message, "Deployment/web (finalizers: foregroundDeletion), Pod/web-7d4-x2 (finalizers: example.com/hold)") ||
		strings.Contains(ready.Message, "web-7d4-a1") {
		t.Errorf("Ready %+v, want DeleteBlocked naming the Deployment and the held pod alone", ready)
	}
	wantCondition(t, o, api.ConditionReconciling, metav1.ConditionTrue, api.ReasonDeleteBlocked)
	if got := f.events(); !slices.Equal(got, []string{"Warning " + api.ReasonDeleteBlocked}) {
		t.Errorf("events %q, want one DeleteBlocked Warning", got)
	}
	if v := gauge(t, f.registry, "pulumi_operator_deletes_blocked"); v != 1 {
		t.Errorf("deletes_blocked %v, want 1", v)
	}

	f.deleteOwned(going)
	f.deliver("web")
	if err := f.reconcileRaw("web"); err != nil {
		t.Fatalf("reconcile once the Deployment went: %v", err)
	}
	if _, err := f.dyn.Tracker().Get(api.GroupVersionResource, unitNS, "web"); !apierrors.IsNotFound(err) {
		t.Errorf("the object is still there once its Deployment went (%v)", err)
	}
	if v := gauge(t, f.registry, "pulumi_operator_deletes_blocked"); v != 0 {
		t.Errorf("deletes_blocked %v after the delete finished, want 0", v)
	}
}

// An up of an object annotated on-missing-stack=adopt imports nothing: a living object's lost
// stack is rebuilt by its up over the live objects (infra.Adopt says why); only a delete whose
// stack is missing imports (TestUnitStackMissing).
func TestUnitAdoptOnlyForDelete(t *testing.T) {
	f := newUnit(t, Options{})
	appliedAndOwned(f, "web")
	f.change("web", false, func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{api.OnMissingStackAnnotation: api.OnMissingStackAdopt})
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicaCount")
	})
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if want := []infra.Adopt{{}, {}}; !slices.Equal(f.stacks.adopts, want) {
		t.Fatalf("ups' imports %+v, want none", f.stacks.adopts)
	}
}

// A delete with on-missing-stack=adopt whose rebuild cannot run keeps the finalizer, says why
// (Ready False DestroyFailed) and is retried: the up of the import failed, or the object's spec
// does not resolve into a program (an object stored before a validation rule). Nothing is
// destroyed or deleted.
func TestUnitAdoptRebuildFails(t *testing.T) {
	for name, tc := range map[string]struct {
		upErr error
		spec  map[string]any
		want  string
	}{
		"the import's up fails": {upErr: errors.New("injected: backend unreachable"), want: "backend unreachable"},
		"the spec does not resolve": {spec: map[string]any{"replicaCount": int64(-1), "port": int64(80)},
			want: "rebuild stack"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			appliedAndOwned(f, "web")
			f.change("web", false, func(u *unstructured.Unstructured) {
				u.SetAnnotations(map[string]string{api.OnMissingStackAnnotation: api.OnMissingStackAdopt})
				if tc.spec != nil {
					u.Object["spec"] = tc.spec
				}
			})
			f.stacks.destroyMissing = true
			f.stacks.upErr = tc.upErr
			f.markDeleted("web")
			err := f.reconcile("web")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reconcile = %v, want an error with %q (retried)", err, tc.want)
			}
			cr := f.storedCR("web")
			if !slices.Contains(cr.Finalizers, Finalizer) {
				t.Fatal("the finalizer went although nothing was destroyed")
			}
			wantCondition(t, cr, api.ConditionReady, metav1.ConditionFalse, api.ReasonDestroyFailed)
			if _, err := f.kube.AppsV1().Deployments(unitNS).Get(context.Background(), "web", metav1.GetOptions{}); err != nil {
				t.Fatalf("the Deployment after a failed rebuild: %v, want it kept", err)
			}
		})
	}
}

// appliedAndOwned creates KindCustomHttp name, runs its first up, and gives its Deployment,
// Service and ConfigMap the ownerReference to it that the program sets.
func appliedAndOwned(f *unitFixture, name string) {
	f.t.Helper()
	u := kch(name, nil, Finalizer)
	f.applied(u)
	dep, svc, cm := owned(f.t, u)
	for _, o := range []metav1.Object{dep, svc, cm} {
		o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: infra.OwnerAPIVersion, Kind: infra.OwnerKind,
			Name: name, UID: u.GetUID()}})
	}
	f.putOwned(dep, svc, cm)
}

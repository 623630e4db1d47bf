package watcher

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Journal entries of the status writes around an up (see conditionSummary).
const (
	statusProgressing = "status Ready=Unknown/Progressing Reconciling=True/Progressing"
	statusReady       = "status Ready=True/Succeeded Reconciling=False/Succeeded"
	finalizerAdded    = "update finalizers=[" + Finalizer + "]"
)

// editStatus changes u's status through the API types.
func editStatus(t testing.TB, u *unstructured.Unstructured, edit func(st *api.KindCustomHttpStatus)) {
	t.Helper()
	var st api.KindCustomHttpStatus
	if raw, ok := u.Object["status"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
			t.Fatal(err)
		}
	}
	edit(&st)
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = raw
}

// TestUnitPlan covers every branch of plan, and suspend before it, through the sync handler:
// what reached the apiserver and the stack manager, in order, which Events were recorded, and
// the status left behind. "applied" cases start from a stack a first reconcile brought up to
// date, with the live owned objects matching it.
func TestUnitPlan(t *testing.T) {
	const requestedAt = "2026-01-02T03:04:05Z"
	setImage := func(f *unitFixture) {
		f.change("web", false, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "example.com/web:2", "spec", "image")
		})
	}
	request := func(f *unitFixture) {
		f.change("web", false, func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: requestedAt})
		})
	}
	for name, tc := range map[string]struct {
		applied bool
		changes map[string]int // what the fake up reports changed; default none
		setup   func(f *unitFixture)
		journal []string
		events  []string
		check   func(t *testing.T, o *api.KindCustomHttp, before string)
	}{
		"create: finalizer first, then the up, Created": {
			setup: func(f *unitFixture) {
				u := kch("web", nil)
				dep, svc, cm := owned(f.t, u)
				f.putOwned(dep, svc, cm)
				f.create(u)
			},
			changes: map[string]int{"create": 3},
			journal: []string{finalizerAdded, statusProgressing, "up refresh=false", statusReady},
			events:  []string{"Normal Created"},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded)
				wantCondition(t, o, api.ConditionStalled, metav1.ConditionFalse, api.ReasonSucceeded)
				if o.Status.AppliedDigest == "" || o.Status.Stack != "organization/kindcustomhttp/test.ns.web" ||
					o.Status.Outputs == nil || o.Status.Outputs.DeploymentName != "web" ||
					o.Status.LastUpdate == nil || o.Status.LastUpdate.Result != "succeeded" ||
					o.Status.Replicas != 2 || o.Status.AvailableReplicas != 2 {
					t.Errorf("status after the first up: %+v", o.Status)
				}
			},
		},
		"create: spec.suspend set from the start runs nothing": {
			setup: func(f *unitFixture) {
				f.create(kch("web", map[string]any{"replicaCount": int64(1), "port": int64(80), "suspend": true}))
			},
			journal: []string{finalizerAdded, "status Reconciling=False/Suspended"},
		},
		"update: spec changed": {
			applied: true, changes: map[string]int{"update": 1},
			setup:   setImage,
			journal: []string{statusProgressing, "up refresh=false", statusReady},
			events:  []string{"Normal Updated"},
			check: func(t *testing.T, o *api.KindCustomHttp, before string) {
				if o.Generation != 2 {
					t.Errorf("generation %d, want 2", o.Generation)
				}
				wantCondition(t, o, api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded)
				if o.Status.AppliedDigest == before {
					t.Error("appliedDigest unchanged by an up of a new spec")
				}
			},
		},
		"update: spec changed, up changed nothing: no Event": {
			applied: true,
			setup:   setImage,
			journal: []string{statusProgressing, "up refresh=false", statusReady},
		},
		"update: retrying a failed up keeps the failure visible (no Progressing write)": {
			applied: true,
			setup: func(f *unitFixture) {
				setImage(f)
				f.stacks.upErr = errors.New("boom")
				if err := f.reconcile("web"); err == nil {
					f.t.Fatal("the failing up returned nil")
				}
				f.stacks.upErr = nil
				f.deliver("web")
			},
			journal: []string{"up refresh=false", statusReady},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded)
			},
		},
		"requested: a new annotation value runs up with refresh": {
			applied: true,
			setup:   request,
			journal: []string{statusProgressing, "up refresh=true", statusReady},
			events:  []string{"Normal " + ReasonRequested},
			check: func(t *testing.T, o *api.KindCustomHttp, before string) {
				if o.Status.LastHandledReconcileAt != requestedAt {
					t.Errorf("lastHandledReconcileAt = %q, want %q", o.Status.LastHandledReconcileAt, requestedAt)
				}
				if o.Status.AppliedDigest != before {
					t.Error("appliedDigest changed without a spec change")
				}
			},
		},
		"requested: a value status already echoes runs nothing": {
			applied: true,
			setup: func(f *unitFixture) {
				request(f)
				f.change("web", true, func(u *unstructured.Unstructured) {
					editStatus(f.t, u, func(st *api.KindCustomHttpStatus) { st.LastHandledReconcileAt = requestedAt })
				})
			},
		},
		"drift: Deployment scaled by hand is repaired with refresh": {
			applied: true,
			setup: func(f *unitFixture) {
				dep, _, _ := owned(f.t, f.stored("web"))
				five := int32(5)
				dep.Spec.Replicas = &five
				f.putOwned(dep)
			},
			journal: []string{statusProgressing, "up refresh=true", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		"drift: ConfigMap deleted is repaired with refresh": {
			applied: true,
			setup: func(f *unitFixture) {
				_, _, cm := owned(f.t, f.stored("web"))
				f.deleteOwned(cm)
			},
			journal: []string{statusProgressing, "up refresh=true", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		"drift: Service type changed is repaired with refresh": {
			applied: true,
			setup: func(f *unitFixture) {
				_, svc, _ := owned(f.t, f.stored("web"))
				svc.Spec.Type = "NodePort"
				f.putOwned(svc)
			},
			journal: []string{statusProgressing, "up refresh=true", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		"nothing: a difference only the cache shows is not drift": {
			applied: true,
			setup: func(f *unitFixture) {
				dep, _, _ := owned(f.t, f.stored("web"))
				five := int32(5)
				dep.Spec.Replicas = &five
				f.cacheOwned(dep) // the live Deployment still matches
			},
		},
		"nothing: up to date, a resync writes nothing": {
			applied: true,
			setup:   func(*unitFixture) {},
		},
		"nothing: replicas became unavailable, only the status follows": {
			applied: true,
			setup: func(f *unitFixture) {
				dep, _, _ := owned(f.t, f.stored("web"))
				dep.Status.AvailableReplicas = 1
				f.putOwned(dep)
			},
			journal: []string{"status Ready=False/ReplicasUnavailable Reconciling=True/ReplicasUnavailable"},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReady, metav1.ConditionFalse, api.ReasonReplicasUnavailable)
				if o.Status.AvailableReplicas != 1 {
					t.Errorf("availableReplicas %d, want 1", o.Status.AvailableReplicas)
				}
			},
		},
		"suspend: no up for a new spec nor for drift": {
			applied: true,
			setup: func(f *unitFixture) {
				f.change("web", false, func(u *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(u.Object, true, "spec", "suspend")
					_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicaCount")
				})
				_, _, cm := owned(f.t, f.stored("web"))
				f.deleteOwned(cm)
			},
			journal: []string{"status Ready=True/Succeeded Reconciling=False/Suspended"},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReconciling, metav1.ConditionFalse, api.ReasonSuspended)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			f.stacks.upResult.Changes = tc.changes
			if tc.applied {
				f.applied(kch("web", nil))
			}
			var before string // the appliedDigest the case starts from
			if tc.applied {
				before = f.storedCR("web").Status.AppliedDigest
			}
			tc.setup(f)
			f.journal.take()
			f.events()
			if err := f.reconcile("web"); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if got := f.journal.take(); !slices.Equal(got, tc.journal) {
				t.Errorf("journal\n got %q\nwant %q", got, tc.journal)
			}
			if got := f.events(); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
			if tc.check != nil {
				tc.check(t, f.storedCR("web"), before)
			}
		})
	}
}

// TestUnitPlanStaleCache: the informer may hand out an object without the status the last
// reconcile wrote; the applied and handled-request memories keep that copy from starting a
// second up, and its status write conflicts and is redone on the stored object.
func TestUnitPlanStaleCache(t *testing.T) {
	f := newUnit(t, Options{})
	u := kch("web", nil, Finalizer)
	dep, svc, cm := owned(t, u)
	f.putOwned(dep, svc, cm)
	f.create(u)
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Equal(got, []string{statusProgressing, "up refresh=false", statusReady}) {
		t.Fatalf("first reconcile: %q", got)
	}
	// The cache still shows u, without any status.
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("a stale copy of an applied object: %q, want nothing", got)
	}

	// A reconcile request, handled; then the copy from before that handling comes again.
	f.deliver("web")
	f.change("web", false, func(u *unstructured.Unstructured) {
		u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: "r1"})
	})
	stale := f.stored("web")
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Equal(got, []string{statusProgressing, "up refresh=true", statusReady}) {
		t.Fatalf("request: %q", got)
	}
	if err := f.w.informer.GetIndexer().Update(stale); err != nil {
		t.Fatal(err)
	}
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("a stale copy of a handled request: %q, want nothing", got)
	}
	if o := f.storedCR("web"); o.Status.LastHandledReconcileAt != "r1" || o.Status.AppliedDigest == "" {
		t.Errorf("status lost by a stale write: %+v", o.Status)
	}
}

// TestUnitGoneFromCache: a key whose object is gone is done, with no call anywhere.
func TestUnitGoneFromCache(t *testing.T) {
	f := newUnit(t, Options{})
	if err := f.reconcile("gone"); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("journal %q, want nothing", got)
	}
	if n := len(f.dyn.Actions()) + len(f.kube.Actions()); n != 0 {
		t.Errorf("%d API calls for a deleted object: %v %v", n, f.dyn.Actions(), f.kube.Actions())
	}
}

package watcher

import (
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Journal entries of the status writes around an up (see conditionSummary).
const (
	statusProgressing = "status Ready=Unknown/Progressing Reconciling=True/Progressing"
	statusReady       = "status Ready=True/Succeeded Reconciling=False/Succeeded"
	finalizerAdded    = "patch finalizers=[" + Finalizer + "]"
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
	for name, tc := range map[string]planCase{
		// The first up asks for a refresh: the stack may exist already with objects the
		// cluster no longer has (stack.Manager skips it for a stack the up creates).
		"create: finalizer first, then the up with refresh, Created": {
			setup: func(f *unitFixture) {
				u := kch("web", nil)
				dep, svc, cm := owned(f.t, u)
				f.putOwned(dep, svc, cm)
				f.create(u)
			},
			changes: map[string]int{"create": 3},
			asked:   []bool{true},
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
		// A retry refreshes: the failure may come from a state that names an object the
		// cluster no longer has.
		"update: retrying a failed up keeps the failure visible (no Progressing write), with refresh": {
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
			journal: []string{"up refresh=true", statusReady},
			asked:   []bool{false, true},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded)
			},
		},
		"requested: a new annotation value runs up with refresh": {
			applied: true,
			setup:   request,
			journal: []string{statusProgressing, "up refresh=true background", statusReady},
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
			journal: []string{statusProgressing, "up refresh=true background", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		// An up that leaves the drift (a field another field manager applied stays) is said so,
		// not hidden behind Ready: the fake up here applies nothing.
		"drift: an up that does not repair it is reported": {
			applied: true,
			setup: func(f *unitFixture) {
				f.stacks.onRefreshUp = nil
				dep, _, _ := owned(f.t, f.stored("web"))
				five := int32(5)
				dep.Spec.Replicas = &five
				f.putOwned(dep)
			},
			journal: []string{statusProgressing, "up refresh=true background", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired, "Warning " + ReasonDriftNotRepaired},
		},
		"drift: ConfigMap deleted is repaired with refresh": {
			applied: true,
			setup: func(f *unitFixture) {
				_, _, cm := owned(f.t, f.stored("web"))
				f.deleteOwned(cm)
			},
			journal: []string{statusProgressing, "up refresh=true background", statusReady},
			events:  []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		"drift: Service type changed is repaired with refresh": {
			applied: true,
			setup: func(f *unitFixture) {
				_, svc, _ := owned(f.t, f.stored("web"))
				svc.Spec.Type = "NodePort"
				f.putOwned(svc)
			},
			journal: []string{statusProgressing, "up refresh=true background", statusReady},
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
		// Ready still describes generation 1, the one the stack holds, and so does
		// status.observedGeneration: kstatus, Flux and Argo CD read it as the generation the
		// status describes, and generation 2 was never applied.
		"suspend: no up for a new spec nor for drift, observedGeneration stays": {
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
				rec := meta.FindStatusCondition(o.Status.Conditions, api.ConditionReconciling)
				ready := meta.FindStatusCondition(o.Status.Conditions, api.ConditionReady)
				if rec == nil || rec.Reason != api.ReasonSuspended || rec.ObservedGeneration != 2 {
					t.Errorf("Reconciling %+v, want Suspended at generation 2", rec)
				}
				if o.Generation != 2 || o.Status.ObservedGeneration != 1 || ready == nil || ready.ObservedGeneration != 1 {
					t.Errorf("generation %d, status.observedGeneration %d, Ready %+v; want 2, 1 and Ready at 1",
						o.Generation, o.Status.ObservedGeneration, ready)
				}
			},
		},
		// The suspended spec is the one the stack holds: generation 2 is observed.
		"suspend alone: the spec applied, observedGeneration moves": {
			applied: true,
			setup: func(f *unitFixture) {
				f.change("web", false, func(u *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(u.Object, true, "spec", "suspend")
				})
			},
			journal: []string{"status Ready=True/Succeeded Reconciling=False/Suspended"},
			check: func(t *testing.T, o *api.KindCustomHttp, _ string) {
				wantCondition(t, o, api.ConditionReconciling, metav1.ConditionFalse, api.ReasonSuspended)
			},
		},
	} {
		// Each "applied" case runs twice: right after the up, and after a resync has found the
		// object in sync (what the watcher then remembers must not hide the change).
		resyncs := []bool{false}
		if tc.applied {
			resyncs = append(resyncs, true)
		}
		for _, resynced := range resyncs {
			if resynced {
				name += ", after a resync"
			}
			t.Run(name, func(t *testing.T) { tc.run(t, resynced) })
		}
	}
}

// planCase is one case of TestUnitPlan: the object "web" (applied: brought up to date by a
// first reconcile), setup, one reconcile, and what it journaled, recorded and left in status.
type planCase struct {
	applied bool
	changes map[string]int // what the fake up reports changed; default none
	// asked is RunOptions.Refresh of each up of the case (setup's too), when set: the refresh
	// the watcher asked for, which the journal's entry leaves out for an up that makes its
	// stack, as stack.Manager does.
	asked   []bool
	setup   func(f *unitFixture)
	journal []string
	events  []string
	check   func(t *testing.T, o *api.KindCustomHttp, before string)
}

// run runs the case; resynced reconciles the applied object once more first, with nothing to
// do, as a resync does.
func (tc planCase) run(t *testing.T, resynced bool) {
	f := newUnit(t, Options{})
	f.stacks.upResult.Changes = tc.changes
	if tc.applied {
		f.applied(kch("web", nil))
	}
	if resynced {
		if err := f.reconcile("web"); err != nil {
			t.Fatalf("resync: %v", err)
		}
		if got := f.journal.take(); len(got) > 0 {
			t.Fatalf("a resync of an object up to date: %q, want nothing", got)
		}
	}
	var before string // the appliedDigest the case starts from
	if tc.applied {
		before = f.storedCR("web").Status.AppliedDigest
	}
	f.stacks.ups = nil
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
	if tc.asked != nil {
		var asked []bool
		for _, o := range f.stacks.ups {
			asked = append(asked, o.Refresh)
		}
		if !slices.Equal(asked, tc.asked) {
			t.Errorf("ups asked for refresh %v, want %v", asked, tc.asked)
		}
	}
	if tc.check != nil {
		tc.check(t, f.storedCR("web"), before)
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
	if got := f.journal.take(); !slices.Equal(got, []string{statusProgressing, "up refresh=true background", statusReady}) {
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

// TestUnitIdleMemory: what an idle reconcile remembers (the object's typed form, the drift
// check that found its objects in sync) is used only for the very versions it was made from.
func TestUnitIdleMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		setup  func(f *unitFixture)
		want   []string // journal of the reconcile after setup
		events []string
	}{
		// The memory is trusted while the versions stay: a cache entry edited without a new
		// resourceVersion (something the apiserver never hands out) is not compared again.
		"same versions: not compared again": {
			setup: func(f *unitFixture) {
				dep, _, _ := owned(f.t, f.stored("web"))
				_, idx := f.ownedStore(dep)
				cached, ok, err := idx.Get(dep)
				if err != nil || !ok {
					f.t.Fatalf("the Deployment is not in the cache: %v", err)
				}
				dep.ResourceVersion = cached.(*appsv1.Deployment).ResourceVersion
				five := int32(5)
				dep.Spec.Replicas = &five
				if err := idx.Update(dep); err != nil {
					f.t.Fatal(err)
				}
			},
		},
		"a new Deployment version is compared: drift": {
			setup: func(f *unitFixture) {
				dep, _, _ := owned(f.t, f.stored("web"))
				five := int32(5)
				dep.Spec.Replicas = &five
				f.putOwned(dep)
			},
			want:   []string{statusProgressing, "up refresh=true background", statusReady},
			events: []string{"Normal " + ReasonDriftDetected, "Normal " + ReasonRepaired},
		},
		// A name deleted and made again is another object (another UID), even at the same
		// resourceVersion: its own spec is what the up applies.
		"the object made again under its name is converted again": {
			setup: func(f *unitFixture) {
				old := f.stored("web")
				version := old.GetResourceVersion()
				if err := f.dyn.Tracker().Delete(api.GroupVersionResource, unitNS, "web"); err != nil {
					f.t.Fatal(err)
				}
				dep, svc, cm := owned(f.t, old)
				f.deleteOwned(dep) // as the delete's destroy did
				f.deleteOwned(svc)
				f.deleteOwned(cm)
				u := kch("web", map[string]any{"replicaCount": int64(3), "port": int64(80)}, Finalizer)
				u.SetUID("uid-web-2")
				u.SetResourceVersion(version)
				f.create(u)
			},
			// Its first up, on the stack the deleted one left (the fake's delete ran no
			// destroy), refreshes, and the fake's refreshing up makes its objects.
			want:   []string{statusProgressing, "up refresh=true", statusReady},
			events: []string{"Normal " + ReasonCreated},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			f.applied(kch("web", nil, Finalizer))
			if err := f.reconcile("web"); err != nil { // the resync that remembers
				t.Fatal(err)
			}
			f.journal.take()
			tc.setup(f)
			f.journal.take()
			f.events()
			if err := f.reconcile("web"); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if got := f.journal.take(); !slices.Equal(got, tc.want) {
				t.Errorf("journal\n got %q\nwant %q", got, tc.want)
			}
			if got := f.events(); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
		})
	}
}

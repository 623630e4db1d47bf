package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// process hands key name to one worker pass (processNext), as the queue would, and returns
// how often the queue now retries it: 0 after success or a stall, 1 after a failure.
func (f *unitFixture) process(name string) int {
	f.t.Helper()
	key := cache.ObjectName{Namespace: unitNS, Name: name}
	f.w.queue.Add(key)
	if !f.w.processNext(context.Background(), context.Background()) {
		f.t.Fatal("processNext stopped")
	}
	return f.w.queue.NumRequeues(key)
}

// TestUnitStallVsFail: an invalid spec stalls (Stalled True, a Warning Event, no retry until
// the spec changes); any other problem fails (Ready False with its reason, Reconciling True
// "Retrying", the key retried with backoff). Neither runs an up that cannot succeed.
func TestUnitStallVsFail(t *testing.T) {
	valid := func() map[string]any { return map[string]any{"replicaCount": int64(1), "port": int64(80)} }
	for name, tc := range map[string]struct {
		object  *unstructured.Unstructured
		setup   func(f *unitFixture)
		reason  string
		journal []string
		events  []string
		result  string // pulumi_operator_reconciles_total label
	}{
		"stall: port 0": {
			object: kch("web", map[string]any{"replicaCount": int64(1), "port": int64(0)}),
			reason: api.ReasonInvalidSpec,
		},
		"stall: unknown field (a typo)": {
			object: kch("web", map[string]any{"replicas": int64(1), "port": int64(80)}),
			reason: api.ReasonInvalidSpec,
		},
		"stall: name is no DNS-1035 label": {
			object: kch("web.v2", valid()),
			reason: api.ReasonInvalidSpec,
		},
		"fail: up fails": {
			object: kch("web", valid()),
			setup:  func(f *unitFixture) { f.stacks.upErr = errors.New("pulumi up: boom") },
			reason: api.ReasonUpdateFailed,
		},
		"fail: provider plugin missing": {
			object: kch("web", valid()),
			setup: func(f *unitFixture) {
				f.stacks.upErr = &stack.OperationError{Summary: "plugin missing", Err: stack.ErrPluginMissing}
			},
			reason: api.ReasonPluginMissing,
		},
		"fail: backend unavailable": {
			object: kch("web", valid()),
			setup: func(f *unitFixture) {
				f.stacks.upErr = &stack.OperationError{Summary: "backend down", Err: stack.ErrBackendUnavailable}
			},
			reason: api.ReasonBackendUnavailable,
		},
		"fail: stack locked by a live update is a wait, reported once": {
			object: kch("web", valid()),
			setup: func(f *unitFixture) {
				f.stacks.upErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked}
			},
			reason: api.ReasonUpdateConflict,
			events: []string{"Warning " + ReasonStackLocked},
			result: "locked",
		},
		"fail: envFrom source missing, no up": {
			object: kch("web", map[string]any{"replicaCount": int64(1), "port": int64(80),
				"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "absent"}}}}),
			reason:  api.ReasonEnvSourceMissing,
			journal: []string{finalizerAdded, "status Ready=False/EnvSourceMissing Reconciling=True/Retrying"},
			// The fake cluster has no admission policy: a reference is reported unchecked first.
			events: []string{"Warning " + api.ReasonAdmissionPolicyMissing, "Warning " + api.ReasonEnvSourceMissing},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			if tc.setup != nil {
				tc.setup(f)
			}
			f.create(tc.object)
			n := tc.object.GetName()
			requeues := f.process(n)
			o := f.storedCR(n)
			stalled := tc.reason == api.ReasonInvalidSpec
			journal, events, result := tc.journal, tc.events, tc.result
			if stalled {
				wantCondition(t, o, api.ConditionStalled, metav1.ConditionTrue, tc.reason)
				wantCondition(t, o, api.ConditionReconciling, metav1.ConditionFalse, tc.reason)
				if journal == nil {
					journal = []string{finalizerAdded, "status Ready=False/InvalidSpec Reconciling=False/InvalidSpec"}
				}
				if requeues != 0 {
					t.Errorf("an invalid spec is retried (%d requeues)", requeues)
				}
			} else {
				wantCondition(t, o, api.ConditionStalled, metav1.ConditionFalse, tc.reason)
				wantCondition(t, o, api.ConditionReconciling, metav1.ConditionTrue, api.ReasonRetrying)
				if journal == nil {
					journal = []string{finalizerAdded, statusProgressing, "up refresh=false",
						"status Ready=False/" + tc.reason + " Reconciling=True/Retrying"}
					if o.Status.LastUpdate == nil || o.Status.LastUpdate.Result != "failed" {
						t.Errorf("lastUpdate %+v, want a failed up", o.Status.LastUpdate)
					}
				}
				if requeues != 1 {
					t.Errorf("a failure is requeued %d times, want 1", requeues)
				}
			}
			wantCondition(t, o, api.ConditionReady, metav1.ConditionFalse, tc.reason)
			if events == nil {
				events = []string{"Warning " + tc.reason}
			}
			if result == "" {
				result = map[bool]string{true: "success", false: "error"}[stalled]
			}
			if got := f.journal.take(); !slices.Equal(got, journal) {
				t.Errorf("journal\n got %q\nwant %q", got, journal)
			}
			if got := f.events(); !slices.Equal(got, events) {
				t.Errorf("events %q, want %q", got, events)
			}
			if v := counter(t, f.registry, "pulumi_operator_reconciles_total", "result", result); v != 1 {
				t.Errorf("reconciles_total{result=%s} = %v, want 1", result, v)
			}
			if v := gauge(t, f.registry, "pulumi_operator_stacks_failing"); v != 1 {
				t.Errorf("stacks_failing = %v, want 1", v)
			}
		})
	}
}

// TestUnitStallReportsOnce: a stalled object seen again (a resync) writes nothing and records
// no second Event; a spec fix brings it up.
func TestUnitStallReportsOnce(t *testing.T) {
	f := newUnit(t, Options{})
	f.create(kch("web", map[string]any{"replicaCount": int64(1), "port": int64(0)}))
	if err := f.reconcile("web"); err != nil {
		t.Fatalf("a stall returned %v", err)
	}
	f.deliver("web")
	f.journal.take()
	f.events()
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got, ev := f.journal.take(), f.events(); len(got) != 0 || len(ev) != 0 {
		t.Errorf("the same stall again: journal %q, events %q; want nothing", got, ev)
	}
	f.change("web", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(80), "spec", "port")
	})
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Equal(got, []string{statusProgressing, "up refresh=false", "status Ready=False/DeploymentMissing Reconciling=True/DeploymentMissing"}) {
		t.Errorf("after the fix: %q", got)
	}
	wantCondition(t, f.storedCR("web"), api.ConditionStalled, metav1.ConditionFalse, rollout.ReasonDeploymentMissing)
}

// TestUnitFinalizerFirst: no up runs before the finalizer is stored, so a delete can never skip
// the destroy; a failed finalizer write is retried and runs nothing.
func TestUnitFinalizerFirst(t *testing.T) {
	f := newUnit(t, Options{})
	f.create(kch("web", nil))
	f.failUpdates = apierrors.NewServiceUnavailable("apiserver restarting")
	if n := f.process("web"); n != 1 {
		t.Errorf("failed finalizer write requeued %d times, want 1", n)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("after a failed finalizer write: %q, want nothing", got)
	}
	f.failUpdates = nil
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	got := f.journal.take()
	if len(got) < 3 || got[0] != finalizerAdded || got[2] != "up refresh=false" {
		t.Errorf("journal %q: want the finalizer stored before the up", got)
	}
	if o := f.storedCR("web"); len(o.Finalizers) != 1 || o.Finalizers[0] != Finalizer {
		t.Errorf("finalizers %v", o.Finalizers)
	}
	if _, ok := f.stored("web").Object["status"]; !ok {
		t.Error("no status written")
	}
}

// TestUnitEveryOutcomeEchoesTheRequest: whatever a reconcile of an object carrying a reconcile
// request ends in, its status echoes the request's token (status.lastHandledReconcileAt), so
// that `pulumi-operator reconcile --wait` learns the outcome instead of running out of time:
// the up's success or failure, and the outcomes found before any up (an invalid spec, a missing
// envFrom source, an object conflict, a suspended object), and a reconcile with nothing left to
// do for a request already handled whose status write was lost.
func TestUnitEveryOutcomeEchoesTheRequest(t *testing.T) {
	const token = "2026-03-04T05:06:07Z"
	valid := func() map[string]any { return map[string]any{"replicaCount": int64(2), "port": int64(80)} }
	request := func(f *unitFixture) {
		f.change("web", false, func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: token})
		})
	}
	for name, tc := range map[string]struct {
		spec  map[string]any // nil: kch's default
		setup func(f *unitFixture)
		ready string // Ready's reason afterwards ("": not checked)
		noUp  bool   // the reconcile must run no up
	}{
		"up succeeds": {ready: api.ReasonSucceeded},
		"up fails": {
			setup: func(f *unitFixture) { f.stacks.upErr = errors.New("pulumi up: boom") },
			ready: api.ReasonUpdateFailed,
		},
		"invalid spec": {
			spec:  map[string]any{"replicaCount": int64(1), "port": int64(0)},
			ready: api.ReasonInvalidSpec,
		},
		"envFrom source missing": {
			spec: map[string]any{"replicaCount": int64(1), "port": int64(80),
				"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "absent"}}}},
			ready: api.ReasonEnvSourceMissing,
		},
		"object conflict": {
			spec: valid(),
			setup: func(f *unitFixture) {
				if _, err := f.kube.CoreV1().Services(unitNS).Create(context.Background(), &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "web"}}, metav1.CreateOptions{}); err != nil {
					f.t.Fatal(err)
				}
			},
			ready: api.ReasonObjectConflict,
		},
		"stack of another object": {
			spec:  valid(),
			setup: func(f *unitFixture) { f.stacks.upErr = fmt.Errorf("up stack x: %w", stack.ErrStackOfAnother) },
			ready: api.ReasonObjectConflict,
		},
		"suspended": {
			spec: map[string]any{"replicaCount": int64(1), "port": int64(80), "suspend": true},
			noUp: true,
		},
		"nothing to do: handled, its status write lost": {
			setup: func(f *unitFixture) {
				// The up for the request ran; then another writer's status without the token.
				if err := f.reconcile("web"); err != nil {
					f.t.Fatal(err)
				}
				f.change("web", true, func(u *unstructured.Unstructured) {
					editStatus(f.t, u, func(st *api.KindCustomHttpStatus) { st.LastHandledReconcileAt = "" })
				})
				f.journal.take()
				f.stacks.ups = nil
			},
			ready: api.ReasonSucceeded, noUp: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			u := kch("web", tc.spec, Finalizer)
			if tc.spec == nil {
				f.applied(u)
			} else {
				f.create(u)
			}
			request(f)
			if tc.setup != nil {
				tc.setup(f)
			}
			_ = f.reconcile("web")
			o := f.storedCR("web")
			if o.Status.LastHandledReconcileAt != token {
				t.Errorf("lastHandledReconcileAt %q, want the request's %q (conditions %+v)", o.Status.LastHandledReconcileAt, token, o.Status.Conditions)
			}
			if c := meta.FindStatusCondition(o.Status.Conditions, api.ConditionReady); tc.ready != "" && (c == nil || c.Reason != tc.ready) {
				t.Errorf("Ready %+v, want reason %s", c, tc.ready)
			}
			if tc.noUp && len(f.stacks.ups) != 0 {
				t.Errorf("%d ups for a request already handled, want none", len(f.stacks.ups))
			}
		})
	}
}

// TestUnitEnvDigestKeyRollsOnce: an object whose envFrom source keeps its data gets one up when
// the digest key changes (the operator's upgrade from the unkeyed digest, or a new key), whose
// pod template then carries the new digest, and no up at the reconciles after it: its pods
// roll once.
func TestUnitEnvDigestKeyRollsOnce(t *testing.T) {
	ctx := context.Background()
	f := newUnit(t, Options{EnvDigestKey: []byte("the key before")})
	if _, err := f.kube.CoreV1().ConfigMaps(unitNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: unitNS, Name: "env"}, Data: map[string]string{"MODE": "one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := kch("web", map[string]any{"replicaCount": int64(2), "port": int64(80),
		"envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "env"}}}})
	// live puts the owned objects an up under key makes: the pod template carries its digest.
	live := func(key []byte) string {
		cr, err := api.FromUnstructured(u)
		if err != nil {
			t.Fatal(err)
		}
		r, err := desired.Resolve(ctx, cr, func() (kubeclient.Interface, error) { return f.kube, nil }, desired.Options{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		dep, svc, cm := owned(t, u)
		if dep.Spec.Template.Annotations == nil {
			dep.Spec.Template.Annotations = map[string]string{}
		}
		dep.Spec.Template.Annotations[infra.EnvDigestAnnotation] = r.Desired.EnvDigest
		f.putOwned(dep, svc, cm)
		return r.Desired.EnvDigest
	}
	before := live(f.w.opts.EnvDigestKey)
	f.create(u)
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	f.deliver("web")
	f.stacks.ups = nil
	f.journal.take()
	f.events()

	f.w.opts.EnvDigestKey = []byte("the key after")
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Contains(got, "up refresh=false") {
		t.Fatalf("first reconcile under the new key: %q, want an up", got)
	}
	if after := live(f.w.opts.EnvDigestKey); after == before || after == "" {
		t.Fatalf("digest under the new key %q, before %q", after, before)
	}
	f.deliver("web")
	for i := range 3 {
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); len(got) > 0 {
			t.Fatalf("reconcile %d after the up under the new key: %q, want nothing (no second roll)", i+1, got)
		}
	}
}

package watcher

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestUnitDelete: deleting a KindCustomHttp destroys its stack and only then removes the
// finalizer; any failure keeps the finalizer (and so the object) and is retried.
func TestUnitDelete(t *testing.T) {
	const destroy = "destroy test.ns.web"
	host, _ := os.Hostname()
	failed := func(reason string) string { return "status Ready=False/" + reason + " Reconciling=True/Retrying" }
	for name, tc := range map[string]struct {
		object     string // "web" unless set
		setup      func(f *unitFixture)
		wantErr    bool
		journal    []string
		events     []string
		ready      string // Ready reason of a failure written to status
		finalizers int    // finalizers left on a failure
	}{
		"destroyed, then the finalizer removed and the object gone": {
			journal: []string{destroy, "deleted"},
			events:  []string{"Normal " + ReasonDestroyed},
		},
		"destroy resolved a killed update's pending operations: reported": {
			setup: func(f *unitFixture) {
				f.stacks.destroyRecovered = []string{"create Deployment web: adopted"}
			},
			journal: []string{destroy, "deleted"},
			events:  []string{"Warning " + ReasonPendingOperationsResolved, "Normal " + ReasonDestroyed},
		},
		"destroy fails: finalizer kept, retried": {
			setup:   func(f *unitFixture) { f.stacks.destroyErr = errors.New("pulumi destroy: boom") },
			wantErr: true,
			journal: []string{destroy, failed(api.ReasonDestroyFailed)},
			events:  []string{"Warning " + api.ReasonDestroyFailed},
			ready:   api.ReasonDestroyFailed, finalizers: 1,
		},
		"destroy finds the backend down: finalizer kept, retried": {
			setup: func(f *unitFixture) {
				f.stacks.destroyErr = &stack.OperationError{Summary: "backend down", Err: stack.ErrBackendUnavailable}
			},
			wantErr: true,
			journal: []string{destroy, failed(api.ReasonBackendUnavailable)},
			events:  []string{"Warning " + api.ReasonBackendUnavailable},
			ready:   api.ReasonBackendUnavailable, finalizers: 1,
		},
		"destroy waits for a live update's lock: reported, no lock removed": {
			setup: func(f *unitFixture) {
				f.stacks.destroyErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked,
					Locks: []stack.Lock{{User: "me", Host: host, Pid: os.Getpid(), Created: time.Now()}}}
			},
			wantErr: true,
			events:  []string{"Warning " + ReasonStackLocked},
			journal: []string{destroy, failed(api.ReasonUpdateConflict)},
			ready:   api.ReasonUpdateConflict, finalizers: 1,
		},
		"destroy finds a dead process's lock: lock removed, finalizer kept until the retry": {
			setup: func(f *unitFixture) {
				f.stacks.destroyErr = &stack.OperationError{Summary: "locked", Err: stack.ErrLocked,
					Locks: []stack.Lock{{ID: "l1", User: "me", Host: host, Pid: 77, Created: time.Now()}}}
				f.stacks.holderGone = map[int]bool{77: true}
			},
			wantErr: true,
			journal: []string{destroy, "cancel-lock test.ns.web [l1]", failed(api.ReasonUpdateConflict)},
			events:  []string{"Warning " + ReasonStaleLockCleared},
			ready:   api.ReasonUpdateConflict, finalizers: 1,
		},
		"finalizer write fails after the destroy: retried": {
			setup:   func(f *unitFixture) { f.failUpdates = apierrors.NewServiceUnavailable("apiserver restarting") },
			wantErr: true,
			journal: []string{destroy},
			events:  []string{"Normal " + ReasonDestroyed},
			ready:   api.ReasonSucceeded, finalizers: 1,
		},
		"invalid name: no stack can exist, the finalizer goes without a destroy": {
			object:  "web.v2",
			journal: []string{"deleted"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			n := tc.object
			if n == "" {
				n = "web"
				f.applied(kch(n, nil))
			} else {
				f.create(kch(n, nil, Finalizer))
			}
			if tc.setup != nil {
				tc.setup(f)
			}
			f.markDeleted(n)
			f.journal.take()
			f.events()
			err := f.reconcile(n)
			if (err != nil) != tc.wantErr {
				t.Errorf("reconcile: %v, want an error: %v", err, tc.wantErr)
			}
			if got := f.journal.take(); !slices.Equal(got, tc.journal) {
				t.Errorf("journal\n got %q\nwant %q", got, tc.journal)
			}
			if got := f.events(); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
			if !tc.wantErr {
				if _, err := f.dyn.Tracker().Get(api.GroupVersionResource, unitNS, n); !apierrors.IsNotFound(err) {
					t.Errorf("object still stored after its delete was reconciled (%v)", err)
				}
				return
			}
			o := f.storedCR(n)
			if len(o.Finalizers) != tc.finalizers {
				t.Errorf("finalizers %v, want %d", o.Finalizers, tc.finalizers)
			}
			wantCondition(t, o, api.ConditionReady, map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[tc.ready == api.ReasonSucceeded], tc.ready)
		})
	}
}

// TestUnitDeleteOnce: the object without a finalizer is not ours to destroy; and a copy of a
// deleted object from before its finalizer was removed (the informer lags) destroys nothing
// more.
func TestUnitDeleteOnce(t *testing.T) {
	f := newUnit(t, Options{})
	f.create(kch("other", nil))
	f.markDeleted("other")
	if err := f.reconcile("other"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("delete of an object without our finalizer: %q, want nothing", got)
	}

	f.applied(kch("web", nil))
	f.markDeleted("web")
	f.journal.take()
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Equal(got, []string{"destroy test.ns.web", "deleted"}) {
		t.Fatalf("first delete: %q", got)
	}
	// The cache still shows the object with its finalizer and deletionTimestamp.
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("a stale copy of a destroyed object: %q, want nothing", got)
	}
}

package watcher

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
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

// kubectlCLI is the pinned kubectl (bin/kubectl, hack/build-tools.sh), else the one on PATH.
func kubectlCLI(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(testenv.RepoRoot(), "bin", "kubectl"); func() bool { _, err := os.Stat(p); return err == nil }() {
		return p
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.Missing(t, "no kubectl at bin/kubectl (make tools) nor on PATH")
	}
	return p
}

// An object made by `kubectl apply` keeps the last-applied annotation when the watcher adds
// its finalizer (a patch of the finalizers, not a write of the cache's copy, which holds no
// such annotation), so a later `kubectl apply` of the manifest without spec.suspend removes
// it, and the object is brought up.
func TestFinalizerKeepsLastApplied(t *testing.T) {
	kubectl := kubectlCLI(t)
	f := start(t)
	apply := func(spec string) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "web.yaml")
		doc := "apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata:\n  name: web\n  namespace: " + f.ns + "\nspec:\n" + spec
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kubectl, "--kubeconfig", f.cluster.Kubeconfig, "apply", "-f", file).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	apply("  replicaCount: 1\n  port: 80\n  suspend: true\n")
	f.waitFor(t, "web", "the finalizer added and Suspended", func(o *api.KindCustomHttp) bool {
		return slices.Contains(o.Finalizers, Finalizer) && cond(o, api.ConditionReconciling).Reason == api.ReasonSuspended
	})
	u, err := f.cr.Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := u.GetAnnotations()[corev1.LastAppliedConfigAnnotation]; !strings.Contains(a, `"suspend":true`) {
		t.Errorf("last-applied annotation after the finalizer was added: %q, want kubectl's, with suspend", a)
	}

	apply("  replicaCount: 1\n  port: 80\n")
	u, err = f.cr.Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if suspend, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); suspend {
		t.Fatal("kubectl apply of a manifest without spec.suspend left it true")
	}
	f.waitFor(t, "web", "Ready once resumed by kubectl apply", readyAt(u.GetGeneration()))
}

// A delete held up by a destroyed object that does not go (a finalizer nobody removes: another
// controller's, say) is reported once it has waited Options.DeleteBlockedAfter: Ready False,
// DeleteBlocked, naming the object with its finalizers; a Warning Event;
// pulumi_operator_deletes_blocked 1. Once the finalizer is removed the delete finishes, and the
// gauge falls to 0. (kwok, the local cluster's kubelet, removes every finalizer of a pod being
// deleted, so a pod cannot hold a Deployment here; TestUnitDeleteBlockedReported covers the
// pods named for a Deployment deleted in the foreground.)
func TestDeleteBlockedReported(t *testing.T) {
	f := startWith(t, Options{DeleteBlockedAfter: time.Second})
	ctx := context.Background()
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "Ready", readyAt(1))
	const hold = "example.com/hold"
	deployments := f.cluster.Kube.AppsV1().Deployments(f.ns)
	release := func() {
		_, _ = deployments.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
	t.Cleanup(release) // before the fixture's cleanup, which waits for the object to go
	if _, err := deployments.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+hold+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := f.cr.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	o := f.waitFor(t, "web", "DeleteBlocked", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonDeleteBlocked
	})
	ready := cond(o, api.ConditionReady)
	if want := "Deployment/web (finalizers: " + hold + ")"; !strings.Contains(ready.Message, want) {
		t.Errorf("Ready message %q does not name %q", ready.Message, want)
	}
	if ready.Status != metav1.ConditionFalse || cond(o, api.ConditionReconciling).Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, Reconciling %+v; want False and True", ready, cond(o, api.ConditionReconciling))
	}
	f.waitEvent(t, "web", api.ReasonDeleteBlocked)
	if v := gauge(t, f.registry, "pulumi_operator_deletes_blocked"); v != 1 {
		t.Errorf("pulumi_operator_deletes_blocked %v, want 1", v)
	}

	release()
	f.waitGone(t, "web")
	pollFor(t, 30*time.Second, "pulumi_operator_deletes_blocked back to 0", func() bool {
		return gauge(t, f.registry, "pulumi_operator_deletes_blocked") == 0
	})
}

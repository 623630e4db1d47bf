package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// sync reconciles one object: cache -> deep copy -> delete, or finalizer -> validate ->
// (suspended? | nothing to do? | up) -> status.
func (w *Watcher) sync(ctx context.Context, key cache.ObjectName) error {
	obj, err := w.lister.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		w.metrics.forget(key)
		w.applied.Delete(key)
		w.destroyed.Delete(key)
		return nil // deleted, and the finalizer already did its work
	}
	if err != nil {
		return fmt.Errorf("get %s from cache: %w", key, err)
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	if u.GetDeletionTimestamp() != nil {
		return w.reconcileDelete(ctx, u)
	}
	if u, err = w.ensureFinalizer(ctx, u); err != nil {
		return err
	}
	cr, d, stackName, err := w.desired(u)
	if err != nil {
		return w.stall(ctx, u, err)
	}
	if d.EnvDigest, err = EnvDigest(ctx, w.kube, d); err != nil {
		return w.fail(ctx, u, ReasonEnvSourceMissing, err)
	}
	if cr.Spec.Suspend {
		return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			setCondition(st, cr.Generation, ConditionReconciling, metav1.ConditionFalse, ReasonSuspended,
				"spec.suspend is true: no up and no drift repair until it is false")
		})
	}
	p := w.plan(ctx, cr, d, stackName)
	if !p.run {
		return w.updateReadiness(ctx, u, d)
	}
	return w.apply(ctx, u, cr, d, stackName, p)
}

// fail reports a retryable problem found before any Pulumi run (status and a Warning Event)
// and returns it, so the object is retried with backoff.
func (w *Watcher) fail(ctx context.Context, u *unstructured.Unstructured, reason string, cause error) error {
	gen := u.GetGeneration()
	if c := currentCondition(u, ConditionReady); c == nil || c.Reason != reason || c.Message != cause.Error() {
		w.recorder.Event(u, corev1.EventTypeWarning, reason, cause.Error())
	}
	w.metrics.setFailing(cache.MetaObjectToName(u), true)
	if err := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) { markFailed(st, gen, reason, cause.Error()) }); err != nil {
		return err
	}
	return cause
}

// desired converts and validates u; any error means the spec must change.
func (w *Watcher) desired(u *unstructured.Unstructured) (*api.KindCustomHttp, api.Desired, string, error) {
	cr, err := api.FromUnstructured(u)
	if err != nil {
		return nil, api.Desired{}, "", err
	}
	d, err := api.Resolve(cr)
	if err != nil {
		return nil, api.Desired{}, "", err
	}
	name, err := w.stacks.StackName(d.Namespace, d.Name)
	return cr, d, name, err
}

// stall reports an invalid spec once (status and a Warning Event) and does not retry: the
// object's next change enqueues it again.
func (w *Watcher) stall(ctx context.Context, u *unstructured.Unstructured, cause error) error {
	gen := u.GetGeneration()
	if c := currentCondition(u, ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != gen || c.Message != cause.Error() {
		w.recorder.Event(u, corev1.EventTypeWarning, ReasonInvalidSpec, cause.Error())
	}
	w.metrics.setFailing(cache.MetaObjectToName(u), true)
	return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
		markStalled(st, gen, ReasonInvalidSpec, cause.Error())
	})
}

// plan says whether an up must run, and with a refresh.
type plan struct {
	run, refresh bool
	// why is the Event reason: ReasonCreated/Updated (spec), ReasonRepaired (drift),
	// ReasonRequested (annotation).
	why    string
	drift  []string
	digest string
	// requested is the reconcile-request annotation's value, to echo in status.
	requested string
}

func (w *Watcher) plan(ctx context.Context, cr *api.KindCustomHttp, d api.Desired, stackName string) plan {
	p := plan{digest: w.digest(d, stackName), requested: cr.Annotations[api.ReconcileRequestAnnotation]}
	lastApplied, _ := w.applied.Load(cache.MetaObjectToName(cr))
	switch {
	case !upToDate(cr, p.digest) && lastApplied != (applied{cr.UID, cr.Generation, p.digest}):
		p.run, p.why = true, ReasonUpdated
		if cr.Status.AppliedDigest == "" {
			p.why = ReasonCreated
		}
	case p.requested != "" && p.requested != cr.Status.LastHandledReconcileAt && p.requested != w.requests.get(cr):
		p.run, p.refresh, p.why = true, true, ReasonRequested
	default:
		if p.drift = w.owned.drift(ctx, d); len(p.drift) > 0 {
			p.run, p.refresh, p.why = true, true, ReasonRepaired
		}
	}
	return p
}

// apply runs up and records the result in status, Events and metrics.
func (w *Watcher) apply(ctx context.Context, u *unstructured.Unstructured, cr *api.KindCustomHttp, d api.Desired, stackName string, p plan) error {
	gen := cr.Generation
	log := w.log.With("object", klogRef(u), "stack", stackName, "generation", gen)
	log.Info("running up", "why", p.why, "refresh", p.refresh, "drift", p.drift)
	if len(p.drift) > 0 {
		w.recorder.Eventf(u, corev1.EventTypeNormal, ReasonDriftDetected, "changed outside Pulumi, repairing: %v", p.drift)
	}
	// A retry keeps the failure it retries visible (Ready False, Reconciling True "Retrying")
	// instead of flipping status to Progressing and back on every attempt.
	if !retrying(cr) {
		if err := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			markReconciling(st, gen, "pulumi up of stack "+stackName+" is running")
		}); err != nil {
			return err
		}
	}
	key := cache.MetaObjectToName(u)
	w.applied.Delete(key)
	res, upErr := w.stacks.Up(ctx, d, stack.RunOptions{Refresh: p.refresh})
	w.reportRecovered(u, stackName, res)
	w.metrics.observeOperation("up", upErr, res)
	w.metrics.setFailing(key, upErr != nil)
	if upErr != nil {
		reason := failureReason(upErr)
		if reason == ReasonUpdateConflict {
			w.clearStaleLock(ctx, u, stackName, upErr)
		} else {
			w.recorder.Event(u, corev1.EventTypeWarning, reason, upErr.Error())
		}
		if err := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			st.LastUpdate = lastUpdate(res, upErr)
			markFailed(st, gen, reason, upErr.Error())
		}); err != nil {
			log.Error("write status failed", "err", err)
		}
		return upErr
	}
	if res.Changed() || p.why != ReasonUpdated {
		w.recorder.Eventf(u, corev1.EventTypeNormal, p.why, "pulumi up of stack %s: %v", stackName, res.Changes)
	}
	log.Info("stack up to date", "changes", res.Changes, "seconds", res.End.Sub(res.Start).Seconds())
	// Remember what was applied: the informer may hand out this object without the status
	// written below for a while, and that must not start a second up.
	w.applied.Store(key, applied{cr.UID, gen, p.digest})
	if p.requested != "" {
		w.requests.set(cr, p.requested)
	}
	ready, msg, counts := w.owned.liveReadiness(ctx, d)
	return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
		st.Stack = w.stacks.QualifiedName(stackName)
		st.LastUpdate = lastUpdate(res, nil)
		st.AppliedDigest = p.digest
		st.Outputs = outputs(res.Outputs)
		if p.requested != "" {
			st.LastHandledReconcileAt = p.requested
		}
		setReadiness(st, gen, ready, msg, counts)
	})
}

// applied is what the last successful up of an object applied.
type applied struct {
	uid        types.UID // a deleted and re-created object is another object
	generation int64
	digest     string
}

// appliedMap remembers, per object, the last successful up (cache.ObjectName -> applied).
type appliedMap = sync.Map

// handledRequests remembers the reconcile-request annotation values acted on, for the same
// reason as Watcher.applied.
type handledRequests struct {
	mu sync.Mutex
	m  map[cache.ObjectName]string
}

func (h *handledRequests) get(cr *api.KindCustomHttp) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[cache.MetaObjectToName(cr)]
}

func (h *handledRequests) set(cr *api.KindCustomHttp, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[cache.ObjectName]string{}
	}
	h.m[cache.MetaObjectToName(cr)] = v
}

// updateReadiness refreshes the replica counts and Ready from the Deployment, without Pulumi.
func (w *Watcher) updateReadiness(ctx context.Context, u *unstructured.Unstructured, d api.Desired) error {
	ready, msg, counts := w.owned.readiness(d)
	return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
		setReadiness(st, u.GetGeneration(), ready, msg, counts)
	})
}

// clearStaleLock cancels the lock that made an up fail when its owner is gone: a process of
// this host that no longer runs, or any lock older than Options.StaleLockTimeout (the owner
// is then presumed dead: no up takes that long). Otherwise the wait goes on.
func (w *Watcher) clearStaleLock(ctx context.Context, u *unstructured.Unstructured, stackName string, err error) {
	var oe *stack.OperationError
	if !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return
	}
	host, _ := os.Hostname()
	for _, l := range oe.Locks {
		gone := l.Host == host && !processAlive(l.Pid)
		if !gone && time.Since(l.Created) < w.opts.StaleLockTimeout {
			return
		}
	}
	if cerr := w.stacks.CancelLock(ctx, stackName); cerr != nil {
		w.log.Error("cancel stale lock failed", "object", klogRef(u), "stack", stackName, "err", cerr)
		return
	}
	w.log.Info("cancelled stale lock", "object", klogRef(u), "stack", stackName, "locks", fmt.Sprint(oe.Locks))
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonStaleLockCleared,
		"removed the lock of stack %s left by %s@%s (pid %d), whose process is gone or which is older than %s",
		stackName, oe.Locks[0].User, oe.Locks[0].Host, oe.Locks[0].Pid, w.opts.StaleLockTimeout)
}

// processAlive reports whether pid runs on this host (signal 0 checks without signalling).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// upToDate reports whether the last successful up applied exactly digest to the current
// generation, so that a resync, a restart or an unrelated update starts no Pulumi run.
func upToDate(cr *api.KindCustomHttp, digest string) bool {
	st := cr.Status
	return st.ObservedGeneration == cr.Generation && st.AppliedDigest == digest &&
		meta.FindStatusCondition(st.Conditions, ConditionReady) != nil &&
		!retrying(cr)
}

// retrying reports whether the status shows a failed attempt at the current generation that
// is being retried.
func retrying(cr *api.KindCustomHttp) bool {
	c := meta.FindStatusCondition(cr.Status.Conditions, ConditionReconciling)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonRetrying && c.ObservedGeneration == cr.Generation
}

// digest is the SHA-256 of everything that decides what an up does: the desired state, the
// program version, the stack and the salt (hex, 64 characters).
func (w *Watcher) digest(d api.Desired, stackName string) string {
	b, _ := json.Marshal(struct {
		Desired api.Desired
		Program string
		Stack   string
		Salt    string
	}{d, infra.ProgramVersion, stackName, w.opts.DigestSalt})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// reconcileDelete destroys the stack, then removes the finalizer. A failed destroy keeps the
// finalizer (and the object) and is retried: removing it first could orphan the objects.
func (w *Watcher) reconcileDelete(ctx context.Context, u *unstructured.Unstructured) error {
	key := cache.MetaObjectToName(u)
	if !hasFinalizer(u) {
		return nil
	}
	if uid, ok := w.destroyed.Load(key); ok && uid == u.GetUID() {
		return nil // an informer copy from before our finalizer removal
	}
	stackName, err := w.stacks.StackName(u.GetNamespace(), u.GetName())
	if err != nil {
		// No stack can exist under an invalid name: nothing to destroy.
		w.log.Info("no valid stack name, removing finalizer", "object", klogRef(u), "err", err)
		return w.removeFinalizer(ctx, u)
	}
	w.log.Info("running destroy", "object", klogRef(u), "stack", stackName)
	res, err := w.stacks.Destroy(ctx, stackName, stack.RunOptions{})
	w.reportRecovered(u, stackName, res)
	w.metrics.observeOperation("destroy", err, res)
	if err != nil {
		reason := ReasonDestroyFailed
		switch {
		case errors.Is(err, stack.ErrLocked):
			reason = ReasonUpdateConflict
			w.clearStaleLock(ctx, u, stackName, err)
		case errors.Is(err, stack.ErrBackendUnavailable):
			reason = ReasonBackendUnavailable
			w.recorder.Event(u, corev1.EventTypeWarning, reason, err.Error())
		default:
			w.recorder.Event(u, corev1.EventTypeWarning, reason, err.Error())
		}
		gen := u.GetGeneration()
		if serr := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			st.LastUpdate = lastUpdate(res, err)
			markFailed(st, gen, reason, err.Error())
		}); serr != nil && !apierrors.IsNotFound(serr) {
			w.log.Error("write status failed", "object", klogRef(u), "err", serr)
		}
		return err
	}
	w.recorder.Eventf(u, corev1.EventTypeNormal, ReasonDestroyed, "destroyed stack %s: %v", stackName, res.Changes)
	w.log.Info("stack destroyed", "object", klogRef(u), "stack", stackName, "changes", res.Changes)
	if err := w.removeFinalizer(ctx, u); err != nil {
		return err
	}
	w.destroyed.Store(key, u.GetUID())
	return nil
}

// reportRecovered logs, and records as a Warning Event, the pending operations of a killed
// update that the operation in res found and resolved before it ran.
func (w *Watcher) reportRecovered(u *unstructured.Unstructured, stackName string, res stack.Result) {
	if len(res.Recovered) == 0 {
		return
	}
	w.log.Warn("resolved pending operations of an interrupted update", "object", klogRef(u), "stack", stackName, "operations", res.Recovered)
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonPendingOperationsResolved,
		"stack %s had pending operations of an interrupted update: %s", stackName, strings.Join(res.Recovered, "; "))
}

func failureReason(err error) string {
	switch {
	case errors.Is(err, stack.ErrLocked):
		return ReasonUpdateConflict
	case errors.Is(err, stack.ErrPluginMissing):
		return ReasonPluginMissing
	case errors.Is(err, stack.ErrBackendUnavailable):
		return ReasonBackendUnavailable
	}
	return ReasonUpdateFailed
}

func lastUpdate(res stack.Result, err error) *api.UpdateStatus {
	u := &api.UpdateStatus{
		Kind:            res.Operation,
		Result:          "succeeded",
		StartTime:       metav1.NewTime(res.Start.Truncate(time.Second)),
		EndTime:         metav1.NewTime(res.End.Truncate(time.Second)),
		ResourceChanges: res.Changes,
	}
	if err != nil {
		u.Result = "failed"
		u.Message = err.Error()
	}
	return u
}

func outputs(o map[string]string) *api.Outputs {
	return &api.Outputs{
		ConfigMapName:  o[infra.OutputConfigMapName],
		DeploymentName: o[infra.OutputDeploymentName],
		ServiceName:    o[infra.OutputServiceName],
		ClusterIP:      o[infra.OutputClusterIP],
	}
}

func currentCondition(u *unstructured.Unstructured, typ string) *metav1.Condition {
	cr, err := api.FromUnstructured(u)
	if err != nil {
		// The object does not convert; read the conditions alone.
		var st api.KindCustomHttpStatus
		raw, _ := json.Marshal(u.Object["status"])
		if json.Unmarshal(raw, &st) != nil {
			return nil
		}
		return meta.FindStatusCondition(st.Conditions, typ)
	}
	return meta.FindStatusCondition(cr.Status.Conditions, typ)
}

func klogRef(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

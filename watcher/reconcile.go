package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/envsource"
	"github.com/pulumi-operator/pulumi-operator/internal/ownership"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// reconcile is the sync handler of one workqueue key, top-down: cache (gone: forget it) ->
// deep copy -> being deleted? reconcileDelete -> ensure finalizer -> validate (invalid: stall,
// no retry) -> envFrom digest (missing: fail, retried) -> suspended? -> plan -> apply (up),
// or with nothing to do only the readiness -> status. A returned error means "retry with
// backoff"; nil means done until the next event.
func (w *Watcher) reconcile(ctx context.Context, key cache.ObjectName) error {
	obj, err := w.lister.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		w.forget(key)
		return nil // deleted, and the finalizer already did its work
	}
	if err != nil {
		return fmt.Errorf("get %s from cache: %w", key, err)
	}
	w.metrics.track(key)
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
	env, err := envsource.Digest(ctx, w.kube, d, envsource.Options{ReadSecret: w.readsSecrets})
	if err != nil {
		return w.fail(ctx, u, ReasonEnvSourceMissing, err)
	}
	d.EnvDigest = env.Digest
	if cr.Spec.Suspend {
		return w.updateStatus(ctx, u, cr.Generation, func(st *api.KindCustomHttpStatus) {
			setCondition(st, cr.Generation, ConditionReconciling, metav1.ConditionFalse, ReasonSuspended,
				"spec.suspend is true: no up and no drift repair until it is false")
		})
	}
	p := w.plan(ctx, cr, d, stackName)
	if !p.run {
		return w.updateReadiness(ctx, u, d)
	}
	if err := ownership.Check(ctx, w.kube, d); err != nil {
		// An up would take over objects somebody else made (the provider upserts): never.
		return w.fail(ctx, u, ReasonObjectConflict, err)
	}
	if len(env.Unread) > 0 {
		// Once per up, not per reconcile: what the user must know before the pods roll.
		w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonEnvSourceNotWatched,
			"%s: the operator may not read it (its namespace is not in --secret-namespaces), so a change of its data does not roll the pods; the pods still receive it. To roll on change, grant the operator read access in %s (README \"Security\")",
			strings.Join(env.Unread, ", "), u.GetNamespace())
	}
	return w.apply(ctx, u, cr, d, stackName, p)
}

// forget drops everything the watcher keeps per object once the object is gone: its metrics
// (stacks_managed, stacks_failing, its condition series), what it last applied, the reconcile
// request it last handled, its wait for the provider plugin and its destroyed mark. Without it
// every deleted object stayed in the gauges and the maps for the life of the process.
func (w *Watcher) forget(key cache.ObjectName) {
	w.metrics.forget(key)
	w.applied.Delete(key)
	w.destroyed.Delete(key)
	w.stackGone.Delete(key)
	w.requests.forget(key)
	w.pluginWait.remove(key)
}

// fail reports a retryable problem found before any Pulumi run (status and a Warning Event)
// and returns it, so the object is retried with backoff.
func (w *Watcher) fail(ctx context.Context, u *unstructured.Unstructured, reason string, cause error) error {
	gen := u.GetGeneration()
	if c := currentCondition(u, ConditionReady); c == nil || c.Reason != reason || c.Message != cause.Error() {
		w.recorder.Event(u, corev1.EventTypeWarning, reason, cause.Error())
	}
	w.metrics.setFailing(cache.MetaObjectToName(u), true)
	if err := w.updateStatus(ctx, u, gen, func(st *api.KindCustomHttpStatus) { markFailed(st, gen, reason, cause.Error()) }); err != nil {
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
	return w.updateStatus(ctx, u, gen, func(st *api.KindCustomHttpStatus) {
		markStalled(st, gen, ReasonInvalidSpec, cause.Error())
	})
}

// apply runs up and records the result in status, Events and metrics.
func (w *Watcher) apply(ctx context.Context, u *unstructured.Unstructured, cr *api.KindCustomHttp, d api.Desired, stackName string, p plan) error {
	gen := cr.Generation
	log := w.log.With("object", objectRef(u), "stack", stackName, "generation", gen)
	log.Info("running up", "why", p.why, "refresh", p.refresh, "drift", p.drift)
	if len(p.drift) > 0 {
		w.recorder.Eventf(u, corev1.EventTypeNormal, ReasonDriftDetected, "changed outside Pulumi, repairing: %v", p.drift)
	}
	// A retry keeps the failure it retries visible (Ready False, Reconciling True "Retrying")
	// instead of flipping status to Progressing and back on every attempt.
	if !retrying(cr) {
		if err := w.updateStatus(ctx, u, gen, func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			markReconciling(st, gen, "pulumi up of stack "+stackName+" is running")
		}); err != nil {
			return err
		}
	}
	key := cache.MetaObjectToName(u)
	w.applied.Delete(key)
	opCtx, cancel := context.WithTimeout(ctx, w.opts.OperationTimeout)
	res, upErr := w.stacks.Up(opCtx, d, stack.RunOptions{Refresh: p.refresh})
	upErr = w.timedOut(ctx, opCtx, "up", stackName, upErr)
	cancel()
	w.reportRecovered(u, stackName, res)
	w.metrics.observeOperation("up", upErr, res)
	w.metrics.setFailing(key, upErr != nil)
	w.metrics.setLocked(key, false)
	if upErr != nil {
		reason, msg := w.failed(ctx, u, stackName, upErr, ReasonUpdateFailed)
		if err := w.updateStatus(ctx, u, gen, func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			st.LastUpdate = lastUpdate(res, upErr)
			if p.requested != "" {
				// Echoed on failure too (as Flux does), so that `reconcile --wait` learns
				// the outcome of its request from the request's own token.
				st.LastHandledReconcileAt = p.requested
			}
			markFailed(st, gen, reason, msg)
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
	h := w.owned.readiness(ctx, d, true)
	err := w.updateStatus(ctx, u, gen, func(st *api.KindCustomHttpStatus) {
		st.Stack = w.stacks.QualifiedName(stackName)
		st.LastUpdate = lastUpdate(res, nil)
		st.AppliedDigest = p.digest
		st.Outputs = outputs(res.Outputs)
		if p.requested != "" {
			st.LastHandledReconcileAt = p.requested
		}
		setReadiness(st, gen, h)
	})
	return rolloutResult(h, err)
}

// updateReadiness refreshes the replica counts and Ready from the Deployment, without Pulumi.
func (w *Watcher) updateReadiness(ctx context.Context, u *unstructured.Unstructured, d api.Desired) error {
	h := w.owned.readiness(ctx, d, false)
	err := w.updateStatus(ctx, u, u.GetGeneration(), func(st *api.KindCustomHttpStatus) {
		setReadiness(st, u.GetGeneration(), h)
	})
	return rolloutResult(h, err)
}

// errRolloutInProgress is the result of a reconcile that left the stack up to date and the
// Deployment still rolling out: the worker looks again with backoff (1 s doubling to 5 min),
// without any Pulumi run, so that a reason only the pods show (an image that cannot be pulled)
// reaches status. The Deployment's own changes queue the object at once besides.
var errRolloutInProgress = errors.New("the Deployment is still rolling out")

// rolloutResult is a reconcile's result after its status write err: err itself when the write
// failed, errRolloutInProgress while h goes on, nil when it is done or the Deployment gave up
// (Stalled: its next change, or the spec's, queues the object).
func rolloutResult(h rollout.Health, err error) error {
	if err != nil || h.Done || h.Stalled {
		return err
	}
	return errRolloutInProgress
}

// reportRecovered logs, and records as a Warning Event, the pending operations of a killed
// update that the operation in res found and resolved before it ran.
func (w *Watcher) reportRecovered(u *unstructured.Unstructured, stackName string, res stack.Result) {
	if len(res.Recovered) == 0 {
		return
	}
	w.log.Warn("resolved pending operations of an interrupted update", "object", objectRef(u), "stack", stackName, "operations", res.Recovered)
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonPendingOperationsResolved,
		"stack %s had pending operations of an interrupted update: %s", stackName, strings.Join(res.Recovered, "; "))
}

// failed handles a failed up or destroy of u's stack stackName: a lock is removed when the
// rules of stalelock.go allow it, else reported as a wait (a StackLocked Event when its owner
// differs from the one status names, pulumi_operator_stacks_locked); any other failure gets a
// Warning Event with its reason (fallback, ReasonUpdateFailed or ReasonDestroyFailed, when no
// sentinel names it). It returns the reason and message for status.
func (w *Watcher) failed(ctx context.Context, u *unstructured.Unstructured, stackName string, err error, fallback string) (string, string) {
	reason := failureReason(err)
	if reason == ReasonUpdateFailed {
		reason = fallback
	}
	if reason != ReasonUpdateConflict {
		w.recorder.Event(u, corev1.EventTypeWarning, reason, err.Error())
		return reason, err.Error()
	}
	if removable, cerr := w.clearStaleLock(ctx, u, stackName, err); removable {
		if cerr != nil {
			return reason, fmt.Sprintf("%v (its owner can no longer write, but removing the lock failed: %v; retrying)", err, cerr)
		}
		return reason, err.Error() + " (its owner can no longer write: the lock was removed; retrying)"
	}
	msg := lockWait(stackName, err)
	if c := currentCondition(u, ConditionReady); c == nil || c.Message != clipMessage(msg) {
		w.recorder.Event(u, corev1.EventTypeWarning, ReasonStackLocked, msg)
	}
	w.metrics.setLocked(cache.MetaObjectToName(u), true)
	return reason, msg
}

// errTimedOut marks an operation cancelled because it ran longer than Options.OperationTimeout.
var errTimedOut = errors.New("operation timed out")

// timedOut is err of an operation on stackName that ran on opCtx, derived from ctx: when err
// came because opCtx's deadline passed (and not because ctx ended: a shutdown), an error that
// says so and wraps errTimedOut; else err itself.
func (w *Watcher) timedOut(ctx, opCtx context.Context, op, stackName string, err error) error {
	if err == nil || !errors.Is(opCtx.Err(), context.DeadlineExceeded) || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: pulumi %s of stack %s ran longer than %s (--operation-timeout) and was cancelled: %w",
		errTimedOut, op, stackName, w.opts.OperationTimeout, err)
}

// failureReason is the condition reason of a failed up: one per sentinel of package stack,
// ReasonTimedOut for an up past its deadline, ReasonUpdateFailed for anything else.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errTimedOut):
		return ReasonTimedOut
	case errors.Is(err, stack.ErrLocked):
		return ReasonUpdateConflict
	case errors.Is(err, stack.ErrLocked):
		return ReasonUpdateConflict
	case errors.Is(err, stack.ErrPluginMissing):
		return ReasonPluginMissing
	case errors.Is(err, stack.ErrBackendUnavailable):
		return ReasonBackendUnavailable
	}
	return ReasonUpdateFailed
}

// lastUpdate is status.lastUpdate for the operation in res (times truncated to seconds);
// err, when not nil, makes it "failed" with err's message.
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

// outputs picks the stack outputs status publishes (infra.Output* names).
func outputs(o map[string]string) *api.Outputs {
	return &api.Outputs{
		ConfigMapName:  o[infra.OutputConfigMapName],
		DeploymentName: o[infra.OutputDeploymentName],
		ServiceName:    o[infra.OutputServiceName],
		ClusterIP:      o[infra.OutputClusterIP],
	}
}

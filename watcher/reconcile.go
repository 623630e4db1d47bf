package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/ownership"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// reconcile is the sync handler of one workqueue key, top-down: cache (gone: forget it) ->
// deep copy, converted once to the typed object -> being deleted? reconcileDelete -> ensure
// finalizer -> resolve (invalid: stall, no retry; envFrom source missing: fail, retried) ->
// suspended? -> plan -> apply (up), or with nothing to do only the readiness. An object that may
// take over the original operator's objects has them taken over before its up and handed over
// after it (handover.go). The status changes each step makes are written once, when the
// reconcile ends (finalizeStatus); each outcome echoes the reconcile request's token
// (status.lastHandledReconcileAt), so that `pulumi-operator reconcile --wait` learns it. A
// returned error means "retry with backoff"; nil means done until the next event.
func (w *Watcher) reconcile(ctx context.Context, key cache.ObjectName) error {
	return w.reconcileFrom(ctx, key, false)
}

// reconcileFrom is reconcile of key taken from the queue's fast lane when fast is set: such a
// reconcile runs no up (queue.go); one that finds an up to run queues key in the slow lane.
func (w *Watcher) reconcileFrom(ctx context.Context, key cache.ObjectName, fast bool) (err error) {
	obj, err := w.lister.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		w.forget(key)
		return nil // deleted, and the finalizer already did its work
	}
	if err != nil {
		return fmt.Errorf("get %s from cache: %w", key, err)
	}
	w.metrics.track(key)
	o := w.object(key, obj.(*unstructured.Unstructured).DeepCopy())
	defer func() { err = w.finalizeStatus(ctx, o, err) }()
	u := o.u
	if u.GetDeletionTimestamp() != nil {
		return w.reconcileDelete(ctx, o)
	}
	if o.u, err = w.ensureFinalizer(ctx, u); err != nil {
		return err
	}
	u = o.u
	refs := w.judgeReferences(ctx, o)
	r, stackName, err := w.desired(ctx, o)
	var invalid *api.InvalidSpecError
	var change mustChange
	switch {
	case errors.As(err, &invalid) || errors.As(err, &change):
		return w.stall(o, api.ReasonInvalidSpec, err)
	case err != nil:
		return w.fail(o, api.ReasonEnvSourceMissing, err)
	}
	cr, d := o.cr, r.Desired
	if err := w.serviceTypeAllowed(cr); err != nil {
		return w.stall(o, api.ReasonServiceTypeNotAllowed, err)
	}
	if cr.Spec.Suspend {
		w.suspended(o, w.digest(d, stackName))
		return nil
	}
	p := w.plan(ctx, cr, d, stackName)
	if p.why != ReasonProgramUpgraded {
		w.upgrades.forget(key)
		w.metrics.setOutdated(key, false)
	}
	if !p.run {
		if err := w.handOver(ctx, o, d); err != nil {
			return err
		}
		return w.updateReadiness(ctx, o, d)
	}
	if err := w.withinStateBudget(d); err != nil {
		return w.stall(o, api.ReasonStateBudgetExceeded, err)
	}
	if fast {
		w.queue.Add(key) // pushed to the slow lane once this worker is done with key
		return nil
	}
	if p.why == ReasonProgramUpgraded {
		w.metrics.setOutdated(key, true)
		if !w.upgrades.admit(key) {
			// Its turn comes at the program-upgrade pace (programUpgrades.run queues it then);
			// meanwhile the object is reported as it runs.
			return w.updateReadiness(ctx, o, d)
		}
		defer w.upgrades.done()
	}
	if wait := w.refreshWait(key, p); wait > 0 {
		// Drift repair or a requested refresh, too soon after the last: looked at again then.
		w.queue.AddAfter(key, wait)
		return nil
	}
	if !w.nsUps.acquire(key, w.opts.MaxUpsPerNamespace) {
		// The namespace has its share of workers: parked, before any API request, until one of
		// its ups ends (then queued again), so that a namespace with a backlog costs the
		// others neither workers nor the client's rate limit.
		return nil
	}
	defer func() {
		for _, k := range w.nsUps.release(key.Namespace) {
			w.queue.Add(k)
		}
	}()
	if reason, err := w.mayRollOut(ctx, o, refs); err != nil {
		return w.fail(o, reason, err)
	}
	if err := w.volumeHasRoom(d); err != nil {
		return w.fail(o, api.ReasonStateVolumeFull, err)
	}
	if w.adoptsOriginal(u.GetAnnotations()) {
		if err := w.takeOverOriginal(ctx, o, d); err != nil {
			return w.fail(o, api.ReasonAdoptionFailed, err)
		}
	}
	if err := ownership.Check(ctx, w.kube, d); err != nil {
		// An up would take over objects somebody else made (the provider upserts): never.
		return w.fail(o, api.ReasonObjectConflict, err)
	}
	if len(r.Unread) > 0 {
		// Once per up, not per reconcile: what the user must know before the pods roll.
		w.recorder.Eventf(u, corev1.EventTypeWarning, api.ReasonEnvSourceNotWatched,
			"%s: the operator may not read it (its namespace is not in --secret-namespaces), so a change of its data does not roll the pods; the pods still receive it. To roll on change, grant the operator read access in %s (README \"Security\")",
			strings.Join(r.Unread, ", "), u.GetNamespace())
	}
	if err := w.apply(ctx, o, d, stackName, p); err != nil {
		return err
	}
	return w.handOver(ctx, o, d)
}

// handOver runs the rest of a handover from the original operator's objects when the object
// may adopt them (continueHandover), and queues the object again for its next step.
func (w *Watcher) handOver(ctx context.Context, o *object, d api.Desired) error {
	if !w.adoptsOriginal(o.u.GetAnnotations()) {
		return nil
	}
	wait, err := w.continueHandover(ctx, o, d)
	if err != nil {
		return w.fail(o, api.ReasonAdoptionFailed, err)
	}
	w.requeueHandover(cache.MetaObjectToName(o.u), wait)
	return nil
}

// forget drops everything the watcher keeps per object once the object is gone: its metrics
// (stacks_managed, stacks_failing, its condition series), what it last applied, the reconcile
// request it last handled, its wait for the provider plugin, its destroyed mark, its delete's
// wait for the destroyed objects, its typed form, its last drift check and the Deployment its
// readiness last read, so that no deleted object stays in the gauges and the maps for the life
// of the process.
func (w *Watcher) forget(key cache.ObjectName) {
	w.metrics.forget(key)
	w.objects.forget(key)
	w.upgrades.forget(key)
	w.pluginWait.remove(key)
	w.owned.forget(key)
}

// fail reports a retryable problem found before any Pulumi run (status and a Warning Event)
// and returns it, so the object is retried with backoff. The reconcile request, if any, is
// echoed: this failure is its outcome.
func (w *Watcher) fail(o *object, reason string, cause error) error {
	if c := currentCondition(o.u, api.ConditionReady); c == nil || c.Reason != reason || c.Message != cause.Error() {
		w.recorder.Event(o.u, corev1.EventTypeWarning, reason, cause.Error())
	}
	w.metrics.setFailing(cache.MetaObjectToName(o.u), true)
	o.echoRequest()
	o.setStatus(func(st *api.KindCustomHttpStatus) { markFailed(st, o.gen, reason, cause.Error()) })
	return cause
}

// suspended reports a suspended object: Reconciling False, reason Suspended, at o's
// generation; Ready stays as it is, at the generation it describes. status.observedGeneration
// moves to o's generation only when digest, what this generation declares, is what the stack
// holds (status.appliedDigest): a spec changed while suspended was never applied, and kstatus,
// Flux and Argo CD take observedGeneration as the generation the status describes. The
// reconcile request, if any, is echoed: nothing runs for it (`reconcile --wait` says so).
func (w *Watcher) suspended(o *object, digest string) {
	o.holdGeneration = o.cr.Status.AppliedDigest != digest
	o.echoRequest()
	o.setStatus(func(st *api.KindCustomHttpStatus) {
		setCondition(st, o.gen, api.ConditionReconciling, metav1.ConditionFalse, api.ReasonSuspended,
			"spec.suspend is true: no up and no drift repair until it is false")
	})
}

// mustChange marks an error that, like an invalid spec, only a change of the object mends: an
// object that does not convert to a KindCustomHttp, a stack name that cannot be made for it. Its
// text is its cause's.
type mustChange struct{ error }

func (e mustChange) Unwrap() error { return e.error }

// desired resolves o's typed object (desired.Resolve, the resolver the commands and the
// plain-CLI program use too): what the program applies, and its stack's name. Errors: an
// *api.InvalidSpecError or a mustChange when the object must change (one that does not
// convert included); otherwise the envFrom sources could not be read.
func (w *Watcher) desired(ctx context.Context, o *object) (desired.Resolved, string, error) {
	if o.convErr != nil {
		return desired.Resolved{}, "", mustChange{o.convErr}
	}
	r, err := desired.Resolve(ctx, o.cr, w.cluster, desired.Options{ReadSecret: w.readsSecrets, Key: w.opts.EnvDigestKey})
	if err != nil {
		return desired.Resolved{}, "", err
	}
	name, err := w.stacks.StackName(o.cr.Namespace, o.cr.Name)
	if err != nil {
		return desired.Resolved{}, "", mustChange{err}
	}
	return r, name, nil
}

// cluster is the client desired.Resolve reads envFrom sources with: the watcher's own.
func (w *Watcher) cluster() (kubeclient.Interface, error) { return w.kube, nil }

// stall reports a spec the operator will not reconcile (api.ReasonInvalidSpec, or
// api.ReasonServiceTypeNotAllowed) once (status and a Warning Event with reason) and does not
// retry: the object's next change enqueues it again. The reconcile request, if any, is echoed.
func (w *Watcher) stall(o *object, reason string, cause error) error {
	if c := currentCondition(o.u, api.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != o.gen || c.Message != cause.Error() {
		w.recorder.Event(o.u, corev1.EventTypeWarning, reason, cause.Error())
	}
	w.metrics.setFailing(cache.MetaObjectToName(o.u), true)
	o.echoRequest()
	o.setStatus(func(st *api.KindCustomHttpStatus) {
		markStalled(st, o.gen, reason, cause.Error())
	})
	return nil
}

// apply runs up and records the result in status, Events and metrics. Before the up it writes
// the status it has so far with Progressing (flushStatus): an up takes seconds to minutes, and
// `kubectl get` should show it running.
func (w *Watcher) apply(ctx context.Context, o *object, d api.Desired, stackName string, p plan) error {
	u, cr, gen := o.u, o.cr, o.gen
	log := w.log.With("object", objectRef(u), "stack", stackName, "generation", gen)
	log.Info("running up", "why", p.why, "refresh", p.refresh, "drift", p.drift)
	if len(p.drift) > 0 {
		w.recorder.Eventf(u, corev1.EventTypeNormal, ReasonDriftDetected, "changed outside Pulumi, repairing: %v", p.drift)
	}
	// A retry keeps the failure it retries visible (Ready False, Reconciling True "Retrying")
	// instead of flipping status to Progressing and back on every attempt.
	if !retrying(cr) {
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			markReconciling(st, gen, "pulumi up of stack "+stackName+" is running")
		})
		if err := w.flushStatus(ctx, o); err != nil {
			return err
		}
	}
	key := cache.MetaObjectToName(u)
	w.objects.update(key, func(s *objectState) {
		s.applied = applied{}
		if p.paced() {
			s.lastRefresh = time.Now()
		}
	})
	opCtx, cancel := context.WithTimeout(ctx, w.opts.OperationTimeout)
	// Under a state budget the stack keeps as many updates as fit (Options.StateBudget).
	keep := infra.HistoryWithin(w.opts.StateBudget, infra.EstimateStateBytes(d))
	res, upErr := w.stacks.Up(opCtx, d, infra.Adopt{}, stack.RunOptions{Refresh: p.refresh, KeepHistory: keep, Background: p.background()})
	upErr = w.timedOut(ctx, opCtx, "up", stackName, upErr)
	cancel()
	w.reportRecovered(u, stackName, res)
	w.metrics.observeOperation("up", upErr, res)
	w.metrics.setFailing(key, upErr != nil)
	w.metrics.setLocked(key, false)
	if upErr != nil {
		reason, msg := w.failed(ctx, u, stackName, upErr, api.ReasonUpdateFailed)
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			st.LastUpdate = lastUpdate(res, upErr)
			if p.requested != "" {
				// Echoed on failure too (as Flux does), so that `reconcile --wait` learns
				// the outcome of its request from the request's own token.
				st.LastHandledReconcileAt = p.requested
			}
			markFailed(st, gen, reason, msg)
		})
		return upErr
	}
	if res.Changed() || p.why != ReasonUpdated {
		w.recorder.Eventf(u, corev1.EventTypeNormal, p.why, "pulumi up of stack %s: %v", stackName, res.Changes)
	}
	log.Info("stack up to date", "changes", res.Changes, "seconds", res.End.Sub(res.Start).Seconds())
	if w.interrupted(stackName) {
		w.resumed.Store(stackName, true) // whatever the up's reason, it met and cleared the lock left on it
	}
	if p.why == ReasonRepaired {
		w.checkRepaired(ctx, u, log, p.digest, d)
	}
	// Remember what was applied: the informer may hand out this object without the status
	// written below for a while, and that must not start a second up.
	w.objects.update(key, func(s *objectState) {
		s.applied = applied{cr.UID, gen, p.digest}
		if p.requested != "" {
			s.handledRequest = p.requested
		}
	})
	w.metrics.setOutdated(key, false)
	h := w.owned.readiness(ctx, d, true)
	o.setStatus(func(st *api.KindCustomHttpStatus) {
		st.Stack = w.stacks.QualifiedName(stackName)
		st.LastUpdate = lastUpdate(res, nil)
		st.AppliedDigest = p.digest
		st.AppliedProgramVersion = infra.ProgramVersion
		st.Outputs = outputs(res.Outputs)
		if p.requested != "" {
			st.LastHandledReconcileAt = p.requested
		}
		setReadiness(st, gen, h)
	})
	return rolloutResult(h)
}

// checkRepaired looks at the owned objects again after the up that was to repair their drift
// and, when they still differ from d, says so: a Warning Event and a log line naming what
// differs. A server-side apply leaves a field that another manager applied server-side
// (another pulumi-kubernetes manager, a controller that applies), so some drift no up repairs
// (a plain update's fields, kubectl edit's, pulumi-kubernetes takes over), and the object
// would be Ready while the repair repeats at the refresh pace with nothing said. drift confirms
// a difference with a live read, so a cache that lags behind the up is no false alarm.
func (w *Watcher) checkRepaired(ctx context.Context, u *unstructured.Unstructured, log *slog.Logger, digest string, d api.Desired) {
	left := w.owned.drift(ctx, digest, d)
	if len(left) == 0 {
		return
	}
	log.Warn("drift left after the repair", "drift", left)
	w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonDriftNotRepaired,
		"still differs after pulumi up --refresh: %v; a field another field manager applied (metadata.managedFields) stays: remove it, or the manager that applies it", left)
}

// updateReadiness refreshes the replica counts and Ready from the Deployment, without Pulumi.
// It runs when plan found nothing to do, so the reconcile request, if any, was handled before
// (status or Watcher.requests show it): it is echoed, in case that status write was lost.
func (w *Watcher) updateReadiness(ctx context.Context, o *object, d api.Desired) error {
	h := w.owned.readiness(ctx, d, false)
	o.echoRequest()
	o.setStatus(func(st *api.KindCustomHttpStatus) { setReadiness(st, o.gen, h) })
	return rolloutResult(h)
}

// refreshWait is how long key's up p must wait: the rest of MinRefreshInterval since its last
// paced up (plan.paced: a drift repair or a reconcile request, what a tenant can repeat at
// will), when p is one; 0 otherwise: a spec or program to apply (with a refresh on a first up or
// a retry) and the resumption of an operation the change of leader cut short, which no tenant
// can cause.
func (w *Watcher) refreshWait(key cache.ObjectName, p plan) time.Duration {
	if !p.paced() || w.opts.MinRefreshInterval < 0 {
		return 0
	}
	last := w.objects.get(key).lastRefresh
	if last.IsZero() {
		return 0
	}
	return w.opts.MinRefreshInterval - time.Since(last)
}

package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// Event reasons besides the condition reasons (api/v1 conditions.go).
const (
	// ReasonCreated: the first up of a stack (Normal).
	ReasonCreated = "Created"
	// ReasonUpdated: an up after a spec change (Normal).
	ReasonUpdated = "Updated"
	// ReasonDriftDetected: an owned object differs from what the stack applied (Normal).
	ReasonDriftDetected = "DriftDetected"
	// ReasonRepaired: the up that undid drift (Normal).
	ReasonRepaired = "Repaired"
	// ReasonDriftNotRepaired: the owned objects still differ from the spec after the up that
	// was to repair them (Warning; the next repair comes at --min-refresh-interval at the
	// earliest): a field another field manager applied stays, whatever the up applies.
	ReasonDriftNotRepaired = "DriftNotRepaired"
	// ReasonRequested: the up asked for by the reconcile-request annotation (Normal).
	ReasonRequested = "ReconcileRequested"
	// ReasonResumed: an up with refresh of a stack whose operation a change of leader cut short
	// (an earlier leader's lock was on it when this replica took the Lease), run even though
	// status says the object is up to date: it clears that lock and whatever the cut-short
	// operation left undone (Normal).
	ReasonResumed = "Resumed"
	// ReasonDestroyed: the stack was destroyed and removed (Normal).
	ReasonDestroyed = "Destroyed"
	// ReasonPendingOperationsResolved: the stack held pending operations of an update that
	// was killed (the operator or its pulumi process died mid-update); they were resolved
	// before the next operation: objects it had created adopted into the state (Warning).
	ReasonPendingOperationsResolved = "PendingOperationsResolved"
	// ReasonStaleLockCleared: a lock whose owner is gone was removed (Warning).
	ReasonStaleLockCleared = "StaleLockCleared"
	// ReasonStackLocked: an operation waits for a lock held by something else (a laptop, CI,
	// another operator), which is never removed by age alone (Warning, once per owner).
	ReasonStackLocked = "StackLocked"
)

// setReadiness records an up-to-date stack by its Deployment's rollout h: Ready when every
// replica is available; a rollout the Deployment gave up on (ProgressDeadlineExceeded) is
// Stalled, with the Deployment's reason; any other is Ready False with the most specific reason
// the Deployment and its pods give (ImagePullBackOff, FailedCreate, ..., else
// ReplicasUnavailable) and Reconciling True while it goes on.
func setReadiness(st *api.KindCustomHttpStatus, gen int64, h rollout.Health) {
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas = h.Desired, h.Ready, h.Available
	switch {
	case h.Done:
		markReady(st, gen, "stack up to date, "+h.Message)
	case h.Stalled:
		setCondition(st, gen, api.ConditionReady, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, api.ConditionReconciling, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, api.ConditionStalled, metav1.ConditionTrue, h.Reason, h.Message)
	default:
		setCondition(st, gen, api.ConditionReady, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, api.ConditionReconciling, metav1.ConditionTrue, h.Reason, h.Message)
		setCondition(st, gen, api.ConditionStalled, metav1.ConditionFalse, h.Reason, h.Message)
	}
}

// maxConditionMessage is metav1.Condition's limit on message, in bytes (its
// +kubebuilder:validation:MaxLength=32768, which the generated CRD enforces): a longer message
// makes the apiserver reject the whole status write.
const maxConditionMessage = 32768

// clipMessage cuts msg to maxConditionMessage bytes at a rune boundary, marking the cut, so
// that an error message echoing a long user input (an invalid configMapData key, say) still
// reaches status.
func clipMessage(msg string) string {
	const mark = " [...]"
	if len(msg) <= maxConditionMessage {
		return msg
	}
	cut := maxConditionMessage - len(mark)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + mark
}

// setCondition sets one condition on st through apimachinery's helper, which keeps
// lastTransitionTime unless the status flips. The message is clipped to what the CRD allows.
func setCondition(st *api.KindCustomHttpStatus, generation int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            clipMessage(msg),
		ObservedGeneration: generation,
	})
}

// markReady: the stack is up to date.
func markReady(st *api.KindCustomHttpStatus, gen int64, msg string) {
	setCondition(st, gen, api.ConditionReady, metav1.ConditionTrue, api.ReasonSucceeded, msg)
	setCondition(st, gen, api.ConditionReconciling, metav1.ConditionFalse, api.ReasonSucceeded, msg)
	setCondition(st, gen, api.ConditionStalled, metav1.ConditionFalse, api.ReasonSucceeded, msg)
}

// markReconciling: work toward generation gen has started.
func markReconciling(st *api.KindCustomHttpStatus, gen int64, msg string) {
	setCondition(st, gen, api.ConditionReady, metav1.ConditionUnknown, api.ReasonProgressing, msg)
	setCondition(st, gen, api.ConditionReconciling, metav1.ConditionTrue, api.ReasonProgressing, msg)
	setCondition(st, gen, api.ConditionStalled, metav1.ConditionFalse, api.ReasonProgressing, msg)
}

// markFailed: a retryable failure with the given reason.
func markFailed(st *api.KindCustomHttpStatus, gen int64, reason, msg string) {
	setCondition(st, gen, api.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, api.ConditionReconciling, metav1.ConditionTrue, api.ReasonRetrying, "retrying with backoff: "+msg)
	setCondition(st, gen, api.ConditionStalled, metav1.ConditionFalse, reason, msg)
}

// markStalled: nothing happens until the spec changes.
func markStalled(st *api.KindCustomHttpStatus, gen int64, reason, msg string) {
	setCondition(st, gen, api.ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, api.ConditionReconciling, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, api.ConditionStalled, metav1.ConditionTrue, reason, msg)
}

// statusWriteTimeout bounds one status write, its conflict retries included.
const statusWriteTimeout = 10 * time.Second

// object is the KindCustomHttp one reconcile works on: the informer's copy, deep-copied (u: what
// Events, the finalizer's updates and the status write name), its typed form, converted once
// when the reconcile takes it from the cache (cr; nil with convErr when it does not convert:
// only a Stalled status is then written), the generation it acts on, and the status changes
// the reconcile makes. Those are written once, when the reconcile ends (finalizeStatus), as
// kustomize-controller's deferred finalizeStatus does; flushStatus writes them earlier only
// before a long Pulumi run.
type object struct {
	u       *unstructured.Unstructured
	cr      *api.KindCustomHttp
	convErr error
	gen     int64
	// requested is the reconcile-request annotation's value on the copy the reconcile took, ""
	// without one: the token an outcome echoes (echoRequest).
	requested string
	// holdGeneration keeps status.observedGeneration as stored instead of gen: the reconcile
	// applied nothing of gen and found it different from what the stack holds (suspended).
	holdGeneration bool
	changes        []func(*api.KindCustomHttpStatus)
}

// newObject converts u, the reconcile's deep copy of the informer's object, once.
func newObject(u *unstructured.Unstructured) *object {
	o := &object{u: u, gen: u.GetGeneration(), requested: requestToken(u)}
	o.cr, o.convErr = api.FromUnstructured(u)
	return o
}

// requestToken is u's reconcile-request annotation (api.ReconcileRequestAnnotation), "" without.
func requestToken(u *unstructured.Unstructured) string {
	return u.GetAnnotations()[api.ReconcileRequestAnnotation]
}

// echoRequest records the reconcile request's token, when there is one, in
// status.lastHandledReconcileAt: the outcome this reconcile writes is the request's, and
// `pulumi-operator reconcile --wait` waits for that token, whether the outcome is Ready, a
// failure or a suspended object.
func (o *object) echoRequest() {
	if t := o.requested; t != "" {
		o.setStatus(func(st *api.KindCustomHttpStatus) { st.LastHandledReconcileAt = t })
	}
}

// conversion is an object's typed form (or why it has none) at one UID and resourceVersion.
// The apiserver gives every write a new resourceVersion, so at the same UID and
// resourceVersion the object, and what it converts to, are the same.
type conversion struct {
	uid             types.UID
	resourceVersion string
	cr              *api.KindCustomHttp
	err             error
}

// object is newObject with the typed form taken from objectState.converted when u is the version last
// converted: the typed form is then shared between reconciles, which only read it. A resync
// of an unchanged object (most reconciles) thus converts nothing: the conversion, a JSON round
// trip for its field-naming errors, is the dearest part of an idle reconcile
// (BenchmarkIdleReconcile). The memory is one typed object per KindCustomHttp; forget drops it.
func (w *Watcher) object(key cache.ObjectName, u *unstructured.Unstructured) *object {
	if c := w.objects.get(key).converted; c.uid == u.GetUID() && c.resourceVersion == u.GetResourceVersion() && c.uid != "" {
		return &object{u: u, gen: u.GetGeneration(), requested: requestToken(u), cr: c.cr, convErr: c.err}
	}
	o := newObject(u)
	w.objects.update(key, func(s *objectState) {
		s.converted = conversion{uid: u.GetUID(), resourceVersion: u.GetResourceVersion(), cr: o.cr, err: o.convErr}
	})
	return o
}

// setStatus records a change of the object's status, made when the status is written. It must
// be safe to run again: a write that conflicts starts over from a fresh read.
func (o *object) setStatus(change func(*api.KindCustomHttpStatus)) {
	o.changes = append(o.changes, change)
}

// finalizeStatus is the reconcile's deferred last step: it writes the status changes o holds
// (flushStatus) and returns the reconcile's result. A write that fails is the result when the
// reconcile itself succeeded (so that the object is retried); when the reconcile failed its
// error stays the result and the write's is logged. An object gone meanwhile (its finalizer
// removed) has no status to write.
func (w *Watcher) finalizeStatus(ctx context.Context, o *object, err error) error {
	serr := w.flushStatus(ctx, o)
	switch {
	case serr == nil || apierrors.IsNotFound(serr):
		return err
	case err == nil || errors.Is(serr, fence.ErrFenced):
		return serr
	default:
		w.log.Error("write status failed", "object", objectRef(o.u), "err", serr)
		return err
	}
}

// flushStatus applies o's status changes to the object's status and writes it through the
// status subresource, only if it changed; o then holds no changes. It starts from o.u and, on a
// conflict, from a fresh read, so a write never loses another writer's change. On success o.u
// holds the stored object, so later writes build on it.
//
// status.observedGeneration is o.gen, the generation the reconcile acted on, never that of the
// fresh read: a spec changed while an up ran conflicts with this write, and reporting the new
// generation would tell `kubectl wait`, kstatus, Flux and Argo CD that a spec no up has applied
// is done. The newer generation is then reconciled next (its update queued the object). A
// reconcile that applied nothing of its generation (o.holdGeneration) leaves it as stored.
//
// The write does not end with ctx: the status after a cancelled Pulumi operation (shutdown
// past its grace) is the one that most needs writing, and with a cancelled ctx
// the request failed and retry.RetryOnConflict returned nil for it, so nothing was written or
// logged. It is bounded by statusWriteTimeout instead.
func (w *Watcher) flushStatus(ctx context.Context, o *object) error {
	if len(o.changes) == 0 {
		return nil
	}
	changes := o.changes
	o.changes = nil
	u, gen := o.u, o.gen
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusWriteTimeout)
	defer cancel()
	c := w.client.Namespace(u.GetNamespace())
	cur := u
	first := true
	var conditions []metav1.Condition // as written (or found unchanged), for the metrics
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		first = false
		// The stored status: the changes work on st, a copy; before stays as stored. They are
		// compared typed, and st is converted to unstructured only when it changed: most
		// reconciles (every resync of an object that is up to date) change nothing, and
		// conversions are the dearest part of finding so (BenchmarkIdleReconcile). Semantic
		// equality treats nil and empty alike, as the unstructured form (omitempty) does.
		var st, before api.KindCustomHttpStatus
		if o.cr != nil && o.cr.UID == cur.GetUID() && o.cr.ResourceVersion == cur.GetResourceVersion() {
			// The version the reconcile converted: its typed status, read only.
			before = o.cr.Status
		} else if raw, ok := cur.Object["status"].(map[string]any); ok {
			// A status this version cannot read (written by something else) is replaced.
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &before)
		}
		before.DeepCopyInto(&st)
		if !o.holdGeneration {
			st.ObservedGeneration = gen
		}
		for _, change := range changes {
			change(&st)
		}
		conditions = st.Conditions
		if equality.Semantic.DeepEqual(before, st) {
			return nil
		}
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		next.Object["status"] = raw
		// Checked right before each write, retries included: a replica that may no longer lead
		// must not overwrite the new leader's status (its Ready, its observedGeneration).
		if err := w.fence.Check(); err != nil {
			return err
		}
		out, err := c.UpdateStatus(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return err
		}
		cur = out
		return nil
	})
	if err != nil {
		return fmt.Errorf("write status of %s: %w", objectRef(u), err)
	}
	u.Object = cur.Object
	w.metrics.setConditions(cache.MetaObjectToName(cur), conditions)
	return nil
}

// currentCondition is the condition typ in u's stored status, nil when absent or unreadable.
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

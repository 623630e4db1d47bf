package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// Condition types, with kstatus meaning (sigs.k8s.io/cli-utils/pkg/kstatus): Ready is True
// when the stack is up to date with the current generation; Reconciling is True while work
// toward it is under way or being retried; Stalled is True when nothing will change until the
// user changes the spec.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// Condition reasons (CamelCase, as metav1.Condition requires).
const (
	// ReasonSucceeded: the last up of the current generation succeeded.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: an up or destroy is running.
	ReasonProgressing = "Progressing"
	// ReasonInvalidSpec: the spec breaks a rule; the message says which field and why.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonUpdateFailed: Pulumi failed; retried with backoff.
	ReasonUpdateFailed = "UpdateFailed"
	// ReasonUpdateConflict: another update holds the stack's lock; retried with backoff.
	ReasonUpdateConflict = "UpdateConflict"
	// ReasonPluginMissing: the Kubernetes provider plugin is not installed where the operator
	// runs; retried with backoff, so installing it is enough.
	ReasonPluginMissing = "PluginMissing"
	// ReasonBackendUnavailable: the Pulumi state backend could not be opened (down, wrong
	// credentials); nothing ran; retried with backoff. The message names the backend.
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonTimedOut: the up or destroy ran longer than Options.OperationTimeout and was
	// cancelled; retried with backoff.
	ReasonTimedOut = "TimedOut"
	// ReasonRetrying: Reconciling stays True while a failure is retried.
	ReasonRetrying = "Retrying"
	// ReasonDestroyFailed: deleting the objects failed; the finalizer stays until it succeeds.
	ReasonDestroyFailed = "DestroyFailed"
	// ReasonReplicasUnavailable: the stack is up to date but the Deployment has fewer
	// available pods than asked for, and neither it nor its pods say why. When they do, Ready
	// carries their reason instead: ProgressDeadlineExceeded (then Stalled), FailedCreate (a
	// quota), ImagePullBackOff, ErrImagePull, CrashLoopBackOff, CreateContainerConfigError,
	// Unschedulable, ... (internal/rollout).
	ReasonReplicasUnavailable = rollout.ReasonReplicasUnavailable
	// ReasonEnvSourceMissing: a ConfigMap or Secret named in spec.envFrom does not exist;
	// retried with backoff and at once when it appears.
	ReasonEnvSourceMissing = "EnvSourceMissing"
	// ReasonEnvSourceNotWatched (an Event, Warning): spec.envFrom names a Secret the operator
	// does not read (Options.SecretNamespaces): its data reaches the pods, but a change of it
	// does not roll them.
	ReasonEnvSourceNotWatched = "EnvSourceNotWatched"
	// ReasonObjectConflict: a Deployment, Service or ConfigMap of the object's names exists
	// that the operator did not make for it; nothing runs until it is gone (retried with
	// backoff). The message names it.
	ReasonObjectConflict = "ObjectConflict"
	// ReasonSuspended: spec.suspend is true.
	ReasonSuspended = "Suspended"
)

// Event reasons besides the condition reasons above.
const (
	// ReasonCreated: the first up of a stack (Normal).
	ReasonCreated = "Created"
	// ReasonUpdated: an up after a spec change (Normal).
	ReasonUpdated = "Updated"
	// ReasonDriftDetected: an owned object differs from what the stack applied (Normal).
	ReasonDriftDetected = "DriftDetected"
	// ReasonRepaired: the up that undid drift (Normal).
	ReasonRepaired = "Repaired"
	// ReasonRequested: the up asked for by the reconcile-request annotation (Normal).
	ReasonRequested = "ReconcileRequested"
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
		setCondition(st, gen, ConditionReady, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, ConditionReconciling, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, ConditionStalled, metav1.ConditionTrue, h.Reason, h.Message)
	default:
		setCondition(st, gen, ConditionReady, metav1.ConditionFalse, h.Reason, h.Message)
		setCondition(st, gen, ConditionReconciling, metav1.ConditionTrue, h.Reason, h.Message)
		setCondition(st, gen, ConditionStalled, metav1.ConditionFalse, h.Reason, h.Message)
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
	setCondition(st, gen, ConditionReady, metav1.ConditionTrue, ReasonSucceeded, msg)
	setCondition(st, gen, ConditionReconciling, metav1.ConditionFalse, ReasonSucceeded, msg)
	setCondition(st, gen, ConditionStalled, metav1.ConditionFalse, ReasonSucceeded, msg)
}

// markReconciling: work toward generation gen has started.
func markReconciling(st *api.KindCustomHttpStatus, gen int64, msg string) {
	setCondition(st, gen, ConditionReady, metav1.ConditionUnknown, ReasonProgressing, msg)
	setCondition(st, gen, ConditionReconciling, metav1.ConditionTrue, ReasonProgressing, msg)
	setCondition(st, gen, ConditionStalled, metav1.ConditionFalse, ReasonProgressing, msg)
}

// markFailed: a retryable failure with the given reason.
func markFailed(st *api.KindCustomHttpStatus, gen int64, reason, msg string) {
	setCondition(st, gen, ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, ConditionReconciling, metav1.ConditionTrue, ReasonRetrying, "retrying with backoff: "+msg)
	setCondition(st, gen, ConditionStalled, metav1.ConditionFalse, reason, msg)
}

// markStalled: nothing happens until the spec changes.
func markStalled(st *api.KindCustomHttpStatus, gen int64, reason, msg string) {
	setCondition(st, gen, ConditionReady, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, ConditionReconciling, metav1.ConditionFalse, reason, msg)
	setCondition(st, gen, ConditionStalled, metav1.ConditionTrue, reason, msg)
}

// statusWriteTimeout bounds one status write, its conflict retries included.
const statusWriteTimeout = 10 * time.Second

// updateStatus applies mutate to the object's status and writes it through the status
// subresource, only if it changed. It starts from u and, on a conflict, from a fresh read, so
// a write never loses another writer's change; mutate must therefore be safe to run again.
// On success u holds the stored object, so later writes build on it.
//
// status.observedGeneration is gen, the generation the reconcile acted on, never that of the
// fresh read: a spec changed while an up ran conflicts with this write, and reporting the new
// generation would tell `kubectl wait`, kstatus, Flux and Argo CD that a spec no up has applied
// is done. The newer generation is then reconciled next (its update queued the object).
//
// The write does not end with ctx: the status after a cancelled Pulumi operation (shutdown
// past its grace, a lost lease) is the one that most needs writing, and with a cancelled ctx
// the request failed and retry.RetryOnConflict returned nil for it, so nothing was written or
// logged. It is bounded by statusWriteTimeout instead.
func (w *Watcher) updateStatus(ctx context.Context, u *unstructured.Unstructured, gen int64, mutate func(*api.KindCustomHttpStatus)) error {
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
		var st api.KindCustomHttpStatus
		if raw, ok := cur.Object["status"].(map[string]any); ok {
			// A status this version cannot read (written by something else) is replaced.
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		}
		before, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		st.ObservedGeneration = gen
		mutate(&st)
		conditions = st.Conditions
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(before, raw) {
			return nil
		}
		next := cur.DeepCopy()
		next.Object["status"] = raw
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

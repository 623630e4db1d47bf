package watcher

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
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
	// ReasonRetrying: Reconciling stays True while a failure is retried.
	ReasonRetrying = "Retrying"
	// ReasonDestroyFailed: deleting the objects failed; the finalizer stays until it succeeds.
	ReasonDestroyFailed = "DestroyFailed"
	// ReasonReplicasUnavailable: the stack is up to date but the Deployment has fewer
	// available pods than asked for.
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonEnvSourceMissing: a ConfigMap or Secret named in spec.envFrom does not exist;
	// retried with backoff and at once when it appears.
	ReasonEnvSourceMissing = "EnvSourceMissing"
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
)

// replicaCounts are what status reports of the Deployment.
type replicaCounts struct{ desired, ready, available int32 }

// setReadiness records an up-to-date stack: Ready when the Deployment has every replica
// available, otherwise Ready False (ReplicasUnavailable) with Reconciling True while the
// Deployment catches up.
func setReadiness(st *api.KindCustomHttpStatus, gen int64, ready bool, msg string, c replicaCounts) {
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas = c.desired, c.ready, c.available
	if ready {
		markReady(st, gen, msg)
		return
	}
	setCondition(st, gen, ConditionReady, metav1.ConditionFalse, ReasonReplicasUnavailable, msg)
	setCondition(st, gen, ConditionReconciling, metav1.ConditionTrue, ReasonReplicasUnavailable, msg)
	setCondition(st, gen, ConditionStalled, metav1.ConditionFalse, ReasonReplicasUnavailable, msg)
}

// setCondition sets one condition on st through apimachinery's helper, which keeps
// lastTransitionTime unless the status flips.
func setCondition(st *api.KindCustomHttpStatus, generation int64, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            msg,
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

package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// errRolloutInProgress is the result of a reconcile that left the stack up to date and the
// Deployment still rolling out: the worker looks again with backoff (1 s doubling to 5 min),
// without any Pulumi run, so that a reason only the pods show (an image that cannot be pulled)
// reaches status. The Deployment's own changes queue the object at once besides.
var errRolloutInProgress = errors.New("the Deployment is still rolling out")

// rolloutResult is a reconcile's result for the rollout h: errRolloutInProgress while it goes
// on, nil when it is done or the Deployment gave up (Stalled: its next change, or the spec's,
// queues the object).
func rolloutResult(h rollout.Health) error {
	if h.Done || h.Stalled {
		return nil
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
// Warning Event with its reason (fallback, api.ReasonUpdateFailed or api.ReasonDestroyFailed, when no
// sentinel names it). It returns the reason and message for status.
func (w *Watcher) failed(ctx context.Context, u *unstructured.Unstructured, stackName string, err error, fallback string) (string, string) {
	reason := failureReason(err)
	if reason == api.ReasonUpdateFailed {
		reason = fallback
	}
	if reason != api.ReasonUpdateConflict {
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
	if c := currentCondition(u, api.ConditionReady); c == nil || c.Message != clipMessage(msg) {
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
// api.ReasonTimedOut for an up past its deadline, api.ReasonUpdateFailed for anything else.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errTimedOut):
		return api.ReasonTimedOut
	case errors.Is(err, stack.ErrLocked):
		return api.ReasonUpdateConflict
	case errors.Is(err, stack.ErrPluginMissing):
		return api.ReasonPluginMissing
	case errors.Is(err, stack.ErrBackendUnavailable):
		return api.ReasonBackendUnavailable
	case errors.Is(err, stack.ErrStackOfAnother):
		return api.ReasonObjectConflict
	}
	return api.ReasonUpdateFailed
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

// Package rollout judges the rollout of a KindCustomHttp's Deployment from the Deployment's
// status and its pods, and waits for it. The Deployment carries pulumi.com/skipAwait (package
// infra), so no `pulumi up` waits for its pods: the watcher reports the rollout in status
// without holding a worker (Assess), and the commands people run from a laptop wait as the
// Pulumi Kubernetes provider's await would (Wait): until every replica of the current template
// is available, the Deployment gives up (ProgressDeadlineExceeded), or a timeout passes.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// Reasons Assess gives besides those it passes on from Kubernetes (a Deployment condition's
// reason such as ProgressDeadlineExceeded or FailedCreate, a container's waiting reason such as
// ImagePullBackOff or CrashLoopBackOff, a pod's Unschedulable).
const (
	// ReasonReplicasUnavailable: the rollout is under way, with no sign of trouble.
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonDeploymentMissing: there is no Deployment (yet).
	ReasonDeploymentMissing = "DeploymentMissing"
	// ReasonProgressDeadlineExceeded is the Deployment controller's own reason for a rollout it
	// gave up on (Progressing False, after spec.progressDeadlineSeconds, 600 s by default).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// Health is what a Deployment's rollout says.
type Health struct {
	// Done: the Deployment has observed its current generation, and it has exactly Desired
	// replicas, all of the current pod template and all available: no old pod is left, as
	// `kubectl rollout status` requires.
	Done bool
	// Stalled: the Deployment controller gave up on the rollout (Progressing False with reason
	// ProgressDeadlineExceeded); nothing changes until its cause goes or the spec changes.
	Stalled bool
	// Reason is CamelCase, fit for a condition: ReasonReplicasUnavailable or
	// ReasonDeploymentMissing, or the reason Kubernetes gave (see the package's reasons).
	Reason string
	// Message says what the Deployment and its pods report, for a person.
	Message string
	// Desired is the replica count asked for; Ready and Available are the Deployment's counts.
	Desired, Ready, Available int32
}

// waitingIsNormal are container waiting reasons every pod goes through on a healthy start.
var waitingIsNormal = []string{"ContainerCreating", "PodInitializing"}

// Assess judges dep (nil: it does not exist) asked for desired replicas, with pods, the pods its
// selector matches (read only when the rollout is not done; nil is fine). The most specific
// cause wins: the Deployment controller's verdict (ProgressDeadlineExceeded), then its failure
// to create pods (ReplicaFailure, e.g. FailedCreate for an exhausted quota), then the first pod
// (by name) that reports trouble (a container's waiting reason, or Unschedulable), else
// ReasonReplicasUnavailable.
func Assess(dep *appsv1.Deployment, desired int32, pods []corev1.Pod) Health {
	h := Health{Desired: desired}
	if dep == nil {
		h.Reason, h.Message = ReasonDeploymentMissing, "the Deployment does not exist (yet)"
		return h
	}
	st := dep.Status
	h.Ready, h.Available = st.ReadyReplicas, st.AvailableReplicas
	if st.ObservedGeneration >= dep.Generation && st.Replicas == desired && st.UpdatedReplicas == desired && st.AvailableReplicas == desired {
		h.Done = true
		h.Message = fmt.Sprintf("%d of %d replicas available", st.AvailableReplicas, desired)
		return h
	}
	h.Reason = ReasonReplicasUnavailable
	switch {
	case st.ObservedGeneration < dep.Generation:
		h.Message = fmt.Sprintf("Deployment %s is rolling out", dep.Name)
	case st.UpdatedReplicas < desired:
		h.Message = fmt.Sprintf("Deployment %s: %d of %d replicas updated, %d available", dep.Name, st.UpdatedReplicas, desired, st.AvailableReplicas)
	case st.Replicas > st.UpdatedReplicas:
		h.Message = fmt.Sprintf("Deployment %s: %d old replicas still running", dep.Name, st.Replicas-st.UpdatedReplicas)
	default:
		h.Message = fmt.Sprintf("Deployment %s: %d of %d replicas available", dep.Name, st.AvailableReplicas, desired)
	}
	if c := condition(dep, appsv1.DeploymentProgressing); c != nil && c.Status == corev1.ConditionFalse && c.Reason == ReasonProgressDeadlineExceeded {
		h.Stalled = true
		h.Reason, h.Message = c.Reason, fmt.Sprintf("Deployment %s: %s", dep.Name, c.Message)
		if p := podTrouble(pods); p != "" {
			h.Message += "; " + p
		}
		return h
	}
	if c := condition(dep, appsv1.DeploymentReplicaFailure); c != nil && c.Status == corev1.ConditionTrue {
		h.Reason, h.Message = c.Reason, fmt.Sprintf("Deployment %s: %s", dep.Name, c.Message)
		return h
	}
	if reason, msg := firstTrouble(pods); reason != "" {
		h.Reason, h.Message = reason, fmt.Sprintf("Deployment %s: %d of %d replicas available; %s", dep.Name, st.AvailableReplicas, desired, msg)
	}
	return h
}

// condition is dep's condition typ, nil when absent.
func condition(dep *appsv1.Deployment, typ appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range dep.Status.Conditions {
		if dep.Status.Conditions[i].Type == typ {
			return &dep.Status.Conditions[i]
		}
	}
	return nil
}

// podTrouble is firstTrouble's message alone.
func podTrouble(pods []corev1.Pod) string {
	_, msg := firstTrouble(pods)
	return msg
}

// firstTrouble is the first pod (by name) that reports trouble: a container waiting for another
// reason than a normal start (ImagePullBackOff, ErrImagePull, CrashLoopBackOff,
// CreateContainerConfigError, ...), or a pod the scheduler cannot place. It returns the reason
// and "pod <name>: <reason>: <message>"; "" when no pod reports trouble.
func firstTrouble(pods []corev1.Pod) (string, string) {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, p := range sorted {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && !slices.Contains(waitingIsNormal, w.Reason) {
				return w.Reason, fmt.Sprintf("pod %s: %s: %s", p.Name, w.Reason, w.Message)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
				return c.Reason, fmt.Sprintf("pod %s: %s: %s", p.Name, c.Reason, c.Message)
			}
		}
	}
	return "", ""
}

// Read reads Deployment namespace/name and, when its rollout is not done, the pods its selector
// matches, and assesses them. A Deployment that does not exist is Health with
// ReasonDeploymentMissing; other read errors are returned.
func Read(ctx context.Context, kube kubeclient.Interface, namespace, name string, desired int32) (Health, error) {
	dep, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Assess(nil, desired, nil), nil
	}
	if err != nil {
		return Health{}, fmt.Errorf("read Deployment %s/%s: %w", namespace, name, err)
	}
	h := Assess(dep, desired, nil)
	if h.Done {
		return h, nil
	}
	pods, err := ListPods(ctx, kube, dep)
	if err != nil {
		return h, nil // the Deployment's own word stands
	}
	return Assess(dep, desired, pods), nil
}

// ListPods lists the pods dep's selector matches in its namespace.
func ListPods(ctx context.Context, kube kubeclient.Interface, dep *appsv1.Deployment) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() {
		sel = labels.Nothing()
	}
	l, err := kube.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of Deployment %s/%s: %w", dep.Namespace, dep.Name, err)
	}
	return l.Items, nil
}

// DefaultTimeout is how long Wait waits by default: the Pulumi Kubernetes provider's own await
// timeout for a Deployment (10 minutes).
const DefaultTimeout = 10 * time.Minute

// Error is a rollout that did not finish: the Deployment gave up (Health.Stalled) or the timeout
// passed (Timeout set); Health is the last assessment.
type Error struct {
	Namespace, Name string
	Health          Health
	// Timeout is the wait that ran out; zero when the Deployment gave up first.
	Timeout time.Duration
}

func (e *Error) Error() string {
	if e.Timeout > 0 {
		return fmt.Sprintf("Deployment %s/%s did not roll out within %s: %s: %s", e.Namespace, e.Name, e.Timeout, e.Health.Reason, e.Health.Message)
	}
	return fmt.Sprintf("Deployment %s/%s did not roll out: %s: %s", e.Namespace, e.Name, e.Health.Reason, e.Health.Message)
}

// Wait polls Deployment namespace/name every second (Read) until its rollout is done (nil), the
// Deployment gives up (*Error), or timeout passes (*Error with Timeout); progress, when not
// nil, is called each time the reason or message changes. A read that fails is retried until
// the timeout; ctx ending returns ctx's error.
func Wait(ctx context.Context, kube kubeclient.Interface, namespace, name string, desired int32, timeout time.Duration, progress func(Health)) error {
	var last Health
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		h, err := Read(ctx, kube, namespace, name, desired)
		if err != nil {
			return false, nil
		}
		if progress != nil && (h.Reason != last.Reason || h.Message != last.Message) {
			progress(h)
		}
		last = h
		if h.Stalled {
			return false, &Error{Namespace: namespace, Name: name, Health: h}
		}
		return h.Done, nil
	})
	var re *Error
	switch {
	case err == nil, errors.As(err, &re):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return &Error{Namespace: namespace, Name: name, Health: last, Timeout: timeout}
}

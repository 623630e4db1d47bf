package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// deployment is Deployment ns/web at generation 2 with the given status.
func deployment(st appsv1.DeploymentStatus) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 2},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     st,
	}
}

func pod(name string, waiting string, unschedulable bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": "web"}}}
	if waiting != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "http-server",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting, Message: waiting + " detail"}}}}
	}
	if unschedulable {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/1 nodes are available"}}
	}
	return p
}

func TestAssess(t *testing.T) {
	progressing := func(status corev1.ConditionStatus, reason string) appsv1.DeploymentCondition {
		return appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: status, Reason: reason, Message: "progress " + reason}
	}
	for name, tc := range map[string]struct {
		dep           *appsv1.Deployment
		pods          []corev1.Pod
		done, stalled bool
		reason        string
		msg           string
	}{
		"missing": {reason: ReasonDeploymentMissing},
		"available": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, ReadyReplicas: 2}),
			done: true},
		"an old pod still there": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 3}),
			reason: ReasonReplicasUnavailable, msg: "1 old replicas still running"},
		"generation not observed": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 1, UpdatedReplicas: 2, AvailableReplicas: 2}),
			reason: ReasonReplicasUnavailable, msg: "rolling out"},
		"under way, pods starting": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 2, AvailableReplicas: 1}),
			pods: []corev1.Pod{pod("web-a", "ContainerCreating", false)}, reason: ReasonReplicasUnavailable, msg: "1 of 2 replicas available"},
		"image pull": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 2}),
			pods: []corev1.Pod{pod("web-b", "ImagePullBackOff", false), pod("web-a", "", false)}, reason: "ImagePullBackOff", msg: "pod web-b: ImagePullBackOff: ImagePullBackOff detail"},
		"first pod by name": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2}),
			pods: []corev1.Pod{pod("web-b", "ErrImagePull", false), pod("web-a", "CrashLoopBackOff", false)}, reason: "CrashLoopBackOff"},
		"unschedulable": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2}),
			pods: []corev1.Pod{pod("web-a", "", true)}, reason: "Unschedulable", msg: "0/1 nodes"},
		"quota": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "web-1" is forbidden: exceeded quota`}}}),
			pods: []corev1.Pod{pod("web-a", "ImagePullBackOff", false)}, reason: "FailedCreate", msg: "exceeded quota"},
		"progress deadline": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Conditions: []appsv1.DeploymentCondition{
			progressing(corev1.ConditionFalse, ReasonProgressDeadlineExceeded)}}),
			pods: []corev1.Pod{pod("web-a", "ImagePullBackOff", false)}, stalled: true, reason: ReasonProgressDeadlineExceeded, msg: "ImagePullBackOff detail"},
		"progressing true is no verdict": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Conditions: []appsv1.DeploymentCondition{
			progressing(corev1.ConditionTrue, "ReplicaSetUpdated")}}), reason: ReasonReplicasUnavailable},
		"pod being deleted is ignored": {dep: deployment(appsv1.DeploymentStatus{ObservedGeneration: 2}),
			pods: []corev1.Pod{func() corev1.Pod {
				p := pod("web-a", "CrashLoopBackOff", false)
				now := metav1.Now()
				p.DeletionTimestamp = &now
				return p
			}()}, reason: ReasonReplicasUnavailable},
	} {
		t.Run(name, func(t *testing.T) {
			h := Assess(tc.dep, 2, tc.pods)
			if h.Done != tc.done || h.Stalled != tc.stalled || h.Reason != tc.reason {
				t.Fatalf("Assess = %+v, want done %v stalled %v reason %q", h, tc.done, tc.stalled, tc.reason)
			}
			if !strings.Contains(h.Message, tc.msg) {
				t.Errorf("message %q does not say %q", h.Message, tc.msg)
			}
		})
	}
}

// Wait returns once the rollout is done, fails at once when the Deployment gives up, and fails
// with the last reason when the timeout passes.
func TestWait(t *testing.T) {
	ctx := context.Background()
	t.Run("done", func(t *testing.T) {
		kube := kubefake.NewClientset(deployment(appsv1.DeploymentStatus{ObservedGeneration: 2}))
		go func() {
			time.Sleep(1500 * time.Millisecond)
			d := deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2})
			_, _ = kube.AppsV1().Deployments("ns").UpdateStatus(ctx, d, metav1.UpdateOptions{})
		}()
		var seen []string
		if err := Wait(ctx, kube, "ns", "web", 2, 10*time.Second, func(h Health) { seen = append(seen, h.Reason) }); err != nil {
			t.Fatalf("Wait = %v, want nil", err)
		}
		if len(seen) < 2 || seen[0] != ReasonReplicasUnavailable {
			t.Errorf("progress reasons %v, want ReplicasUnavailable first, then done", seen)
		}
	})
	t.Run("stalled", func(t *testing.T) {
		d := deployment(appsv1.DeploymentStatus{ObservedGeneration: 2, Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: ReasonProgressDeadlineExceeded, Message: "gave up"}}})
		p := pod("web-a", "ImagePullBackOff", false)
		kube := kubefake.NewClientset(d, &p)
		start := time.Now()
		err := Wait(ctx, kube, "ns", "web", 2, time.Minute, nil)
		var re *Error
		if !errors.As(err, &re) || re.Timeout != 0 || !strings.Contains(err.Error(), "ProgressDeadlineExceeded") || !strings.Contains(err.Error(), "ImagePullBackOff") {
			t.Fatalf("Wait = %v, want the Deployment's verdict with the pod's reason", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("Wait took %s for a Deployment that gave up, want at once", time.Since(start))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		kube := kubefake.NewClientset(deployment(appsv1.DeploymentStatus{ObservedGeneration: 2}))
		err := Wait(ctx, kube, "ns", "web", 2, 2*time.Second, nil)
		var re *Error
		if !errors.As(err, &re) || re.Timeout != 2*time.Second || !strings.Contains(err.Error(), "within 2s: ReplicasUnavailable") {
			t.Fatalf("Wait = %v, want a timeout naming the last reason", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		kube := kubefake.NewClientset()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := Wait(cctx, kube, "ns", "web", 2, time.Minute, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	})
}

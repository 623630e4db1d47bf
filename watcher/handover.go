package watcher

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/ownership"
)

// The handover from the original operator's objects (ownership.FindOriginal) to the program's,
// without a failed request. The original Deployment's selector (ownership.OriginalSelector) is
// immutable and not the program's, so its pods cannot become the program's Deployment's; they
// keep serving until the program's pods are available, then leave the Service, and go once
// clients can no longer hold their addresses. Every step is derived again from the cluster, so
// a reconcile killed between two steps resumes where it stopped:
//
//  1. before the up (takeOverOriginal): the original Deployment's ReplicaSets are labelled
//     HandoverLabel=<name>, and so are their pods, which also receive the program's selector
//     labels (infra.SelectorLabels; no controller counts them: the program's ReplicaSets select
//     their own pod-template-hash); the Deployment is deleted with propagation Orphan, so its
//     ReplicaSets and pods stay; the Service and ConfigMap receive the program's labels and
//     ownerReference, which makes them the object's (ownership.Ours) for the provider's upsert.
//  2. the up: the Service now selects the program's labels, so it keeps the original pods and
//     adds the program's as they become ready. The Service stays headless (its clusterIP None
//     is immutable, and a replacement would leave the name unresolvable for as long as resolvers
//     cache the answer); ConfigMap and Service keep their UIDs.
//  3. after the up (continueHandover), once the program's Deployment is available: the original
//     pods lose the program's selector labels (they leave the Service's endpoints) and their
//     ReplicaSet is annotated DrainedAtAnnotation; Options.HandoverDrain later (resolvers' cache
//     time), the ReplicaSet is deleted and its pods with it.
const (
	// HandoverLabel marks the original operator's ReplicaSets and pods of KindCustomHttp <value>
	// while the handover runs.
	HandoverLabel = "groupsp.measutosh.dev/handover-of"
	// DrainedAtAnnotation, on a ReplicaSet labelled HandoverLabel, is when (RFC 3339) its pods
	// left the Service.
	DrainedAtAnnotation = "groupsp.measutosh.dev/drained-at"

	// ReasonAdoptingOriginal and ReasonAdoptedOriginal are the Events of the handover's start
	// and end (Normal).
	ReasonAdoptingOriginal = "AdoptingOriginal"
	ReasonAdoptedOriginal  = "AdoptedOriginal"
)

// DefaultHandoverDrain is Options.HandoverDrain's default: twice the 30 s TTL of kubeadm's
// CoreDNS configuration (one cache in CoreDNS, one in the client).
const DefaultHandoverDrain = time.Minute

// adoptsOriginal reports whether the handover may run for u: Options.AdoptOriginal or
// api.AdoptOriginalAnnotation "true" on u.
func (w *Watcher) adoptsOriginal(annotations map[string]string) bool {
	return w.opts.AdoptOriginal || annotations[api.AdoptOriginalAnnotation] == "true"
}

// takeOverOriginal is step 1 of the handover for d: nothing when none of d's objects is in the
// original operator's shape. Errors are API errors; the reconcile is retried.
func (w *Watcher) takeOverOriginal(ctx context.Context, o *object, d api.Desired) error {
	orig, err := ownership.FindOriginal(ctx, w.kube, d)
	if err != nil || !orig.Any() {
		return err
	}
	foreign, err := ownership.Foreign(ctx, w.kube, d)
	if err != nil {
		return err
	}
	for _, f := range foreign {
		if !slices.Contains(orig.Names(), f) {
			// Somebody else's object among them: nothing is taken over (ownership.Check
			// refuses the up).
			return nil
		}
	}
	w.log.Info("adopting the original operator's objects", "object", objectRef(o.u), "objects", orig.Names())
	w.recorder.Eventf(o.u, corev1.EventTypeNormal, ReasonAdoptingOriginal,
		"taking over %s made by the original operator: its pods serve until the new ones are available", strings.Join(orig.Names(), ", "))
	if dep := orig.Deployment; dep != nil {
		if err := w.keepOriginalPods(ctx, d, dep); err != nil {
			return err
		}
		orphan := metav1.DeletePropagationOrphan
		err := w.kube.AppsV1().Deployments(d.Namespace).Delete(ctx, dep.Name, metav1.DeleteOptions{
			PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &dep.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the original Deployment %s/%s (its pods stay): %w", d.Namespace, dep.Name, err)
		}
		// The garbage collector first removes the ReplicaSets' ownerReferences, then the
		// Deployment: the program's Deployment of the same name can be created only after that.
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := w.kube.AppsV1().Deployments(d.Namespace).Get(ctx, dep.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), ignoreNotFound(err)
		})
		if err != nil {
			return fmt.Errorf("wait for the original Deployment %s/%s to go: %w", d.Namespace, dep.Name, err)
		}
	}
	claim := claimPatch(infra.Labels(d), ownerOf(d))
	if svc := orig.Service; svc != nil {
		if _, err := w.kube.CoreV1().Services(d.Namespace).Patch(ctx, svc.Name, types.MergePatchType, claim, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label the original Service %s/%s: %w", d.Namespace, svc.Name, err)
		}
	}
	if cm := orig.ConfigMap; cm != nil {
		if _, err := w.kube.CoreV1().ConfigMaps(d.Namespace).Patch(ctx, cm.Name, types.MergePatchType, claim, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label the original ConfigMap %s/%s: %w", d.Namespace, cm.Name, err)
		}
	}
	return nil
}

// ignoreNotFound is err, or nil when err is NotFound.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// keepOriginalPods labels dep's ReplicaSets HandoverLabel, and their pods HandoverLabel and
// the program's selector labels.
func (w *Watcher) keepOriginalPods(ctx context.Context, d api.Desired, dep *appsv1.Deployment) error {
	rsets, err := w.kube.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(ownership.OriginalSelector()).String()})
	if err != nil {
		return fmt.Errorf("list the original Deployment's ReplicaSets in %s: %w", d.Namespace, err)
	}
	mark := map[string]string{HandoverLabel: d.Name}
	owned := map[types.UID]bool{}
	for _, rs := range rsets.Items {
		if c := metav1.GetControllerOf(&rs); c == nil || c.UID != dep.UID {
			continue
		}
		owned[rs.UID] = true
		if _, err := w.kube.AppsV1().ReplicaSets(d.Namespace).Patch(ctx, rs.Name, types.MergePatchType, claimPatch(mark, nil), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label the original ReplicaSet %s/%s: %w", d.Namespace, rs.Name, err)
		}
	}
	set := map[string]any{}
	for k, v := range withSelector(d, mark) {
		set[k] = v
	}
	return w.patchOriginalPods(ctx, d, owned, set, "label")
}

// withSelector is l plus the program's selector labels of d.
func withSelector(d api.Desired, l map[string]string) map[string]string {
	out := infra.SelectorLabels(d)
	for k, v := range l {
		out[k] = v
	}
	return out
}

// patchOriginalPods merges labels into the labels of the pods (original selector) whose
// controller is one of owners; a nil value removes the label. what names the change in errors.
func (w *Watcher) patchOriginalPods(ctx context.Context, d api.Desired, owners map[types.UID]bool, labels map[string]any, what string) error {
	pods, err := w.kube.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labelSelector(ownership.OriginalSelector())})
	if err != nil {
		return fmt.Errorf("list the original pods in %s: %w", d.Namespace, err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	for _, p := range pods.Items {
		if c := metav1.GetControllerOf(&p); c == nil || !owners[c.UID] || p.DeletionTimestamp != nil {
			continue
		}
		if _, err := w.kube.CoreV1().Pods(d.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); ignoreNotFound(err) != nil {
			return fmt.Errorf("%s the original pod %s/%s: %w", what, d.Namespace, p.Name, err)
		}
	}
	return nil
}

// labelSelector is the selector string of set.
func labelSelector(set map[string]string) string { return labels.SelectorFromSet(set).String() }

// continueHandover is step 3 of the handover for d: it returns how long to wait before the
// next look (0: no handover left). Errors are API errors; the reconcile is retried.
func (w *Watcher) continueHandover(ctx context.Context, o *object, d api.Desired) (time.Duration, error) {
	rsets, err := w.kube.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(map[string]string{HandoverLabel: d.Name}).String()})
	if err != nil {
		return 0, fmt.Errorf("list the original ReplicaSets of %s/%s: %w", d.Namespace, d.Name, err)
	}
	if len(rsets.Items) == 0 {
		return 0, nil
	}
	for _, rs := range rsets.Items {
		if len(rs.OwnerReferences) > 0 || rs.DeletionTimestamp != nil {
			continue
		}
		// Orphaned by the Deployment's delete: owned by the KindCustomHttp (not as its
		// controller), so that the garbage collector removes it if the object is deleted
		// before the handover ends.
		owner := ownerOf(d)
		owner[0].Controller = nil
		if _, err := w.kube.AppsV1().ReplicaSets(d.Namespace).Patch(ctx, rs.Name, types.MergePatchType, claimPatch(nil, owner), metav1.PatchOptions{}); ignoreNotFound(err) != nil {
			return 0, fmt.Errorf("own the original ReplicaSet %s/%s: %w", d.Namespace, rs.Name, err)
		}
	}
	dep, err := w.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("read Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	if !ownership.Ours(dep, d) || !available(dep) {
		return 2 * time.Second, nil
	}
	next := time.Duration(0)
	for _, rs := range rsets.Items {
		at, err := time.Parse(time.RFC3339, rs.Annotations[DrainedAtAnnotation])
		if err != nil {
			// Out of the Service first (a nil label value removes it), then the time stamp: a
			// kill between the two only makes the drain longer.
			drop := map[string]any{}
			for k := range infra.SelectorLabels(d) {
				drop[k] = nil
			}
			if err := w.patchOriginalPods(ctx, d, map[types.UID]bool{rs.UID: true}, drop, "take out of the Service"); err != nil {
				return 0, err
			}
			stamp, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
				DrainedAtAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
			if _, err := w.kube.AppsV1().ReplicaSets(d.Namespace).Patch(ctx, rs.Name, types.MergePatchType, stamp, metav1.PatchOptions{}); err != nil {
				return 0, fmt.Errorf("annotate the original ReplicaSet %s/%s: %w", d.Namespace, rs.Name, err)
			}
			next = max(next, w.handoverDrain())
			continue
		}
		if left := time.Until(at.Add(w.handoverDrain())); left > 0 {
			next = max(next, left)
			continue
		}
		background := metav1.DeletePropagationBackground
		err = w.kube.AppsV1().ReplicaSets(d.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{
			PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &rs.UID}})
		if ignoreNotFound(err) != nil {
			return 0, fmt.Errorf("delete the original ReplicaSet %s/%s: %w", d.Namespace, rs.Name, err)
		}
	}
	if next == 0 {
		w.recorder.Event(o.u, corev1.EventTypeNormal, ReasonAdoptedOriginal,
			"the original operator's pods are gone; the Deployment, Service and ConfigMap are the stack's")
	}
	return next, nil
}

// available reports whether dep's current generation is rolled out: observed, every replica
// updated and available.
func available(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	s := dep.Status
	return s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas >= want && s.AvailableReplicas >= want
}

// handoverDrain is Options.HandoverDrain, or DefaultHandoverDrain when unset.
func (w *Watcher) handoverDrain() time.Duration {
	if w.opts.HandoverDrain > 0 {
		return w.opts.HandoverDrain
	}
	return DefaultHandoverDrain
}

// ownerOf is the ownerReference the program puts on d's objects (infra.OwnerKind, controller).
func ownerOf(d api.Desired) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: infra.OwnerAPIVersion, Kind: infra.OwnerKind, Name: d.Name,
		UID: types.UID(d.OwnerUID), Controller: ptrTo(true)}}
}

// claimPatch is a JSON merge patch that sets labels set and ownerReferences owners, each when
// not nil.
func claimPatch(set map[string]string, owners []metav1.OwnerReference) []byte {
	meta := map[string]any{}
	if set != nil {
		meta["labels"] = set
	}
	if owners != nil {
		meta["ownerReferences"] = owners
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta})
	return b
}

func ptrTo[T any](v T) *T { return &v }

// requeueHandover queues key again after wait when the handover has steps left.
func (w *Watcher) requeueHandover(key cache.ObjectName, wait time.Duration) {
	if wait > 0 {
		w.queue.AddAfter(key, wait)
	}
}

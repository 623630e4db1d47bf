package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Event reasons of the on-missing-stack annotation's ways out that leave the stack missing
// (adopt's is api.ReasonStackRebuilt).
const (
	ReasonObjectsOrphaned = "ObjectsOrphaned"
	ReasonObjectsDeleted  = "ObjectsDeleted"
)

// leftObject is one object of a KindCustomHttp found in the owned-object caches.
type leftObject struct {
	kind, name string
	meta       metav1.Object
}

func (o leftObject) String() string { return o.kind + "/" + o.name }

// leftBehind lists the Deployment, Service and ConfigMap of the KindCustomHttp namespace/name
// with UID uid that exist and are not being deleted: the program's names, with its managed-by
// label (the caches hold only those), the object's instance label and an ownerReference to that
// very KindCustomHttp (by UID: labels and names anybody can set, so an object that only looks
// like one of its objects is never orphaned or deleted for it).
func (o *ownedObjects) leftBehind(namespace, name string, uid types.UID) []leftObject {
	var out []leftObject
	mine := func(m metav1.Object) bool {
		if m.GetDeletionTimestamp() != nil || m.GetLabels()[infra.LabelInstance] != name {
			return false
		}
		for _, r := range m.GetOwnerReferences() {
			if r.Kind == infra.OwnerKind && r.UID == uid && uid != "" {
				return true
			}
		}
		return false
	}
	if d, err := o.deployments.Deployments(namespace).Get(name); err == nil && mine(d) {
		out = append(out, leftObject{"Deployment", d.Name, d})
	}
	if s, err := o.services.Services(namespace).Get(name); err == nil && mine(s) {
		out = append(out, leftObject{"Service", s.Name, s})
	}
	if c := o.configMap(namespace, name+api.ConfigMapSuffix); c != nil && mine(c) {
		out = append(out, leftObject{"ConfigMap", c.GetName(), c})
	}
	return out
}

// terminating lists the Deployment, Service and ConfigMap of KindCustomHttp namespace/name that
// are being deleted (deletionTimestamp set) and still exist.
func (o *ownedObjects) terminating(namespace, name string) []leftObject {
	var out []leftObject
	going := func(m metav1.Object) bool {
		return m.GetDeletionTimestamp() != nil && m.GetLabels()[infra.LabelInstance] == name
	}
	if d, err := o.deployments.Deployments(namespace).Get(name); err == nil && going(d) {
		out = append(out, leftObject{"Deployment", d.Name, d})
	}
	if s, err := o.services.Services(namespace).Get(name); err == nil && going(s) {
		out = append(out, leftObject{"Service", s.Name, s})
	}
	if c := o.configMap(namespace, name+api.ConfigMapSuffix); c != nil && going(c) {
		out = append(out, leftObject{"ConfigMap", c.GetName(), c})
	}
	return out
}

// stackMissing handles the delete of u whose stack Destroy found missing. With no object of u
// left it returns true: the finalizer may go. Otherwise it follows u's OnMissingStackAnnotation:
// orphan (remove the objects' ownerReference to u) or delete (delete them), then true; adopt
// (import them into the stack again: rebuild), then false with errStackRebuilt, and the caller
// destroys the rebuilt stack as usual; without
// it, or with a value it does not know, it reports StackMissing (Ready False, Stalled, a
// Warning Event when the message changes) and returns false: the finalizer stays, and the next
// change of u (the annotation) or resync looks again (a restored backend then destroys the
// stack as usual). Errors are API errors of the orphan or delete, retried with backoff.
func (w *Watcher) stackMissing(ctx context.Context, o *object, stackName string) (bool, error) {
	u := o.u
	left := w.owned.leftBehind(u.GetNamespace(), u.GetName(), u.GetUID())
	if len(left) == 0 {
		return true, nil
	}
	names := make([]string, len(left))
	for i, o := range left {
		names[i] = o.String()
	}
	what := strings.Join(names, ", ")
	switch mode := u.GetAnnotations()[api.OnMissingStackAnnotation]; mode {
	case api.OnMissingStackOrphan:
		for _, o := range left {
			if err := w.disown(ctx, u, o); err != nil {
				return false, err
			}
		}
		w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonObjectsOrphaned,
			"stack %s is missing: left %s in place, no longer owned by this KindCustomHttp (%s=%s)", stackName, what, api.OnMissingStackAnnotation, mode)
		w.log.Warn("stack missing: objects orphaned as the annotation asks", "object", objectRef(u), "stack", stackName, "objects", what)
		return true, nil
	case api.OnMissingStackAdopt:
		if err := w.rebuild(ctx, o, stackName, left); err != nil {
			return false, err
		}
		return false, errStackRebuilt
	case api.OnMissingStackDelete:
		for _, o := range left {
			if err := w.deleteLeft(ctx, u.GetNamespace(), o); err != nil {
				return false, err
			}
		}
		w.recorder.Eventf(u, corev1.EventTypeWarning, ReasonObjectsDeleted,
			"stack %s is missing: deleted %s (%s=%s)", stackName, what, api.OnMissingStackAnnotation, mode)
		w.log.Warn("stack missing: objects deleted as the annotation asks", "object", objectRef(u), "stack", stackName, "objects", what)
		return true, nil
	default:
		msg := fmt.Sprintf("stack %s is not in the backend, but %s, which it created, still exist: restore the backend (or the cluster name) that holds the stack and the delete destroys them, or annotate this object with %s=%s to leave them in place, %s=%s to delete them or %s=%s to rebuild the stack from them and destroy it",
			stackName, what, api.OnMissingStackAnnotation, api.OnMissingStackOrphan, api.OnMissingStackAnnotation, api.OnMissingStackDelete, api.OnMissingStackAnnotation, api.OnMissingStackAdopt)
		if mode != "" {
			msg = fmt.Sprintf("%s=%q is none of %s, %s and %s; ", api.OnMissingStackAnnotation, mode, api.OnMissingStackOrphan, api.OnMissingStackDelete, api.OnMissingStackAdopt) + msg
		}
		if c := currentCondition(u, api.ConditionReady); c == nil || c.Reason != api.ReasonStackMissing || c.Message != msg {
			w.recorder.Event(u, corev1.EventTypeWarning, api.ReasonStackMissing, msg)
		}
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			markStalled(st, o.gen, api.ReasonStackMissing, msg)
		})
		return false, nil
	}
}

// disown removes o's ownerReferences to u by a merge patch that names o's resourceVersion (a
// concurrent change makes it a conflict, retried), so that the garbage collector keeps o once u
// is gone.
func (w *Watcher) disown(ctx context.Context, u *unstructured.Unstructured, o leftObject) error {
	var keep []metav1.OwnerReference
	for _, r := range o.meta.GetOwnerReferences() {
		if r.UID != u.GetUID() && !(r.Kind == infra.OwnerKind && r.Name == u.GetName()) {
			keep = append(keep, r)
		}
	}
	if len(keep) == len(o.meta.GetOwnerReferences()) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": o.meta.GetResourceVersion(), "ownerReferences": keep}})
	if err != nil {
		return err
	}
	if err := w.fence.Check(); err != nil {
		return err // no write once this replica may no longer lead
	}
	ns, opts := u.GetNamespace(), metav1.PatchOptions{FieldManager: FieldManager}
	switch o.kind {
	case "Deployment":
		_, err = w.kube.AppsV1().Deployments(ns).Patch(ctx, o.name, types.MergePatchType, patch, opts)
	case "Service":
		_, err = w.kube.CoreV1().Services(ns).Patch(ctx, o.name, types.MergePatchType, patch, opts)
	default:
		_, err = w.kube.CoreV1().ConfigMaps(ns).Patch(ctx, o.name, types.MergePatchType, patch, opts)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the ownerReference of %s to %s: %w", o, objectRef(u), err)
	}
	return nil
}

// deleteLeft deletes o from namespace ns (its pods go with the Deployment, in the background).
func (w *Watcher) deleteLeft(ctx context.Context, ns string, o leftObject) error {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: ptrUID(o.meta.GetUID())}}
	var err error
	switch o.kind {
	case "Deployment":
		err = w.kube.AppsV1().Deployments(ns).Delete(ctx, o.name, opts)
	case "Service":
		err = w.kube.CoreV1().Services(ns).Delete(ctx, o.name, opts)
	default:
		err = w.kube.CoreV1().ConfigMaps(ns).Delete(ctx, o.name, opts)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s of a missing stack: %w", o, err)
	}
	return nil
}

func ptrUID(u types.UID) *types.UID { return &u }

// errStackRebuilt is stackMissing's answer once rebuild has made the stack again: destroy it.
var errStackRebuilt = errors.New("stack rebuilt from the live objects")

// adoptOf is the infra.Adopt that names the objects of left.
func adoptOf(left []leftObject) infra.Adopt {
	var a infra.Adopt
	for _, o := range left {
		switch o.kind {
		case "Deployment":
			a.Deployment = true
		case "Service":
			a.Service = true
		case "ConfigMap":
			a.ConfigMap = true
		}
	}
	return a
}

// rebuild makes u's missing stack stackName again from left, u's live objects, by an up that
// imports them and changes nothing (infra.Adopt), so that the delete can destroy them as a
// stack's (api.OnMissingStackAdopt). The program is u's spec as it stands (api.Resolve; no
// envFrom source is read: nothing is applied). Errors: the spec does not resolve (a KindCustomHttp
// written before a validation rule; the message names the other ways out), or the up failed;
// both keep the finalizer and are retried with backoff, reported like a failed destroy (Ready
// False DestroyFailed, a Warning Event).
func (w *Watcher) rebuild(ctx context.Context, o *object, stackName string, left []leftObject) error {
	u := o.u
	err := o.convErr
	var d api.Desired
	if err == nil {
		d, err = api.Resolve(o.cr)
	}
	if err != nil {
		return w.fail(o, api.ReasonDestroyFailed, fmt.Errorf("rebuild stack %s from the live objects: %w; or annotate this object with %s=%s or %s",
			stackName, err, api.OnMissingStackAnnotation, api.OnMissingStackOrphan, api.OnMissingStackDelete))
	}
	adopt := adoptOf(left)
	w.log.Info("stack missing: rebuilding it from the live objects", "object", objectRef(u), "stack", stackName)
	opCtx, cancel := context.WithTimeout(ctx, w.opts.OperationTimeout)
	res, err := w.stacks.Up(opCtx, d, adopt, stack.RunOptions{})
	err = w.timedOut(ctx, opCtx, "up", stackName, err)
	cancel()
	w.metrics.observeOperation("up", err, res)
	if err != nil {
		reason, msg := w.failed(ctx, u, stackName, err, api.ReasonDestroyFailed)
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			st.LastUpdate = lastUpdate(res, err)
			markFailed(st, o.gen, reason, msg)
		})
		return err
	}
	w.reportRebuilt(u, stackName, left, res)
	return nil
}

// reportRebuilt sends the StackRebuilt Event of an up that imported some of left (the objects
// it declared with an import ID) into stackName.
func (w *Watcher) reportRebuilt(u *unstructured.Unstructured, stackName string, left []leftObject, res stack.Result) {
	names := make([]string, len(left))
	for i, o := range left {
		names[i] = o.String()
	}
	w.recorder.Eventf(u, corev1.EventTypeNormal, api.ReasonStackRebuilt,
		"stack %s did not hold %d of %s: imported them from the cluster (%s=%s); changes: %v",
		stackName, res.Changes["import"], strings.Join(names, ", "), api.OnMissingStackAnnotation, api.OnMissingStackAdopt, res.Changes)
	w.log.Info("stack rebuilt from the live objects", "object", objectRef(u), "stack", stackName, "objects", names, "changes", res.Changes)
}

// Package ownership tells whether the objects a KindCustomHttp's program would create are free
// to take: the operator's Kubernetes provider runs with PULUMI_K8S_UPSERT_EXISTING_OBJECTS
// (package stack), so that an object whose create reached the API server but whose answer
// never reached Pulumi (a cancelled or killed up, a network cut) is taken over by the next up
// instead of failing it with "already exists" for ever. That must never take over an object
// somebody else made under the same name: Foreign finds those, and the watcher and the
// commands refuse to run an up while there is one.
package ownership

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// Foreign lists, as "Kind/name", d's Deployment, Service and ConfigMap that exist in the
// cluster without being d's: without infra.LabelManagedBy=infra.ManagedBy and
// infra.LabelInstance=d.Name, or owned by another object than d (an ownerReference with
// another UID). Objects that do not exist are free. Errors are read errors.
func Foreign(ctx context.Context, kube kubeclient.Interface, d api.Desired) ([]string, error) {
	var out []string
	check := func(kind, name string, m metav1.Object, err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s %s/%s: %w", kind, d.Namespace, name, err)
		}
		if !Ours(m, d) {
			out = append(out, kind+"/"+name)
		}
		return nil
	}
	dep, err := kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err := check("Deployment", d.Name, dep, err); err != nil {
		return nil, err
	}
	svc, err := kube.CoreV1().Services(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err := check("Service", d.Name, svc, err); err != nil {
		return nil, err
	}
	cm, err := kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, d.ConfigMapName(), metav1.GetOptions{})
	if err := check("ConfigMap", d.ConfigMapName(), cm, err); err != nil {
		return nil, err
	}
	return out, nil
}

// Ours reports whether m carries d's labels and no ownerReference to another KindCustomHttp
// than d (when d's UID is known).
func Ours(m metav1.Object, d api.Desired) bool {
	l := m.GetLabels()
	if l[infra.LabelManagedBy] != infra.ManagedBy || l[infra.LabelInstance] != d.Name {
		return false
	}
	for _, r := range m.GetOwnerReferences() {
		if r.Kind == infra.OwnerKind && d.OwnerUID != "" && string(r.UID) != d.OwnerUID {
			return false
		}
	}
	return true
}

// Error is the refusal to run an up while Foreign found objects.
type Error struct {
	Namespace, Name string
	Objects         []string
	// Original is set when every one of Objects is in the shape the original operator made
	// (FindOriginal): those can be adopted (api.AdoptOriginalAnnotation).
	Original bool
}

func (e *Error) Error() string {
	if e.Original {
		return fmt.Sprintf("%v in namespace %s were made by the original operator (http-go-operator) for KindCustomHttp %s: to take them over without downtime, annotate this object %s=%q (or run the operator with --adopt-original); see README \"Switching from http-go-operator\"",
			e.Objects, e.Namespace, e.Name, api.AdoptOriginalAnnotation, "true")
	}
	return fmt.Sprintf("%v in namespace %s already exist and were not made for KindCustomHttp %s (they lack its labels %s=%s, %s=%s): delete or rename them, or give this object another name; the operator does not take over objects it did not make",
		e.Objects, e.Namespace, e.Name, infra.LabelManagedBy, infra.ManagedBy, infra.LabelInstance, e.Name)
}

// Check is Foreign as an error: an *Error when there is a foreign object, a read error, or nil.
func Check(ctx context.Context, kube kubeclient.Interface, d api.Desired) error {
	objs, err := Foreign(ctx, kube, d)
	if err != nil || len(objs) == 0 {
		return err
	}
	orig, err := FindOriginal(ctx, kube, d)
	if err != nil {
		return err
	}
	names := orig.Names()
	all := true
	for _, o := range objs {
		all = all && slices.Contains(names, o)
	}
	return &Error{Namespace: d.Namespace, Name: d.Name, Objects: objs, Original: all}
}

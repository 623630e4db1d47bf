package ownership

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// The shape of what the original operator (http-go-operator, the kubebuilder operator this one
// replaces) made for a KindCustomHttp named <name>: Deployment <name> whose selector and pod
// label are exactly OriginalSelector, with a container named OriginalContainer; a headless
// Service <name> selecting OriginalSelector; ConfigMap <name>-configmap. None of them carries an
// ownerReference or this operator's managed-by label.
const (
	OriginalLabelKey   = "app"
	OriginalLabelValue = "measutosh-http-server"
	OriginalContainer  = "http-go-server-pod"
)

// OriginalSelector is the original operator's hard-coded pod label and selector.
func OriginalSelector() map[string]string {
	return map[string]string{OriginalLabelKey: OriginalLabelValue}
}

// Original holds those of d's objects that exist in the original operator's shape; a nil field
// is an object that does not exist or is not in that shape (Foreign tells which).
type Original struct {
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	ConfigMap  *corev1.ConfigMap
}

// Any reports whether o holds at least one object.
func (o Original) Any() bool { return o.Deployment != nil || o.Service != nil || o.ConfigMap != nil }

// Names lists o's objects as "Kind/name".
func (o Original) Names() []string {
	var out []string
	if o.Deployment != nil {
		out = append(out, "Deployment/"+o.Deployment.Name)
	}
	if o.Service != nil {
		out = append(out, "Service/"+o.Service.Name)
	}
	if o.ConfigMap != nil {
		out = append(out, "ConfigMap/"+o.ConfigMap.Name)
	}
	return out
}

// FindOriginal reads d's Deployment, Service and ConfigMap and returns those in the original
// operator's shape (IsOriginalDeployment, IsOriginalService, IsOriginalConfigMap). Errors are
// read errors other than NotFound.
func FindOriginal(ctx context.Context, kube kubeclient.Interface, d api.Desired) (Original, error) {
	var o Original
	dep, err := kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case err == nil && IsOriginalDeployment(dep):
		o.Deployment = dep
	case err != nil && !apierrors.IsNotFound(err):
		return Original{}, fmt.Errorf("read Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	svc, err := kube.CoreV1().Services(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case err == nil && IsOriginalService(svc):
		o.Service = svc
	case err != nil && !apierrors.IsNotFound(err):
		return Original{}, fmt.Errorf("read Service %s/%s: %w", d.Namespace, d.Name, err)
	}
	cm, err := kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, d.ConfigMapName(), metav1.GetOptions{})
	switch {
	case err == nil && IsOriginalConfigMap(cm):
		o.ConfigMap = cm
	case err != nil && !apierrors.IsNotFound(err):
		return Original{}, fmt.Errorf("read ConfigMap %s/%s: %w", d.Namespace, d.ConfigMapName(), err)
	}
	return o, nil
}

// unclaimed reports whether m has no ownerReference and none of this operator's labels: the
// original operator set neither.
func unclaimed(m metav1.Object) bool {
	if len(m.GetOwnerReferences()) > 0 || m.GetDeletionTimestamp() != nil {
		return false
	}
	_, managed := m.GetLabels()[infra.LabelManagedBy]
	return !managed
}

// IsOriginalDeployment reports whether dep is in the shape the original operator made:
// unclaimed, its selector exactly matchLabels OriginalSelector (no expressions), its pod
// template labelled so, and a container named OriginalContainer.
func IsOriginalDeployment(dep *appsv1.Deployment) bool {
	if !unclaimed(dep) || dep.Spec.Selector == nil || len(dep.Spec.Selector.MatchExpressions) > 0 ||
		!maps.Equal(dep.Spec.Selector.MatchLabels, OriginalSelector()) ||
		dep.Spec.Template.Labels[OriginalLabelKey] != OriginalLabelValue {
		return false
	}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name == OriginalContainer {
			return true
		}
	}
	return false
}

// IsOriginalService reports whether svc is in the shape the original operator made:
// unclaimed, headless (clusterIP None) and selecting exactly OriginalSelector.
func IsOriginalService(svc *corev1.Service) bool {
	return unclaimed(svc) && svc.Spec.ClusterIP == corev1.ClusterIPNone &&
		maps.Equal(svc.Spec.Selector, OriginalSelector())
}

// IsOriginalConfigMap reports whether cm is in the shape the original operator made:
// unclaimed and without labels (the original set none).
func IsOriginalConfigMap(cm *corev1.ConfigMap) bool {
	return unclaimed(cm) && len(cm.Labels) == 0
}

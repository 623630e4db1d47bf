package ownership

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// The original operator's objects are recognised by their whole shape; any change that another
// tool or a person would make (another selector, an owner, our labels, a ClusterIP) makes them
// somebody else's, and Check says which message applies.
func TestFindOriginal(t *testing.T) {
	ctx := context.Background()
	d := api.Desired{Namespace: "ns", Name: "web", OwnerUID: "uid-web"}
	for name, tc := range map[string]struct {
		edit func(dep *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap)
		want []string
	}{
		"as made": {want: []string{"Deployment/web", "Service/web", "ConfigMap/web-configmap"}},
		"selector+": {edit: func(dep *appsv1.Deployment, _ *corev1.Service, _ *corev1.ConfigMap) {
			dep.Spec.Selector.MatchLabels["tier"] = "x"
		}, want: []string{"Service/web", "ConfigMap/web-configmap"}},
		"container": {edit: func(dep *appsv1.Deployment, _ *corev1.Service, _ *corev1.ConfigMap) {
			dep.Spec.Template.Spec.Containers[0].Name = "app"
		}, want: []string{"Service/web", "ConfigMap/web-configmap"}},
		"owned": {edit: func(dep *appsv1.Deployment, _ *corev1.Service, _ *corev1.ConfigMap) {
			dep.OwnerReferences = []metav1.OwnerReference{{Kind: "Other", Name: "x", UID: "u"}}
		}, want: []string{"Service/web", "ConfigMap/web-configmap"}},
		"cluster IP": {edit: func(_ *appsv1.Deployment, svc *corev1.Service, _ *corev1.ConfigMap) { svc.Spec.ClusterIP = "10.96.0.9" }, want: []string{"Deployment/web", "ConfigMap/web-configmap"}},
		"labelled config": {edit: func(_ *appsv1.Deployment, _ *corev1.Service, cm *corev1.ConfigMap) {
			cm.Labels = map[string]string{"team": "a"}
		}, want: []string{"Deployment/web", "Service/web"}},
		"managed-by": {edit: func(_ *appsv1.Deployment, svc *corev1.Service, _ *corev1.ConfigMap) {
			svc.Labels = map[string]string{infra.LabelManagedBy: "helm"}
		}, want: []string{"Deployment/web", "ConfigMap/web-configmap"}},
	} {
		t.Run(name, func(t *testing.T) {
			src := kubefake.NewClientset()
			testenv.CreateOriginal(t, src, "ns", "web", 1, 80, map[string]string{"hostports": "a,1"}, api.DefaultImage)
			dep, _ := src.AppsV1().Deployments("ns").Get(ctx, "web", metav1.GetOptions{})
			svc, _ := src.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
			cm, _ := src.CoreV1().ConfigMaps("ns").Get(ctx, "web-configmap", metav1.GetOptions{})
			if tc.edit != nil {
				tc.edit(dep, svc, cm)
			}
			kube := kubefake.NewClientset(dep, svc, cm)
			o, err := FindOriginal(ctx, kube, d)
			if err != nil || !slices.Equal(o.Names(), tc.want) {
				t.Fatalf("FindOriginal = %v, %v; want %v", o.Names(), err, tc.want)
			}
			var e *Error
			if err := Check(ctx, kube, d); !errors.As(err, &e) {
				t.Fatalf("Check = %v: want an *Error", err)
			}
			if whole := len(tc.want) == 3; e.Original != whole || strings.Contains(e.Error(), api.AdoptOriginalAnnotation) != whole {
				t.Fatalf("Check: Original %v, message %q: want the adoption offered only for the whole original shape", e.Original, e.Error())
			}
		})
	}
}

// A read error other than NotFound is FindOriginal's error, naming the object.
func TestFindOriginalReadError(t *testing.T) {
	kube := kubefake.NewClientset()
	kube.PrependReactor("get", "services", func(ktesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	_, err := FindOriginal(context.Background(), kube, api.Desired{Namespace: "ns", Name: "web"})
	if err == nil || !strings.Contains(err.Error(), "read Service ns/web") {
		t.Fatalf("FindOriginal = %v: want the read error naming Service ns/web", err)
	}
}

package ownership

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

func TestForeign(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "web", OwnerUID: "uid-web"}
	ours := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: infra.Labels(d)}
	}
	owned := func(m metav1.ObjectMeta, uid string) metav1.ObjectMeta {
		m.OwnerReferences = []metav1.OwnerReference{{Kind: infra.OwnerKind, Name: "web", UID: types.UID(uid)}}
		return m
	}
	for name, tc := range map[string]struct {
		objs []runtime.Object
		want string
	}{
		"nothing there": {},
		"ours, labelled": {objs: []runtime.Object{&appsv1.Deployment{ObjectMeta: ours("web")},
			&corev1.Service{ObjectMeta: owned(ours("web"), "uid-web")}, &corev1.ConfigMap{ObjectMeta: ours("web-configmap")}}},
		"somebody's Deployment": {objs: []runtime.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}},
			want: "Deployment/web"},
		"another object's Service": {objs: []runtime.Object{&corev1.Service{ObjectMeta: owned(ours("web"), "uid-old")}},
			want: "Service/web"},
		"a ConfigMap of another instance": {objs: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-configmap",
			Labels: map[string]string{infra.LabelManagedBy: infra.ManagedBy, infra.LabelInstance: "api"}}}},
			want: "ConfigMap/web-configmap"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Check(context.Background(), kubefake.NewClientset(tc.objs...), d)
			var oe *Error
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case tc.want != "" && (!errors.As(err, &oe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "delete or rename")):
				t.Fatalf("Check = %v, want it to name %s and what to do", err, tc.want)
			}
		})
	}
}

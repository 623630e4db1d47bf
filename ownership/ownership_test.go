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
	k8stesting "k8s.io/client-go/testing"

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

// Adoptable names only d's own live objects: its labels and an ownerReference to d by UID. An
// object with only the labels, another owner's, one of another instance, and every object of
// a Desired without a UID (a manifest not yet in the cluster) are not named; a read error
// other than NotFound is returned.
func TestAdoptable(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "web", OwnerUID: "uid-web"}
	meta := func(name, uid string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: infra.Labels(d)}
		if uid != "" {
			m.OwnerReferences = []metav1.OwnerReference{{Kind: infra.OwnerKind, Name: "web", UID: types.UID(uid)}}
		}
		return m
	}
	all := []runtime.Object{&appsv1.Deployment{ObjectMeta: meta("web", "uid-web")},
		&corev1.Service{ObjectMeta: meta("web", "uid-web")}, &corev1.ConfigMap{ObjectMeta: meta("web-configmap", "uid-web")}}
	for name, tc := range map[string]struct {
		d    api.Desired
		objs []runtime.Object
		want infra.Adopt
	}{
		"nothing there":       {d: d},
		"all three, its own":  {d: d, objs: all, want: infra.Adopt{ConfigMap: true, Deployment: true, Service: true}},
		"no UID to match":     {d: api.Desired{Namespace: "ns", Name: "web"}, objs: all},
		"labels, no owner":    {d: d, objs: []runtime.Object{&appsv1.Deployment{ObjectMeta: meta("web", "")}}},
		"another owner's":     {d: d, objs: []runtime.Object{&corev1.Service{ObjectMeta: meta("web", "uid-old")}}},
		"only the ConfigMap":  {d: d, objs: all[2:], want: infra.Adopt{ConfigMap: true}},
		"unlabelled, its UID": {d: d, objs: []runtime.Object{&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", OwnerReferences: meta("web", "uid-web").OwnerReferences}}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Adoptable(context.Background(), kubefake.NewClientset(tc.objs...), tc.d)
			if err != nil || got != tc.want {
				t.Fatalf("Adoptable = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		c := kubefake.NewClientset()
		c.PrependReactor("get", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("connection refused")
		})
		if got, err := Adoptable(context.Background(), c, d); err == nil || !strings.Contains(err.Error(), "read Service ns/web") || got.Any() {
			t.Fatalf("Adoptable = %+v, %v; want the read error naming the Service", got, err)
		}
	})
}

package testenv

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// OriginalFieldManager is the field manager of the original operator's writes (a kubebuilder
// manager's default).
const OriginalFieldManager = "manager"

// CreateOriginal creates, in namespace ns, what the original operator (http-go-operator) made
// for a KindCustomHttp named name (README "Switching from http-go-operator"): ConfigMap
// <name>-configmap with data, Deployment <name> of replicas pods labelled and selected by app:
// measutosh-http-server with container http-go-server-pod (image, containerPort 80 named http,
// the ConfigMap mounted at /config, args as given: the original image took none), and headless
// Service <name> from port to targetPort 80. No labels of this operator, no ownerReference.
func CreateOriginal(t testing.TB, kube kubernetes.Interface, ns, name string, replicas, port int32, data map[string]string, image string, args ...string) {
	t.Helper()
	ctx := context.Background()
	create := metav1.CreateOptions{FieldManager: OriginalFieldManager}
	sel := map[string]string{"app": "measutosh-http-server"}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-configmap", Namespace: ns}, Data: data}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, create); err != nil {
		t.Fatalf("create the original ConfigMap: %v", err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "http-go-server-pod", Image: image, Args: args,
						Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 80}},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/config"}},
					}},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
				},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, dep, create); err != nil {
		t.Fatalf("create the original Deployment: %v", err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  sel,
			Ports:     []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(80)}},
		},
	}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, create); err != nil {
		t.Fatalf("create the original Service: %v", err)
	}
}

package infra

import (
	"testing"

	k8scorev1 "k8s.io/api/core/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// TestExpected: what Expected returns is what Declare declares, decoded: the replicas, the
// container's image and port, the Service's type, port and headless ClusterIP, the data.
func TestExpected(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 3, Port: 8080, ContainerPort: 9090, Image: "img:1",
		ServiceType: api.ServiceTypeHeadless, ConfigMapData: map[string]string{"k": "v"}, RolloutOnConfigChange: true, OwnerUID: "uid"}
	o, err := Expected(d)
	if err != nil {
		t.Fatal(err)
	}
	dep, svc, cm := o.Deployment, o.Service, o.ConfigMap
	if dep.Name != "web" || dep.Namespace != "ns" || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("Deployment %s/%s replicas %v, want ns/web 3", dep.Namespace, dep.Name, dep.Spec.Replicas)
	}
	cs := dep.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Image != "img:1" || len(cs[0].Ports) != 1 || cs[0].Ports[0].ContainerPort != 9090 {
		t.Errorf("containers %+v, want one of img:1 on 9090", cs)
	}
	if dep.Spec.Template.Annotations[ConfigDigestAnnotation] != d.ConfigDigest() {
		t.Errorf("pod annotations %v, want the config digest", dep.Spec.Template.Annotations)
	}
	if svc.Spec.Type != k8scorev1.ServiceTypeClusterIP || svc.Spec.ClusterIP != k8scorev1.ClusterIPNone || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service spec %+v, want a headless ClusterIP Service on 8080", svc.Spec)
	}
	if cm.Name != d.ConfigMapName() || cm.Data["k"] != "v" || len(cm.Data) != 1 {
		t.Errorf("ConfigMap %s data %v, want %s {k: v}", cm.Name, cm.Data, d.ConfigMapName())
	}
	if len(dep.OwnerReferences) != 1 || dep.OwnerReferences[0].UID != "uid" {
		t.Errorf("owner references %+v, want the object's", dep.OwnerReferences)
	}
}

// BenchmarkExpected: the cost of one Expected, the reason the controller uses Build instead.
func BenchmarkExpected(b *testing.B) {
	d := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 3, Port: 8080, ContainerPort: 8080, Image: "img:1",
		ServiceType: api.ServiceTypeClusterIP, ConfigMapData: map[string]string{"k": "v"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Expected(d); err != nil {
			b.Fatal(err)
		}
	}
}

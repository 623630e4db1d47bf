package watcher

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// TestCompareFollowsDeclare pins drift's compare to what the program declares: for each spec,
// the objects Declare makes (infra.Expected, the program run against Pulumi's mocks) show no
// drift, and each field compare reads, changed in them, shows some. A rule of Declare that
// compare did not follow (a new default, the headless Service's ClusterIP None) fails here.
func TestCompareFollowsDeclare(t *testing.T) {
	base := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 2, Port: 8080, ContainerPort: 8080, Image: api.DefaultImage,
		ServiceType: api.ServiceTypeClusterIP, RolloutOnConfigChange: true, OwnerUID: "uid"}
	specs := map[string]func(*api.Desired){
		"defaults":        func(*api.Desired) {},
		"headless":        func(d *api.Desired) { d.ServiceType = api.ServiceTypeHeadless },
		"NodePort":        func(d *api.Desired) { d.ServiceType = api.ServiceTypeNodePort },
		"LoadBalancer":    func(d *api.Desired) { d.ServiceType = api.ServiceTypeLoadBalancer },
		"zero replicas":   func(d *api.Desired) { d.ReplicaCount = 0 },
		"own image, port": func(d *api.Desired) { d.Image, d.ContainerPort, d.Port = "registry.example/app:2", 9090, 80 },
		"data":            func(d *api.Desired) { d.ConfigMapData = map[string]string{"hostports": "a,1\n", "k": "v"} },
		"envFrom, no rolls": func(d *api.Desired) {
			d.RolloutOnConfigChange = false
			d.EnvFrom = []api.EnvRef{{Kind: api.EnvKindSecret, Name: "s"}}
			d.EnvDigest = "abc"
		},
	}
	changes := map[string]func(o *infra.Objects){
		"replicas":       func(o *infra.Objects) { n := *o.Deployment.Spec.Replicas + 1; o.Deployment.Spec.Replicas = &n },
		"image":          func(o *infra.Objects) { o.Deployment.Spec.Template.Spec.Containers[0].Image = "other:1" },
		"container port": func(o *infra.Objects) { o.Deployment.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort++ },
		"service type": func(o *infra.Objects) {
			o.Service.Spec.Type = map[bool]corev1.ServiceType{true: corev1.ServiceTypeClusterIP, false: corev1.ServiceTypeNodePort}[o.Service.Spec.Type == corev1.ServiceTypeNodePort]
		},
		"headless flipped": func(o *infra.Objects) {
			o.Service.Spec.ClusterIP = map[bool]string{true: "", false: corev1.ClusterIPNone}[o.Service.Spec.ClusterIP == corev1.ClusterIPNone]
		},
		"service port":       func(o *infra.Objects) { o.Service.Spec.Ports[0].Port++ },
		"data":               func(o *infra.Objects) { o.ConfigMap.Data = map[string]string{"changed": "by hand"} },
		"Deployment deleted": func(o *infra.Objects) { o.Deployment = nil },
		"Service deleted":    func(o *infra.Objects) { o.Service = nil },
		"ConfigMap deleted":  func(o *infra.Objects) { o.ConfigMap = nil },
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			d := base
			spec(&d)
			declared := func() infra.Objects {
				o, err := infra.Expected(d)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			o := declared()
			if diffs := compare(d, o.Deployment, o.Service, o.ConfigMap); len(diffs) != 0 {
				t.Fatalf("what Declare declares shows drift: %v", diffs)
			}
			for what, change := range changes {
				o := declared()
				change(&o)
				if diffs := compare(d, o.Deployment, o.Service, o.ConfigMap); len(diffs) == 0 {
					t.Errorf("%s changed: no drift found", what)
				}
			}
		})
	}
}

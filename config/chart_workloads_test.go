package config_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestChartWorkloadNetworkPolicy: workloadNetworkPolicy puts one NetworkPolicy in each listed
// namespace that selects the pods the program declares there (infra.Build's pod template, of
// the default image and of another one), not the operator's own, and admits ingress only to
// their named http port from the given peers (by default the namespace's own pods); off by
// default; refused without namespaces or peers; and accepted by the API server.
func TestChartWorkloadNetworkPolicy(t *testing.T) {
	policies := func(objs []*unstructured.Unstructured) []*networkingv1.NetworkPolicy {
		var nps []*networkingv1.NetworkPolicy
		for _, o := range objs {
			if o.GetKind() == "NetworkPolicy" && o.GetName() == operatorName+"-workloads" {
				nps = append(nps, convert[networkingv1.NetworkPolicy](t, o))
			}
		}
		return nps
	}
	if objs, err := helmTemplate(t, "--set", "passphrase=x"); err != nil || len(policies(objs)) != 0 {
		t.Fatalf("by default: %v, %d workload policies, want none", err, len(policies(objs)))
	}
	for name, tc := range map[string]struct {
		args    []string
		wantErr string
	}{
		"no namespaces":            {args: []string{"--set", "workloadNetworkPolicy.enabled=true"}, wantErr: "/workloadNetworkPolicy/namespaces': minItems"},
		"no namespaces, no schema": {args: []string{"--set", "workloadNetworkPolicy.enabled=true", "--skip-schema-validation"}, wantErr: "workloadNetworkPolicy.enabled needs workloadNetworkPolicy.namespaces"},
		"no peers": {args: []string{"--set", "workloadNetworkPolicy.enabled=true", "--set", "workloadNetworkPolicy.namespaces={a}", "--set", "workloadNetworkPolicy.from=null"},
			wantErr: "workloadNetworkPolicy.enabled needs workloadNetworkPolicy.from"},
		"a namespace not a name": {args: []string{"--set", "workloadNetworkPolicy.enabled=true", "--set", "workloadNetworkPolicy.namespaces={Team_A}"}, wantErr: "/workloadNetworkPolicy/namespaces/0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := helmTemplate(t, append([]string{"--set", "passphrase=x"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("helm template = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}

	c := testenv.Connect(t)
	ns := c.Namespace(t)
	objs, err := helmTemplate(t, "--set", "passphrase=x", "--set", "workloadNetworkPolicy.enabled=true",
		"--set", "workloadNetworkPolicy.namespaces={team-a,"+ns+"}")
	if err != nil {
		t.Fatal(err)
	}
	nps := policies(objs)
	var got []string
	for _, np := range nps {
		got = append(got, np.Namespace)
	}
	if !slices.Equal(got, []string{"team-a", ns}) {
		t.Fatalf("workload policies in %v, want team-a and %s", got, ns)
	}
	np := nps[1]
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() {
		t.Fatalf("podSelector %v: %v", np.Spec.PodSelector, err)
	}
	for _, image := range []string{api.DefaultImage, "measutosh/http-server:latest"} {
		d := api.Desired{Namespace: ns, Name: "web", Image: image, ContainerPort: 8080, Port: 80, ReplicaCount: 1, ServiceType: api.ServiceTypeClusterIP}
		pod := infra.Build(d).Deployment.Spec.Template
		if !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("the policy (%v) does not select the pods of image %s (labels %v)", np.Spec.PodSelector, image, pod.Labels)
		}
		if !slices.ContainsFunc(pod.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == infra.PortName }) {
			t.Errorf("the pods of image %s have no port named %s for the policy to admit", image, infra.PortName)
		}
	}
	operatorPod := mustFind(t, objs, "Deployment", operatorName)
	podLabels, _, _ := unstructured.NestedStringMap(operatorPod.Object, "spec", "template", "metadata", "labels")
	if sel.Matches(labels.Set(podLabels)) {
		t.Errorf("the workload policy selects the operator's pod (labels %v)", podLabels)
	}
	tcp := corev1.ProtocolTCP
	port := intstr.FromString(infra.PortName)
	want := []networkingv1.NetworkPolicyIngressRule{{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
	}}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || !reflect.DeepEqual(np.Spec.Ingress, want) {
		t.Errorf("policyTypes %v, ingress %s: want Ingress, the http port, from the namespace's pods", np.Spec.PolicyTypes, toYAML(np.Spec.Ingress))
	}
	if _, err := c.Kube.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), np,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the API server refuses the chart's workload NetworkPolicy: %v\n%s", err, toYAML(np))
	}
}

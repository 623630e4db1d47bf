package infra

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ProviderVersion is the version of the Kubernetes provider plugin (pulumi-resource-kubernetes)
// every object is registered with, so the engine loads exactly this plugin: the version the
// Pulumi Kubernetes SDK's constructors ask for, which is the SDK's version in go.mod
// (TestDeclareIsTypedSDK compares the registrations, stack's TestKubernetesPluginVersionMatchesSDK
// the versions).
const ProviderVersion = "4.33.0"

// ProviderEnv is the environment the Kubernetes provider plugin must run with, the same for
// every caller (watcher and commands), so that they all plan the same changes.
// ConfigMaps are updated in place (the provider's default replaces them on every data change,
// which would delete and re-create the ConfigMap the pods mount).
func ProviderEnv() map[string]string {
	return map[string]string{"PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE": "true"}
}

// kind is one Kubernetes object type as the Kubernetes provider registers it.
type kind struct {
	token      string // the provider's resource type token, e.g. "kubernetes:apps/v1:Deployment"
	apiVersion string // the object's apiVersion input
	kind       string // the object's kind input
	// aliases are the type's earlier tokens, with which the SDK registers it so that a stack
	// made under one of them keeps its object.
	aliases []pulumi.Alias
}

// The three kinds the program declares, as the SDK's constructors (corev1.NewConfigMap,
// appsv1.NewDeployment, corev1.NewService) register them.
var (
	configMap  = kind{token: "kubernetes:core/v1:ConfigMap", apiVersion: "v1", kind: "ConfigMap"}
	deployment = kind{token: "kubernetes:apps/v1:Deployment", apiVersion: "apps/v1", kind: "Deployment",
		aliases: []pulumi.Alias{
			{Type: pulumi.String("kubernetes:apps/v1beta1:Deployment")},
			{Type: pulumi.String("kubernetes:apps/v1beta2:Deployment")},
			{Type: pulumi.String("kubernetes:extensions/v1beta1:Deployment")},
		}}
	service = kind{token: "kubernetes:core/v1:Service", apiVersion: "v1", kind: "Service"}
)

// object is a registered Kubernetes object's state: the two outputs the program reads, each the
// object's field as the provider returns it (a map[string]any once resolved).
type object struct {
	pulumi.CustomResourceState
	Metadata pulumi.AnyOutput `pulumi:"metadata"`
	Spec     pulumi.AnyOutput `pulumi:"spec"`
}

// register registers one object of kind k under the logical name name, with inputs (its
// metadata, spec or data; apiVersion and kind are added here) and opts.
//
// It does what the Pulumi Kubernetes SDK's typed constructors do (the type token, apiVersion
// and kind, the provider version first and the kind's aliases last), by hand: linking those
// constructors and their typed arguments would add the whole typed SDK to the operator's binary
// for three object types (docs/design/engine-host.md, "The image", has the size);
// TestDeclareIsTypedSDK holds every registration equal to the SDK's. Errors: the SDK's
// RegisterResource (a closed or failed engine connection).
func register(ctx *pulumi.Context, k kind, name string, inputs pulumi.Map, opts ...pulumi.ResourceOption) (*object, error) {
	inputs["apiVersion"] = pulumi.String(k.apiVersion)
	inputs["kind"] = pulumi.String(k.kind)
	all := append([]pulumi.ResourceOption{pulumi.Version(ProviderVersion)}, opts...)
	if len(k.aliases) > 0 {
		all = append(all, pulumi.Aliases(k.aliases))
	}
	var o object
	if err := ctx.RegisterResource(k.token, name, inputs, &o, all...); err != nil {
		return nil, err
	}
	return &o, nil
}

// field is the string at key of an object output (metadata or spec): "" when the provider
// returned no such string, unknown while the object is (in a preview).
func field(o pulumi.AnyOutput, key string) pulumi.StringOutput {
	return o.ApplyT(func(v any) string {
		m, _ := v.(map[string]any)
		s, _ := m[key].(string)
		return s
	}).(pulumi.StringOutput)
}

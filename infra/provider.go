package infra

// ProviderVersion is the version of the Kubernetes provider plugin (pulumi-resource-kubernetes)
// every object is registered with, so the engine loads exactly this plugin: the version the
// Pulumi Kubernetes SDK's constructors ask for, which is the SDK's version in go.mod (stack's
// TestKubernetesPluginVersionMatchesSDK compares them; TestRegistrationsGolden pins the
// registrations).
const ProviderVersion = "4.33.0"

// ProviderEnv is the environment the Kubernetes provider plugin must run with, the same for
// every caller (watcher and commands), so that they all plan the same changes.
// ConfigMaps are updated in place (the provider's default replaces them on every data change,
// which would delete and re-create the ConfigMap the pods mount).
func ProviderEnv() map[string]string {
	return map[string]string{"PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE": "true"}
}

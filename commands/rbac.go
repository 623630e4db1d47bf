package commands

// The RBAC of `watch` itself, beyond the watcher's, as a +kubebuilder:rbac marker: `make
// manifests` (controller-gen) generates ClusterRole pulumi-operator-cluster-name in
// config/rbac/cluster_name_role.yaml from it; the Helm chart's templates/rbac.yaml grants the
// same unless clusterName is set (config/manifests_test.go checks both). The watcher's rules are
// in watcher/rbac.go.

// clusterNameFromUID (stackmanager.go) names the cluster, the first part of every stack name,
// after the kube-system namespace's UID: one Get of that one namespace. Not needed with
// --cluster-name.
// +kubebuilder:rbac:groups=core,resources=namespaces,resourceNames=kube-system,verbs=get

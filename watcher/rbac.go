package watcher

// The operator's RBAC in the namespaces it reconciles, as +kubebuilder:rbac markers: `make
// manifests` (controller-gen) generates ClusterRole pulumi-operator-manager in
// config/rbac/role.yaml from them, and the Helm chart's templates/rbac.yaml grants the same
// (config/manifests_test.go checks both). Each rule comes from an API call this package makes
// or one of the Pulumi Kubernetes provider, which runs with the same credentials; nothing here
// writes a Secret, touches RBAC, or creates or deletes a KindCustomHttp: those stay with their
// owners. The Lease for --leader-elect is a namespaced Role, config/rbac/leader_election_role.yaml.

// KindCustomHttp: the dynamic informer lists and watches; the finalizer is added and removed
// with a merge patch of the finalizers alone (finalizer.go), after a Get of the newest version
// when a removal conflicts. Nothing updates the whole object.
// +kubebuilder:rbac:groups=groupsp.measutosh.dev,resources=kindcustomhttps,verbs=get;list;watch;patch

// Conditions, outputs and the last update go through the status subresource (UpdateStatus).
// +kubebuilder:rbac:groups=groupsp.measutosh.dev,resources=kindcustomhttps/status,verbs=update

// The objects each stack owns. The watcher: informers selected by the managed-by label (list,
// watch) and live reads that confirm drift (get); for ConfigMaps also spec.envFrom (below).
// The provider: server-side apply (patch; create when it creates without apply), refresh and
// reads after apply (get), delete with a watch on the object until it is gone (list, watch).
// Nothing uses PUT (update).
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=core,resources=services;configmaps,verbs=get;list;watch;create;patch;delete

// The provider's Deployment await (up returns once the new pods are available) runs informers on
// the Deployment's ReplicaSets, Pods and PersistentVolumeClaims; it never changes them. The
// takeover of the original operator's objects (handover.go) labels that operator's ReplicaSets
// and pods (patch) and deletes its ReplicaSets once their pods left the Service (delete); the
// patch on pods gives nothing the patch on Deployments does not already give.
// +kubebuilder:rbac:groups=apps,resources=replicasets,verbs=list;watch;patch;delete
// +kubebuilder:rbac:groups=core,resources=pods,verbs=list;watch;patch
// +kubebuilder:rbac:groups=core,resources=persistentvolumeclaims,verbs=list;watch

// Events on the KindCustomHttp through client-go's recorder: core/v1 Events, created, and
// patched when an Event repeats. Not events.k8s.io.
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch

// spec.envFrom: nothing on Secrets here. The operator reads Secrets only in the namespaces of
// --secret-namespaces, where ClusterRole pulumi-operator-secret-reader
// (config/rbac/secret_reader_role.yaml) is bound by whoever grants it; ConfigMaps are read with
// the owned-objects rule above.

// At start the watcher looks for the admission policy that stops the confused deputy
// (admission.go: list, by label, both cluster-scoped and holding no data).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=list

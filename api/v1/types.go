// Package v1 holds the KindCustomHttp API (group groupsp.measutosh.dev, version v1): the Go
// types, their defaults, their validation and the conversion from the unstructured objects
// that the dynamic client hands out.
//
// The spec keeps the fields of the kubebuilder operator this project replaces with their exact
// names and meaning (replicaCount and port required, configMapData optional), so that existing
// manifests apply unchanged (../shared/ORIGINAL-SYSTEM.md). Every field added since is optional
// and defaulted.
//
// The CRD (config/crd) is generated from these types by controller-gen (`make manifests`): the
// +kubebuilder markers below set its validation, printer columns and subresources, and every
// field's doc comment becomes its description in `kubectl explain`. The package markers are in
// groupversion_info.go.
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Identity of the API. The group, version, kind and plural are those of the original operator
// and must never change: users' manifests and stored objects name them.
const (
	Group    = "groupsp.measutosh.dev"
	Version  = "v1"
	Kind     = "KindCustomHttp"
	ListKind = "KindCustomHttpList"
	Resource = "kindcustomhttps"
	Singular = "kindcustomhttp"
)

// GroupVersion is groupsp.measutosh.dev/v1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// GroupVersionResource is what the dynamic client and informers are keyed by.
var GroupVersionResource = GroupVersion.WithResource(Resource)

// GroupVersionKind is the kind every KindCustomHttp document carries.
var GroupVersionKind = GroupVersion.WithKind(Kind)

// ServiceType says how the Service in front of the pods is exposed.
//
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer;Headless
type ServiceType string

// The service types a spec may name. Headless is the original operator's behaviour
// (clusterIP: None); ClusterIP is the default because it gives a stable virtual address.
const (
	ServiceTypeClusterIP    ServiceType = "ClusterIP"
	ServiceTypeNodePort     ServiceType = "NodePort"
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
	ServiceTypeHeadless     ServiceType = "Headless"
)

// KindCustomHttp asks for one http-server Deployment, its Service and its ConfigMap, all in the
// object's namespace and owned by one Pulumi stack.
//
// Its name is also its Service's name, so it must be a DNS-1035 label (the CEL rule below, the
// same check as Validate's): the apiserver rejects at admission a name the Service could not have.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=kindcustomhttps,singular=kindcustomhttp,shortName=kch,scope=Namespaced,categories=pulumi
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicaCount`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.port`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Stack",type=string,priority=1,JSONPath=`.status.stack`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name is also the Service's name: at most 63 characters, lower-case letters, digits and '-', starting with a letter and ending with a letter or digit"
type KindCustomHttp struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's standard metadata. Its name is also the name of the Service and
	// the Deployment, and "<name>-configmap" that of the ConfigMap.
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Not required by the schema (it never was): an object without spec is admitted and
	// Stalled by the operator, which names the missing fields.

	// spec is the http server asked for: replicaCount and port are required.
	// +optional
	Spec KindCustomHttpSpec `json:"spec"`
	// status is what the operator last did and saw; written only by the operator.
	Status KindCustomHttpStatus `json:"status,omitempty"`
}

// KindCustomHttpSpec is the desired state. Pointers mark the fields whose absence differs
// from their zero value (a user may ask for 0 replicas; port 0 is never valid and is caught by
// validation).
// +kubebuilder:object:generate=true
type KindCustomHttpSpec struct {
	// The bounds below are the constants of desired.go (MaxReplicaCount, MaxPort,
	// MaxConfigMapDataKeys, MaxConfigMapDataBytes, MaxImageLength), whose comments say where
	// each comes from; markers take only literals. Validate checks the same. The CEL rule on
	// configMapData counts characters: counting bytes (bytes(v).size()) costs, in the
	// apiserver's static estimate, a tenth of the longest value possible for each of the 1024
	// keys, which is over its CEL budget for a CRD.

	// replicaCount is the number of http-server pods, 0 to 5000 (a pod per node of the largest
	// cluster Kubernetes supports). Required.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5000
	ReplicaCount *int32 `json:"replicaCount"`
	// port is the Service port, 1 to 65535. Required.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port"`
	// configMapData is copied into ConfigMap <name>-configmap and mounted as files under
	// /config in each pod, one file per key. Key "hostports" holds the peers to ping, one
	// "host,port" a line. At most 1024 keys, each a file name ([-._a-zA-Z0-9]+, at most 253
	// characters, not "." or ".."), and values of at most 1 MiB (1048576 bytes) in all, the
	// limit of a ConfigMap. The apiserver counts that size in characters at admission; the
	// operator counts it in bytes, as the apiserver does for the ConfigMap, and stalls an object
	// whose multi-byte characters take it over.
	// +kubebuilder:validation:MaxProperties=1024
	// +kubebuilder:validation:XValidation:rule="self.map(k, self[k].size()).sum() <= 1048576",message="the values of configMapData may hold at most 1048576 characters (1 MiB) in all, the limit of a ConfigMap"
	ConfigMapData map[string]string `json:"configMapData,omitempty"`
	// image is the http-server container image, without white space, at most 1024 characters
	// (an image reference has at most 520). Default: this project's http server
	// (cmd/http-server) at the operator's version (DefaultImage).
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`
	// containerPort is the port the server listens on inside the pod and the Service's target,
	// 1 to 65535. Default 8080, where the http server listens (the original operator targeted
	// 80, where nothing listened).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort *int32 `json:"containerPort,omitempty"`
	// serviceType says how the Service is exposed: ClusterIP (default), NodePort, LoadBalancer
	// or Headless (clusterIP None, as the original operator made it). The operator creates the
	// Service with its own rights, so NodePort and LoadBalancer, which expose the pods outside
	// the cluster, are reconciled only where the operator's administrator allows them (watch
	// --allow-service-types); elsewhere the object is Stalled with reason ServiceTypeNotAllowed.
	ServiceType ServiceType `json:"serviceType,omitempty"`
	// envFrom names ConfigMaps and Secrets of the object's namespace whose keys become the
	// container's environment (as a Pod's envFrom), at most 16 (MaxEnvFrom). Their contents
	// never enter the Pulumi state: only their names and a digest of their data do, and a
	// change of the data rolls the pods.
	// +kubebuilder:validation:MaxItems=16
	EnvFrom []EnvFromSource `json:"envFrom,omitempty"`
	// rolloutOnConfigChange rolls the pods when configMapData changes, through a digest of the
	// data in the pod template. Set false for servers that reload /config by themselves (the
	// kubelet updates the mounted files within about a minute). Default true.
	RolloutOnConfigChange *bool `json:"rolloutOnConfigChange,omitempty"`
	// suspend pauses reconciliation: no up and no drift repair while true (a delete still
	// destroys the stack). Default false.
	Suspend bool `json:"suspend,omitempty"`
}

// ReconcileRequestAnnotation asks for an immediate reconcile with a refresh when its value
// changes (any string, by convention a time stamp), as Flux's reconcile.fluxcd.io/requestedAt
// does; status.lastHandledReconcileAt echoes the value handled.
const ReconcileRequestAnnotation = "groupsp.measutosh.dev/reconcile-requested-at"

// OnMissingStackAnnotation says what the operator does when a KindCustomHttp being deleted has
// no stack in the backend while objects it created still exist (a changed backend URL or
// cluster name, a restored volume): without it the finalizer stays and Ready is False with
// reason StackMissing; OnMissingStackOrphan leaves the objects where they are (their
// ownerReference to the KindCustomHttp removed, so the garbage collector keeps them) and lets
// the delete finish; OnMissingStackDelete deletes them (by their labels) and lets it finish;
// OnMissingStackAdopt rebuilds the stack from them by a Pulumi import that changes nothing and
// destroys it as usual. All three act only on objects with an ownerReference to that very
// KindCustomHttp's UID. (While the object lives, no annotation is needed: its next up creates a
// new stack over its live objects, infra.Adopt says why not by import.)
const OnMissingStackAnnotation = "groupsp.measutosh.dev/on-missing-stack"

// AdoptOriginalAnnotation, set to "true" on a KindCustomHttp, lets the operator take over the
// Deployment, Service and ConfigMap that the original operator (http-go-operator) made for it,
// without a failed request (README "Switching from http-go-operator"); the operator's
// --adopt-original flag does the same for every object. Without either, such objects are
// refused as any object the operator did not make (reason ObjectConflict).
const AdoptOriginalAnnotation = "groupsp.measutosh.dev/adopt-original"

// Values of OnMissingStackAnnotation.
const (
	OnMissingStackOrphan = "orphan"
	OnMissingStackDelete = "delete"
	OnMissingStackAdopt  = "adopt"
)

// EnvFromSource is one ConfigMap or Secret whose keys become environment variables: exactly
// one of configMapRef and secretRef is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.configMapRef) != has(self.secretRef)",message="set exactly one of configMapRef and secretRef"
// +kubebuilder:object:generate=true
type EnvFromSource struct {
	// prefix is prepended to every key (a C identifier prefix, optional).
	// +kubebuilder:validation:MaxLength=253
	Prefix string `json:"prefix,omitempty"`
	// configMapRef names a ConfigMap whose keys become environment variables.
	ConfigMapRef *LocalObject `json:"configMapRef,omitempty"`
	// secretRef names a Secret whose keys become environment variables.
	SecretRef *LocalObject `json:"secretRef,omitempty"`
}

// LocalObject names an object in the KindCustomHttp's namespace.
// +kubebuilder:object:generate=true
type LocalObject struct {
	// name is the object's name in the KindCustomHttp's namespace.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KindCustomHttpStatus is written only by the operator, through the status subresource.
// +kubebuilder:object:generate=true
type KindCustomHttpStatus struct {
	// observedGeneration is the metadata.generation the conditions describe.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are Ready, Reconciling and Stalled, with kstatus meaning: Ready True once the
	// stack is up to date and every replica is available; Reconciling True while work is under
	// way; Stalled True when nothing will happen until the spec changes. The reason says why.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// stack is the Pulumi stack that owns the objects, as `pulumi stack select` takes it:
	// "organization/<project>/<stack>" on a DIY backend, "<org>/<project>/<stack>" on Pulumi Cloud.
	Stack string `json:"stack,omitempty"`
	// lastUpdate describes the last Pulumi operation run for this object.
	LastUpdate *UpdateStatus `json:"lastUpdate,omitempty"`
	// outputs are the stack's outputs after the last successful up.
	Outputs *Outputs `json:"outputs,omitempty"`
	// appliedDigest is a digest of everything that determined the last successful up (spec,
	// program version, stack); the operator skips an up when it is unchanged.
	AppliedDigest string `json:"appliedDigest,omitempty"`
	// appliedProgramVersion is the operator's program version (infra.ProgramVersion) that made
	// the last successful up. An up whose only cause is a newer program version runs at the
	// operator's program-upgrade pace (--program-upgrades-per-minute), after other work.
	AppliedProgramVersion string `json:"appliedProgramVersion,omitempty"`
	// replicas is the desired number of pods.
	Replicas int32 `json:"replicas,omitempty"`
	// readyReplicas is the number of ready pods, as the Deployment reports it.
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// availableReplicas is the number of available pods, as the Deployment reports it.
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// lastHandledReconcileAt is the value of the groupsp.measutosh.dev/reconcile-requested-at
	// annotation (ReconcileRequestAnnotation) last acted on.
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
	// admission records the spec whose spec.envFrom references condition ReferencesChecked
	// judges, and the admission policy in force then; absent while spec.envFrom is empty.
	Admission *AdmissionStatus `json:"admission,omitempty"`
}

// AdmissionStatus records what the operator last judged about who was checked for the
// references of the spec (condition ReferencesChecked): the admission policy asks the writer of
// any change of spec but replicaCount and suspend for get on every Secret and ConfigMap
// spec.envFrom names, and a spec written while no policy was in force was asked nothing.
// +kubebuilder:object:generate=true
type AdmissionStatus struct {
	// specDigest identifies the spec judged, without replicaCount and suspend (which anyone who
	// may write the object may change unasked): the SHA-256 of its JSON, in hex.
	SpecDigest string `json:"specDigest,omitempty"`
	// checked is whether that spec's writer was checked by the policy below.
	Checked bool `json:"checked,omitempty"`
	// policy is the admission policy that was in force at the judgement; empty when none was.
	Policy string `json:"policy,omitempty"`
	// policySince is when that policy came into force, as the operator counts it: the later
	// creation of the policy and its binding, plus the time an API server may take to load them.
	PolicySince *metav1.Time `json:"policySince,omitempty"`
}

// UpdateStatus describes one Pulumi operation. The operator always writes kind, result,
// startTime and endTime; the schema does not require them (it never did), so that a value left
// empty cannot make the operator's own status write fail.
// +kubebuilder:object:generate=true
type UpdateStatus struct {
	// kind is the operation: "up" or "destroy".
	// +optional
	Kind string `json:"kind"`
	// result is "succeeded" or "failed".
	// +optional
	Result string `json:"result"`
	// startTime is when the operation started.
	// +optional
	StartTime metav1.Time `json:"startTime"`
	// endTime is when the operation ended.
	// +optional
	EndTime metav1.Time `json:"endTime"`
	// resourceChanges counts resources by kind of change ("create", "update", "same", ...).
	ResourceChanges map[string]int `json:"resourceChanges,omitempty"`
	// message is the error of a failed operation, trimmed to a readable length.
	Message string `json:"message,omitempty"`
}

// Outputs are the stack outputs the operator publishes in status.
// +kubebuilder:object:generate=true
type Outputs struct {
	// configMapName is the name of the ConfigMap the stack owns, "<name>-configmap".
	ConfigMapName string `json:"configMapName,omitempty"`
	// deploymentName is the name of the Deployment the stack owns.
	DeploymentName string `json:"deploymentName,omitempty"`
	// serviceName is the name of the Service the stack owns.
	ServiceName string `json:"serviceName,omitempty"`
	// clusterIP is the Service's virtual address; "None" for a headless Service.
	ClusterIP string `json:"clusterIP,omitempty"`
}

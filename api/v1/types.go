// Package v1 holds the KindCustomHttp API (group groupsp.measutosh.dev, version v1): the Go
// types, their defaults, their validation and the conversion from the unstructured objects
// that the dynamic client hands out.
//
// The spec's required fields (replicaCount, port, configMapData) keep the exact names and
// meaning of the kubebuilder operator this project replaces, so that existing manifests apply
// unchanged (../shared/ORIGINAL-SYSTEM.md). Every field added since is optional and defaulted.
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
type KindCustomHttp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KindCustomHttpSpec   `json:"spec"`
	Status KindCustomHttpStatus `json:"status,omitempty"`
}

// KindCustomHttpSpec is the desired state. Pointers mark the fields whose absence differs
// from their zero value (a user may ask for 0 replicas; port 0 is never valid and is caught by
// validation).
type KindCustomHttpSpec struct {
	// ReplicaCount is the number of http-server pods, 0 to MaxReplicas. Required.
	ReplicaCount *int32 `json:"replicaCount"`
	// Port is the Service port, 1 to 65535. Required.
	Port *int32 `json:"port"`
	// ConfigMapData is copied into ConfigMap <name>-configmap and mounted as files under
	// /config in each pod, one file per key. Key "hostports" holds the peers to ping, one
	// "host,port" a line.
	ConfigMapData map[string]string `json:"configMapData,omitempty"`
	// Image is the http-server container image. Default DefaultImage.
	Image string `json:"image,omitempty"`
	// ContainerPort is the port the server listens on inside the pod and the Service's target,
	// 1 to 65535. Default 8080, where the http server listens (the original operator targeted
	// 80, where nothing listened).
	ContainerPort *int32 `json:"containerPort,omitempty"`
	// ServiceType is ClusterIP (default), NodePort, LoadBalancer or Headless.
	ServiceType ServiceType `json:"serviceType,omitempty"`
	// EnvFrom names ConfigMaps and Secrets of the object's namespace whose keys become the
	// container's environment (as a Pod's envFrom). Their contents never enter the Pulumi state:
	// only their names and a digest of their data do, and a change of the data rolls the pods.
	EnvFrom []EnvFromSource `json:"envFrom,omitempty"`
	// RolloutOnConfigChange rolls the pods when configMapData changes, through a digest of the
	// data in the pod template. Set false for servers that reload /config by themselves (the
	// kubelet updates the mounted files within about a minute). Default true.
	RolloutOnConfigChange *bool `json:"rolloutOnConfigChange,omitempty"`
	// Suspend pauses reconciliation: no up and no drift repair while true (a delete still
	// destroys the stack). Default false.
	Suspend bool `json:"suspend,omitempty"`
}

// ReconcileRequestAnnotation asks for an immediate reconcile with a refresh when its value
// changes (any string, by convention a time stamp), as Flux's reconcile.fluxcd.io/requestedAt
// does; status.lastHandledReconcileAt echoes the value handled.
const ReconcileRequestAnnotation = "groupsp.measutosh.dev/reconcile-requested-at"

// EnvFromSource is one ConfigMap or Secret whose keys become environment variables. Exactly
// one of ConfigMapRef and SecretRef is set.
type EnvFromSource struct {
	// Prefix is prepended to every key (a C identifier prefix, optional).
	Prefix       string       `json:"prefix,omitempty"`
	ConfigMapRef *LocalObject `json:"configMapRef,omitempty"`
	SecretRef    *LocalObject `json:"secretRef,omitempty"`
}

// LocalObject names an object in the KindCustomHttp's namespace.
type LocalObject struct {
	Name string `json:"name"`
}

// KindCustomHttpStatus is written only by the operator, through the status subresource.
type KindCustomHttpStatus struct {
	// ObservedGeneration is the metadata.generation the conditions describe.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Ready, Reconciling and Stalled, with kstatus meaning.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Stack is the Pulumi stack that owns the objects, "<project>/<stack>".
	Stack string `json:"stack,omitempty"`
	// LastUpdate describes the last Pulumi operation run for this object.
	LastUpdate *UpdateStatus `json:"lastUpdate,omitempty"`
	// Outputs are the stack's outputs after the last successful up.
	Outputs *Outputs `json:"outputs,omitempty"`
	// AppliedDigest is a digest of everything that determined the last successful up (spec,
	// program version, stack); the watcher skips an up when it is unchanged.
	AppliedDigest string `json:"appliedDigest,omitempty"`
	// Replicas is the desired number of pods; ReadyReplicas and AvailableReplicas are what
	// the Deployment reports.
	Replicas          int32 `json:"replicas,omitempty"`
	ReadyReplicas     int32 `json:"readyReplicas,omitempty"`
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// LastHandledReconcileAt is the value of ReconcileRequestAnnotation last acted on.
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// UpdateStatus describes one Pulumi operation.
type UpdateStatus struct {
	// Kind is the operation: "up" or "destroy".
	Kind string `json:"kind"`
	// Result is "succeeded" or "failed".
	Result string `json:"result"`
	// StartTime and EndTime bound the operation.
	StartTime metav1.Time `json:"startTime"`
	EndTime   metav1.Time `json:"endTime"`
	// ResourceChanges counts resources by kind of change ("create", "update", "same", ...).
	ResourceChanges map[string]int `json:"resourceChanges,omitempty"`
	// Message is the error of a failed operation, trimmed to a readable length.
	Message string `json:"message,omitempty"`
}

// Outputs are the stack outputs the operator publishes in status.
type Outputs struct {
	ConfigMapName  string `json:"configMapName,omitempty"`
	DeploymentName string `json:"deploymentName,omitempty"`
	ServiceName    string `json:"serviceName,omitempty"`
	// ClusterIP is the Service's virtual address; "None" for a headless Service.
	ClusterIP string `json:"clusterIP,omitempty"`
}

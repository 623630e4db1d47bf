// Package infra is the Pulumi program of one KindCustomHttp: a pure function from its desired
// state to the ConfigMap, Deployment and Service it declares. It is the only package that
// declares Kubernetes resources (registers the Kubernetes provider's resource types;
// internal/boundaries enforces it); the watcher, the commands and the tests all run the same
// program.
package infra

import (
	"fmt"
	"path"
	"slices"

	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// ProgramVersion names what this program declares. Bump it whenever a change here would
// change a stack's resources for an unchanged spec: the watcher includes it in the digest of
// what it applied, so a bump re-runs up on every stack once, and nothing else does.
const ProgramVersion = "6"

// Label keys and values on every object the program declares. Selector uses only name and
// instance (the Deployment selector is immutable); instance is the CR's name, so two
// KindCustomHttps in one namespace never select each other's pods (the original hard-coded
// app: measutosh-http-server for all).
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AppName is the value of LabelName.
	AppName = "http-server"
	// ManagedBy is the value of LabelManagedBy; the watcher selects owned objects by it.
	ManagedBy = "pulumi-operator"
)

// Names of the pod template's parts, kept from the original operator where it had them.
const (
	ContainerName = "http-server"
	PortName      = "http"
	VolumeName    = "config-volume"
)

// ConfigDigestAnnotation on the pod template carries Desired.ConfigDigest, so a change of
// configMapData rolls the pods (unless spec.rolloutOnConfigChange is false).
const ConfigDigestAnnotation = "groupsp.measutosh.dev/config-digest"

// EnvDigestAnnotation on the pod template carries Desired.EnvDigest, so a change of the data of
// an envFrom ConfigMap or Secret rolls the pods (always: environment is read only at start).
const EnvDigestAnnotation = "groupsp.measutosh.dev/env-digest"

// NonRootUID is the user and group the container runs as (the distroless "nonroot" user).
const NonRootUID = 65532

// Stack output keys.
const (
	OutputNamespace      = "namespace"
	OutputConfigMapName  = "configMapName"
	OutputDeploymentName = "deploymentName"
	OutputServiceName    = "serviceName"
	OutputClusterIP      = "clusterIP"
)

// Pulumi logical resource names, stable for the life of a stack: renaming one would make
// Pulumi replace the object.
const (
	resConfigMap  = "configmap"
	resDeployment = "deployment"
	resService    = "service"
)

// PeerFileKey is the ConfigMap key the default image's server reads its peers from, one
// "host,port" a line (the original operator's).
const PeerFileKey = "hostports"

// SelectorLabels returns the labels that select d's pods.
func SelectorLabels(d api.Desired) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: d.Name}
}

// Labels returns the labels put on every object of d: SelectorLabels plus managed-by.
func Labels(d api.Desired) map[string]string {
	l := SelectorLabels(d)
	l[LabelManagedBy] = ManagedBy
	return l
}

// SkipAwait is the annotation that turns off the Kubernetes provider's await of an object:
// an up returns as soon as the apiserver has taken it.
const SkipAwait = "pulumi.com/skipAwait"

// OwnerAPIVersion and OwnerKind are the ownerReference every object of the program carries
// when Desired.OwnerUID is known.
const (
	OwnerAPIVersion = "groupsp.measutosh.dev/v1"
	OwnerKind       = "KindCustomHttp"
)

// Program returns the Pulumi program for d: Declare, nothing more. It reads nothing but d, so
// two calls with equal inputs declare the same resources.
func Program(d api.Desired) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		_, err := Declare(ctx, d)
		return err
	}
}

// Declared is what Declare hands back for a caller that must act once Pulumi has applied the
// objects.
type Declared struct {
	// Deployment is the Deployment's name; it resolves once Pulumi has created or updated it.
	Deployment pulumi.StringOutput
	// Outputs are the stack outputs Declare exported, by key (OutputNamespace, ...).
	Outputs pulumi.StringMap
}

// Declare declares d's ConfigMap, Deployment and Service and exports the stack outputs.
//
// Await choices: no object is awaited (SkipAwait), so an up takes the time of three API writes
// and a rollout that cannot progress (an image that cannot be pulled, a quota) holds no worker
// of the operator for the provider's 10 minutes; the watcher reports the rollout in status
// from the Deployment and its pods (internal/rollout), and the commands a person runs wait for
// it as the provider would (the plain-CLI program through Declared.Deployment, `pulumi-operator
// up` after its up). The annotation is the same for every caller, so the operator and a laptop
// declare the same objects and a preview shows no difference between them. The objects carry
// an ownerReference to their KindCustomHttp (Desired.OwnerUID), so `kubectl tree` and Argo CD
// show them under it and the garbage collector removes them if the KindCustomHttp goes without
// its finalizer. patchForce lets an up take back fields changed by hand (kubectl scale, edit),
// which is how drift is repaired.
func Declare(ctx *pulumi.Context, d api.Desired) (Declared, error) {
	return DeclareAdopting(ctx, d, Adopt{})
}

// DeclareAdopting is Declare with the objects adopt names imported (Adopt); with the zero
// Adopt it declares exactly what Declare does.
func DeclareAdopting(ctx *pulumi.Context, d api.Desired, adopt Adopt) (Declared, error) {
	args := describe(d)
	// Names are fixed (the original's), so a replacement must delete first.
	opts := []pulumi.ResourceOption{pulumi.DeleteBeforeReplace(true)}
	cm, err := corev1.NewConfigMap(ctx, resConfigMap, args.ConfigMap,
		slices.Concat(opts, importOpts(adopt.ConfigMap, d.Namespace, d.ConfigMapName()))...)
	if err != nil {
		return Declared{}, err
	}
	// The ConfigMap exists before the pods that mount it.
	depOpts := slices.Concat([]pulumi.ResourceOption{pulumi.DependsOn([]pulumi.Resource{cm})}, opts,
		importOpts(adopt.Deployment, d.Namespace, d.Name))
	dep, err := appsv1.NewDeployment(ctx, resDeployment, args.Deployment, depOpts...)
	if err != nil {
		return Declared{}, err
	}
	svc, err := corev1.NewService(ctx, resService, args.Service,
		slices.Concat(opts, importOpts(adopt.Service, d.Namespace, d.Name))...)
	if err != nil {
		return Declared{}, err
	}
	return export(ctx, Declared{
		Deployment: dep.Metadata.Name().Elem(),
		Outputs: pulumi.StringMap{
			OutputNamespace:      pulumi.String(d.Namespace),
			OutputConfigMapName:  cm.Metadata.Name().Elem(),
			OutputDeploymentName: dep.Metadata.Name().Elem(),
			OutputServiceName:    svc.Metadata.Name().Elem(),
			OutputClusterIP:      svc.Spec.ClusterIP().Elem(),
		},
	}), nil
}

// export exports d.Outputs as the stack's outputs and returns d.
func export(ctx *pulumi.Context, d Declared) Declared {
	for k, v := range d.Outputs {
		ctx.Export(k, v)
	}
	return d
}

// probePaths returns the liveness and readiness paths: /healthz and /readyz of this
// project's server (the default image); /ping, which the original measutosh/http-server and
// ours both answer, for any other image.
func probePaths(d api.Desired) (liveness, readiness string) {
	if d.Image == api.DefaultImage {
		return "/healthz", "/readyz"
	}
	return "/ping", "/ping"
}

// podAnnotations are the pod template's annotations for d: ConfigDigestAnnotation when
// d.RolloutOnConfigChange, EnvDigestAnnotation when d has envFrom sources; empty, not nil,
// otherwise (the engine has always been sent an empty map there).
func podAnnotations(d api.Desired) pulumi.StringMap {
	a := pulumi.StringMap{}
	if d.RolloutOnConfigChange {
		a[ConfigDigestAnnotation] = pulumi.String(d.ConfigDigest())
	}
	if d.EnvDigest != "" {
		a[EnvDigestAnnotation] = pulumi.String(d.EnvDigest)
	}
	return a
}

// serverArgs are the container's arguments: for the default image, this project's server,
// every setting that depends on the object (where to listen, the peer file, whose directory
// is what GET /config/<key> serves), as flags; the server takes its settings from flags only,
// so nothing spec.envFrom puts into the environment changes what it reads or serves. Nil
// for any other image, which gets the arguments its own image declares (the original
// measutosh/http-server knows no flags).
func serverArgs(d api.Desired) []string {
	if d.Image != api.DefaultImage {
		return nil
	}
	return []string{
		fmt.Sprintf("--listen=:%d", d.ContainerPort),
		"--config=" + path.Join(api.ConfigMountPath, PeerFileKey),
	}
}

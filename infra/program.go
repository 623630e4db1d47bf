// Package infra is the Pulumi program of one KindCustomHttp: a pure function from its desired
// state to the ConfigMap, Deployment and Service it declares. It is the only package that
// declares Kubernetes resources (imports the Pulumi Kubernetes SDK; internal/boundaries
// enforces it); the watcher, the commands and the tests all run the same program.
package infra

import (
	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// ProgramVersion names what this program declares. Bump it whenever a change here would
// change a stack's resources for an unchanged spec: the watcher includes it in the digest of
// what it applied, so a bump re-runs up on every stack once, and nothing else does.
const ProgramVersion = "5"

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

// ProviderEnv is the environment the Kubernetes provider plugin must run with, the same for
// every caller (watcher and commands), so that they all plan the same changes.
// ConfigMaps are updated in place (the provider's default replaces them on every data change,
// which would delete and re-create the ConfigMap the pods mount).
func ProviderEnv() map[string]string {
	return map[string]string{"PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE": "true"}
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

// httpProbe probes path on the container's "http" port every periodSeconds.
func httpProbe(path string, periodSeconds int) *corev1.ProbeArgs {
	return &corev1.ProbeArgs{
		HttpGet:       &corev1.HTTPGetActionArgs{Path: pulumi.String(path), Port: pulumi.String(PortName)},
		PeriodSeconds: pulumi.Int(periodSeconds),
	}
}

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
	labels := pulumi.ToStringMap(Labels(d))
	selector := pulumi.ToStringMap(SelectorLabels(d))
	var owners metav1.OwnerReferenceArray
	if d.OwnerUID != "" {
		owners = metav1.OwnerReferenceArray{&metav1.OwnerReferenceArgs{
			ApiVersion: pulumi.String(OwnerAPIVersion),
			Kind:       pulumi.String(OwnerKind),
			Name:       pulumi.String(d.Name),
			Uid:        pulumi.String(d.OwnerUID),
			Controller: pulumi.Bool(true),
		}}
	}
	meta := func(name string) *metav1.ObjectMetaArgs {
		return &metav1.ObjectMetaArgs{
			Name:            pulumi.String(name),
			Namespace:       pulumi.String(d.Namespace),
			Labels:          labels,
			Annotations:     pulumi.StringMap{"pulumi.com/patchForce": pulumi.String("true"), SkipAwait: pulumi.String("true")},
			OwnerReferences: owners,
		}
	}
	// Names are fixed (the original's), so a replacement must delete first.
	opts := []pulumi.ResourceOption{pulumi.DeleteBeforeReplace(true)}

	cm, err := corev1.NewConfigMap(ctx, resConfigMap, &corev1.ConfigMapArgs{
		Metadata: meta(d.ConfigMapName()),
		Data:     pulumi.ToStringMap(d.ConfigMapData),
	}, opts...)
	if err != nil {
		return Declared{}, err
	}

	// The ConfigMap exists before the pods that mount it.
	depOpts := append([]pulumi.ResourceOption{pulumi.DependsOn([]pulumi.Resource{cm})}, opts...)
	podAnnotations := pulumi.StringMap{}
	if d.RolloutOnConfigChange {
		podAnnotations[ConfigDigestAnnotation] = pulumi.String(d.ConfigDigest())
	}
	if d.EnvDigest != "" {
		podAnnotations[EnvDigestAnnotation] = pulumi.String(d.EnvDigest)
	}
	var envFrom corev1.EnvFromSourceArray
	for _, e := range d.EnvFrom {
		src := &corev1.EnvFromSourceArgs{}
		if e.Prefix != "" {
			src.Prefix = pulumi.String(e.Prefix)
		}
		if e.Kind == api.EnvKindSecret {
			src.SecretRef = &corev1.SecretEnvSourceArgs{Name: pulumi.String(e.Name)}
		} else {
			src.ConfigMapRef = &corev1.ConfigMapEnvSourceArgs{Name: pulumi.String(e.Name)}
		}
		envFrom = append(envFrom, src)
	}
	liveness, readiness := probePaths(d)
	dep, err := appsv1.NewDeployment(ctx, resDeployment, &appsv1.DeploymentArgs{
		Metadata: meta(d.Name),
		Spec: &appsv1.DeploymentSpecArgs{
			Replicas: pulumi.Int(int(d.ReplicaCount)),
			Selector: &metav1.LabelSelectorArgs{MatchLabels: selector},
			Template: &corev1.PodTemplateSpecArgs{
				Metadata: &metav1.ObjectMetaArgs{Labels: labels, Annotations: podAnnotations},
				Spec: &corev1.PodSpecArgs{
					// The http server never calls the Kubernetes API: no token in its pods for a
					// compromised server to use.
					AutomountServiceAccountToken: pulumi.Bool(false),
					SecurityContext: &corev1.PodSecurityContextArgs{
						RunAsNonRoot:   pulumi.Bool(true),
						RunAsUser:      pulumi.Int(NonRootUID),
						RunAsGroup:     pulumi.Int(NonRootUID),
						SeccompProfile: &corev1.SeccompProfileArgs{Type: pulumi.String("RuntimeDefault")},
					},
					Containers: corev1.ContainerArray{&corev1.ContainerArgs{
						Name:  pulumi.String(ContainerName),
						Image: pulumi.String(d.Image),
						// Pod Security "restricted": no root, no privilege escalation, no
						// capabilities, RuntimeDefault seccomp; the server writes nothing.
						SecurityContext: &corev1.SecurityContextArgs{
							AllowPrivilegeEscalation: pulumi.Bool(false),
							ReadOnlyRootFilesystem:   pulumi.Bool(true),
							Capabilities:             &corev1.CapabilitiesArgs{Drop: pulumi.StringArray{pulumi.String("ALL")}},
						},
						EnvFrom:        envFrom,
						LivenessProbe:  httpProbe(liveness, 10),
						ReadinessProbe: httpProbe(readiness, 5),
						Ports: corev1.ContainerPortArray{&corev1.ContainerPortArgs{
							Name:          pulumi.String(PortName),
							ContainerPort: pulumi.Int(int(d.ContainerPort)),
							Protocol:      pulumi.String("TCP"),
						}},
						VolumeMounts: corev1.VolumeMountArray{&corev1.VolumeMountArgs{
							Name:      pulumi.String(VolumeName),
							MountPath: pulumi.String(api.ConfigMountPath),
							ReadOnly:  pulumi.Bool(true),
						}},
					}},
					Volumes: corev1.VolumeArray{&corev1.VolumeArgs{
						Name: pulumi.String(VolumeName),
						// The literal name, not cm's output: an output would make Pulumi
						// replace the Deployment whenever it replaces the ConfigMap.
						ConfigMap: &corev1.ConfigMapVolumeSourceArgs{
							Name: pulumi.String(d.ConfigMapName()),
						},
					}},
				},
			},
		},
	}, depOpts...)
	if err != nil {
		return Declared{}, err
	}

	svcSpec := &corev1.ServiceSpecArgs{
		Type:     pulumi.String(string(d.ServiceType)),
		Selector: selector,
		Ports: corev1.ServicePortArray{&corev1.ServicePortArgs{
			Name:       pulumi.String(PortName),
			Port:       pulumi.Int(int(d.Port)),
			TargetPort: pulumi.String(PortName),
			Protocol:   pulumi.String("TCP"),
		}},
	}
	if d.ServiceType == api.ServiceTypeHeadless {
		svcSpec.Type = pulumi.String(string(api.ServiceTypeClusterIP))
		svcSpec.ClusterIP = pulumi.String("None")
	}
	svc, err := corev1.NewService(ctx, resService, &corev1.ServiceArgs{
		Metadata: meta(d.Name),
		Spec:     svcSpec,
	}, opts...)
	if err != nil {
		return Declared{}, err
	}

	ctx.Export(OutputNamespace, pulumi.String(d.Namespace))
	ctx.Export(OutputConfigMapName, cm.Metadata.Name().Elem())
	ctx.Export(OutputDeploymentName, dep.Metadata.Name().Elem())
	ctx.Export(OutputServiceName, svc.Metadata.Name().Elem())
	ctx.Export(OutputClusterIP, svc.Spec.ClusterIP().Elem())
	return Declared{Deployment: dep.Metadata.Name().Elem()}, nil
}

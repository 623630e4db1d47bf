// Package infra is the Pulumi program of one KindCustomHttp: a pure function from its desired
// state to the ConfigMap, Deployment and Service it declares. It is the only package that
// declares Kubernetes resources (registers the Kubernetes provider's resource types;
// internal/boundaries enforces it); the watcher, the commands and the tests all run the same
// program.
package infra

import (
	"fmt"
	"path"

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
	labels := pulumi.ToStringMap(Labels(d))
	selector := pulumi.ToStringMap(SelectorLabels(d))
	meta := func(name string) pulumi.Map {
		m := pulumi.Map{
			"name":        pulumi.String(name),
			"namespace":   pulumi.String(d.Namespace),
			"labels":      labels,
			"annotations": pulumi.StringMap{"pulumi.com/patchForce": pulumi.String("true"), SkipAwait: pulumi.String("true")},
		}
		if d.OwnerUID != "" {
			m["ownerReferences"] = pulumi.Array{pulumi.Map{
				"apiVersion": pulumi.String(OwnerAPIVersion),
				"kind":       pulumi.String(OwnerKind),
				"name":       pulumi.String(d.Name),
				"uid":        pulumi.String(d.OwnerUID),
				"controller": pulumi.Bool(true),
			}}
		}
		return m
	}
	// Names are fixed (the original's), so a replacement must delete first.
	opts := []pulumi.ResourceOption{pulumi.DeleteBeforeReplace(true)}

	cm, err := register(ctx, configMap, resConfigMap, pulumi.Map{
		"metadata": meta(d.ConfigMapName()),
		"data":     pulumi.ToStringMap(d.ConfigMapData),
	}, opts...)
	if err != nil {
		return Declared{}, err
	}

	// The ConfigMap exists before the pods that mount it.
	depOpts := append([]pulumi.ResourceOption{pulumi.DependsOn([]pulumi.Resource{cm})}, opts...)
	liveness, readiness := probePaths(d)
	container := pulumi.Map{
		"name":  pulumi.String(ContainerName),
		"image": pulumi.String(d.Image),
		// Pod Security "restricted": no root, no privilege escalation, no capabilities,
		// RuntimeDefault seccomp; the server writes nothing.
		"securityContext": pulumi.Map{
			"allowPrivilegeEscalation": pulumi.Bool(false),
			"readOnlyRootFilesystem":   pulumi.Bool(true),
			"capabilities":             pulumi.Map{"drop": pulumi.StringArray{pulumi.String("ALL")}},
		},
		"livenessProbe":  httpProbe(liveness, 10),
		"readinessProbe": httpProbe(readiness, 5),
		"ports": pulumi.Array{pulumi.Map{
			"name":          pulumi.String(PortName),
			"containerPort": pulumi.Int(int(d.ContainerPort)),
			"protocol":      pulumi.String("TCP"),
		}},
		"volumeMounts": pulumi.Array{pulumi.Map{
			"name":      pulumi.String(VolumeName),
			"mountPath": pulumi.String(api.ConfigMountPath),
			"readOnly":  pulumi.Bool(true),
		}},
	}
	if args := serverArgs(d); len(args) > 0 {
		container["args"] = pulumi.ToStringArray(args)
	}
	if len(d.EnvFrom) > 0 {
		envFrom := pulumi.Array{}
		for _, e := range d.EnvFrom {
			src := pulumi.Map{}
			if e.Prefix != "" {
				src["prefix"] = pulumi.String(e.Prefix)
			}
			if e.Kind == api.EnvKindSecret {
				src["secretRef"] = pulumi.Map{"name": pulumi.String(e.Name)}
			} else {
				src["configMapRef"] = pulumi.Map{"name": pulumi.String(e.Name)}
			}
			envFrom = append(envFrom, src)
		}
		container["envFrom"] = envFrom
	}
	dep, err := register(ctx, deployment, resDeployment, pulumi.Map{
		"metadata": meta(d.Name),
		"spec": pulumi.Map{
			"replicas": pulumi.Int(int(d.ReplicaCount)),
			"selector": pulumi.Map{"matchLabels": selector},
			"template": pulumi.Map{
				"metadata": pulumi.Map{"labels": labels, "annotations": podAnnotations(d)},
				"spec": pulumi.Map{
					// The http server never calls the Kubernetes API: no token in its pods for a
					// compromised server to use.
					"automountServiceAccountToken": pulumi.Bool(false),
					"securityContext": pulumi.Map{
						"runAsNonRoot":   pulumi.Bool(true),
						"runAsUser":      pulumi.Int(NonRootUID),
						"runAsGroup":     pulumi.Int(NonRootUID),
						"seccompProfile": pulumi.Map{"type": pulumi.String("RuntimeDefault")},
					},
					"containers": pulumi.Array{container},
					"volumes": pulumi.Array{pulumi.Map{
						"name": pulumi.String(VolumeName),
						// The literal name, not cm's output: an output would make Pulumi
						// replace the Deployment whenever it replaces the ConfigMap.
						"configMap": pulumi.Map{"name": pulumi.String(d.ConfigMapName())},
					}},
				},
			},
		},
	}, depOpts...)
	if err != nil {
		return Declared{}, err
	}

	svcSpec := pulumi.Map{
		"type":     pulumi.String(string(d.ServiceType)),
		"selector": selector,
		"ports": pulumi.Array{pulumi.Map{
			"name":       pulumi.String(PortName),
			"port":       pulumi.Int(int(d.Port)),
			"targetPort": pulumi.String(PortName),
			"protocol":   pulumi.String("TCP"),
		}},
	}
	if d.ServiceType == api.ServiceTypeHeadless {
		svcSpec["type"] = pulumi.String(string(api.ServiceTypeClusterIP))
		svcSpec["clusterIP"] = pulumi.String("None")
	}
	svc, err := register(ctx, service, resService, pulumi.Map{
		"metadata": meta(d.Name),
		"spec":     svcSpec,
	}, opts...)
	if err != nil {
		return Declared{}, err
	}

	return export(ctx, Declared{
		Deployment: field(dep.Metadata, "name"),
		Outputs: pulumi.StringMap{
			OutputNamespace:      pulumi.String(d.Namespace),
			OutputConfigMapName:  field(cm.Metadata, "name"),
			OutputDeploymentName: field(dep.Metadata, "name"),
			OutputServiceName:    field(svc.Metadata, "name"),
			OutputClusterIP:      field(svc.Spec, "clusterIP"),
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

// httpProbe probes path on the container's "http" port every periodSeconds.
func httpProbe(path string, periodSeconds int) pulumi.Map {
	return pulumi.Map{
		"httpGet":       pulumi.Map{"path": pulumi.String(path), "port": pulumi.String(PortName)},
		"periodSeconds": pulumi.Int(periodSeconds),
	}
}

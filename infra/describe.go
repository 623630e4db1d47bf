package infra

import (
	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// objectArgs are d's ConfigMap, Deployment and Service as the Pulumi Kubernetes SDK's typed
// arguments: the one description of what the program makes. Declare registers them through the
// SDK's constructors; Build reads the same values as client-go objects for the drift check.
// Every input is a plain value (no output of another resource), which is what lets Build read
// them without an engine.
type objectArgs struct {
	ConfigMap  *corev1.ConfigMapArgs
	Deployment *appsv1.DeploymentArgs
	Service    *corev1.ServiceArgs
}

// describe returns d's objectArgs. A field added to the program is added here only (and to
// the API type it comes from): Declare and Build follow.
func describe(d api.Desired) objectArgs {
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
	var args pulumi.StringArrayInput
	if a := serverArgs(d); len(a) > 0 {
		args = pulumi.ToStringArray(a)
	}
	liveness, readiness := probePaths(d)
	dep := &appsv1.DeploymentArgs{
		Metadata: meta(d.Name),
		Spec: &appsv1.DeploymentSpecArgs{
			Replicas: pulumi.Int(int(d.ReplicaCount)),
			Selector: &metav1.LabelSelectorArgs{MatchLabels: selector},
			Template: &corev1.PodTemplateSpecArgs{
				Metadata: &metav1.ObjectMetaArgs{Labels: labels, Annotations: podAnnotations(d)},
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
						Args:  args,
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
						// The literal name, not the ConfigMap's output: an output would make
						// Pulumi replace the Deployment whenever it replaces the ConfigMap.
						ConfigMap: &corev1.ConfigMapVolumeSourceArgs{Name: pulumi.String(d.ConfigMapName())},
					}},
				},
			},
		},
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
	return objectArgs{
		ConfigMap:  &corev1.ConfigMapArgs{Metadata: meta(d.ConfigMapName()), Data: pulumi.ToStringMap(d.ConfigMapData)},
		Deployment: dep,
		Service:    &corev1.ServiceArgs{Metadata: meta(d.Name), Spec: svcSpec},
	}
}

// httpProbe probes path on the container's "http" port every periodSeconds.
func httpProbe(path string, periodSeconds int) *corev1.ProbeArgs {
	return &corev1.ProbeArgs{
		HttpGet:       &corev1.HTTPGetActionArgs{Path: pulumi.String(path), Port: pulumi.String(PortName)},
		PeriodSeconds: pulumi.Int(periodSeconds),
	}
}

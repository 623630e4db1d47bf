package infra

import (
	k8sappsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	k8smetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Build returns the objects Declare declares for d as client-go types, with every field Declare
// sets and no other: the program's inputs, before the apiserver defaults anything. It is what
// the controller compares the live objects with to find drift (hand-made changes), for every
// declared field, in this process and without Pulumi (BenchmarkBuild measures its cost).
//
// Declare and Build describe the same objects twice, in the two type systems that need them
// (Pulumi's inputs, which the engine diffs, and client-go's, which the informers hold);
// TestBuildIsDeclare and FuzzProgram run Declare against Pulumi's mocks (Expected) and require
// the two to be equal field for field, so a change to one without the other fails the tests.
// Declare is not built from Build: client-go's JSON of an object carries fields Declare never
// sent (creationTimestamp: null, status: {}, strategy: {}) and omits ones it did (empty pod
// annotations), and every existing stack's plan rests on exactly what Declare sends.
func Build(d api.Desired) Objects {
	labels := Labels(d)
	selector := SelectorLabels(d)
	var owners []k8smetav1.OwnerReference
	if d.OwnerUID != "" {
		owners = []k8smetav1.OwnerReference{{
			APIVersion: OwnerAPIVersion, Kind: OwnerKind, Name: d.Name, UID: types.UID(d.OwnerUID), Controller: ptr.To(true),
		}}
	}
	meta := func(name string) k8smetav1.ObjectMeta {
		return k8smetav1.ObjectMeta{
			Name:            name,
			Namespace:       d.Namespace,
			Labels:          labels,
			Annotations:     map[string]string{"pulumi.com/patchForce": "true", SkipAwait: "true"},
			OwnerReferences: owners,
		}
	}

	podAnnotations := map[string]string{}
	if d.RolloutOnConfigChange {
		podAnnotations[ConfigDigestAnnotation] = d.ConfigDigest()
	}
	if d.EnvDigest != "" {
		podAnnotations[EnvDigestAnnotation] = d.EnvDigest
	}
	var envFrom []k8scorev1.EnvFromSource
	for _, e := range d.EnvFrom {
		src := k8scorev1.EnvFromSource{Prefix: e.Prefix}
		if e.Kind == api.EnvKindSecret {
			src.SecretRef = &k8scorev1.SecretEnvSource{LocalObjectReference: k8scorev1.LocalObjectReference{Name: e.Name}}
		} else {
			src.ConfigMapRef = &k8scorev1.ConfigMapEnvSource{LocalObjectReference: k8scorev1.LocalObjectReference{Name: e.Name}}
		}
		envFrom = append(envFrom, src)
	}
	probe := func(path string, periodSeconds int32) *k8scorev1.Probe {
		return &k8scorev1.Probe{
			ProbeHandler:  k8scorev1.ProbeHandler{HTTPGet: &k8scorev1.HTTPGetAction{Path: path, Port: intstr.FromString(PortName)}},
			PeriodSeconds: periodSeconds,
		}
	}
	liveness, readiness := probePaths(d)
	dep := &k8sappsv1.Deployment{
		ObjectMeta: meta(d.Name),
		Spec: k8sappsv1.DeploymentSpec{
			Replicas: ptr.To(d.ReplicaCount),
			Selector: &k8smetav1.LabelSelector{MatchLabels: selector},
			Template: k8scorev1.PodTemplateSpec{
				ObjectMeta: k8smetav1.ObjectMeta{Labels: labels, Annotations: podAnnotations},
				Spec: k8scorev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					SecurityContext: &k8scorev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](NonRootUID),
						RunAsGroup:     ptr.To[int64](NonRootUID),
						SeccompProfile: &k8scorev1.SeccompProfile{Type: k8scorev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []k8scorev1.Container{{
						Name:  ContainerName,
						Image: d.Image,
						Args:  serverArgs(d),
						SecurityContext: &k8scorev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &k8scorev1.Capabilities{Drop: []k8scorev1.Capability{"ALL"}},
						},
						EnvFrom:        envFrom,
						LivenessProbe:  probe(liveness, 10),
						ReadinessProbe: probe(readiness, 5),
						Ports:          []k8scorev1.ContainerPort{{Name: PortName, ContainerPort: d.ContainerPort, Protocol: k8scorev1.ProtocolTCP}},
						VolumeMounts:   []k8scorev1.VolumeMount{{Name: VolumeName, MountPath: api.ConfigMountPath, ReadOnly: true}},
					}},
					Volumes: []k8scorev1.Volume{{
						Name: VolumeName,
						VolumeSource: k8scorev1.VolumeSource{ConfigMap: &k8scorev1.ConfigMapVolumeSource{
							LocalObjectReference: k8scorev1.LocalObjectReference{Name: d.ConfigMapName()},
						}},
					}},
				},
			},
		},
	}

	svc := &k8scorev1.Service{
		ObjectMeta: meta(d.Name),
		Spec: k8scorev1.ServiceSpec{
			Type:     k8scorev1.ServiceType(d.ServiceType),
			Selector: selector,
			Ports: []k8scorev1.ServicePort{{
				Name: PortName, Port: d.Port, TargetPort: intstr.FromString(PortName), Protocol: k8scorev1.ProtocolTCP,
			}},
		},
	}
	if d.ServiceType == api.ServiceTypeHeadless {
		svc.Spec.Type = k8scorev1.ServiceTypeClusterIP
		svc.Spec.ClusterIP = k8scorev1.ClusterIPNone
	}

	return Objects{
		ConfigMap:  &k8scorev1.ConfigMap{ObjectMeta: meta(d.ConfigMapName()), Data: d.ConfigMapData},
		Deployment: dep,
		Service:    svc,
	}
}

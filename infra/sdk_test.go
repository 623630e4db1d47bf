package infra

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/apps/v1"
	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// declareTyped declares what Declare declares through the Pulumi Kubernetes SDK's typed
// constructors (corev1.NewConfigMap, appsv1.NewDeployment, corev1.NewService), as Declare did
// before it registered the objects by type token. It is the oracle of TestDeclareIsTypedSDK:
// the SDK's constructors decide the type tokens, the apiVersion and kind inputs, the provider
// version and the aliases, and every existing stack was made by them, so Declare must send the
// engine the very same registrations. The SDK stays a test dependency only: in the operator's
// binary it weighed 18 MB.
// typedProbe is the typed form of the probe (httpProbe): it probes path on the container's "http" port every periodSeconds.
func typedProbe(path string, periodSeconds int) *corev1.ProbeArgs {
	return &corev1.ProbeArgs{
		HttpGet:       &corev1.HTTPGetActionArgs{Path: pulumi.String(path), Port: pulumi.String(PortName)},
		PeriodSeconds: pulumi.Int(periodSeconds),
	}
}

func declareTyped(ctx *pulumi.Context, d api.Desired) (Declared, error) {
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
	// The default image's server gets its settings as flags, spelled out here independently
	// of serverArgs.
	var args pulumi.StringArrayInput
	if d.Image == api.DefaultImage {
		args = pulumi.StringArray{pulumi.String(fmt.Sprintf("--listen=:%d", d.ContainerPort)), pulumi.String("--config=/config/hostports")}
	}
	dep, err := appsv1.NewDeployment(ctx, resDeployment, &appsv1.DeploymentArgs{
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
						LivenessProbe:  typedProbe(liveness, 10),
						ReadinessProbe: typedProbe(readiness, 5),
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

// rpcMocks answers like mocks and records the whole RegisterResource request of every object,
// by type token: what the engine receives (inputs, provider version, aliases, dependencies,
// deleteBeforeReplace, ...), with the program's source position and stack trace cleared.
type rpcMocks struct {
	mocks
	rpcMu sync.Mutex
	rpcs  map[string]*pulumirpc.RegisterResourceRequest
}

func (m *rpcMocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	req := proto.Clone(args.RegisterRPC).(*pulumirpc.RegisterResourceRequest)
	req.SourcePosition, req.StackTrace, req.ParentStackTraceHandle = nil, nil, ""
	m.rpcMu.Lock()
	m.rpcs[args.TypeToken] = req
	m.rpcMu.Unlock()
	return m.mocks.NewResource(args)
}

// registrations runs declare for d against rpcMocks, as a preview or an up, and returns the
// requests it sent and the stack outputs and Deployment name it declared, resolved.
func registrations(d api.Desired, preview bool,
	declare func(*pulumi.Context, api.Desired) (Declared, error),
) (map[string]*pulumirpc.RegisterResourceRequest, map[string]string, error) {
	m := &rpcMocks{mocks: mocks{resources: map[string]map[string]any{}, names: map[string]string{}},
		rpcs: map[string]*pulumirpc.RegisterResourceRequest{}}
	resolved := make(chan map[string]string, 1)
	opts := []pulumi.RunOption{pulumi.WithMocks("kindcustomhttp", "test", m)}
	if preview {
		opts = append(opts, dryRun)
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		decl, err := declare(ctx, d)
		if err != nil {
			return err
		}
		pulumi.All(decl.Deployment, decl.Outputs).ApplyT(func(v []any) error {
			out := maps.Clone(v[1].(map[string]string))
			out["Declared.Deployment"] = v[0].(string)
			resolved <- out
			return nil
		})
		return nil
	}, opts...)
	if err != nil {
		return nil, nil, err
	}
	select {
	case out := <-resolved:
		return m.rpcs, out, nil
	case <-time.After(10 * time.Second):
		return nil, nil, fmt.Errorf("the outputs of %s/%s did not resolve within 10 s", d.Namespace, d.Name)
	}
}

// checkTypedSDK fails t unless Declare sends the engine the same registrations as the Pulumi
// Kubernetes SDK's typed constructors (declareTyped) for d, in a preview and in an up, and
// resolves the same outputs.
func checkTypedSDK(t *testing.T, d api.Desired) {
	t.Helper()
	for _, preview := range []bool{true, false} {
		want, wantOut, err := registrations(d, preview, declareTyped)
		if err != nil {
			t.Fatalf("typed SDK (preview %v): %v", preview, err)
		}
		got, gotOut, err := registrations(d, preview, Declare)
		if err != nil {
			t.Fatalf("Declare (preview %v): %v", preview, err)
		}
		if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
			t.Fatalf("preview %v: Declare registered %v, the typed SDK %v",
				preview, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		for token, w := range want {
			if !proto.Equal(got[token], w) {
				t.Errorf("preview %v: %s registered differently from the typed SDK:\nDeclare:\n%s\ntyped SDK:\n%s",
					preview, token, prototext.Format(got[token]), prototext.Format(w))
			}
		}
		if !maps.Equal(gotOut, wantOut) {
			t.Errorf("preview %v: outputs %v, the typed SDK's %v", preview, gotOut, wantOut)
		}
	}
}

// TestDeclareIsTypedSDK: for specs that reach every branch of Declare, the engine receives from
// Declare exactly what it received from the SDK's typed constructors, so no existing stack sees
// a change (FuzzProgram checks the same for every spec it makes).
func TestDeclareIsTypedSDK(t *testing.T) {
	for name, change := range declareCases {
		t.Run(name, func(t *testing.T) {
			d := declareBase
			change(&d)
			checkTypedSDK(t, d)
		})
	}
}

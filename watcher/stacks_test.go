package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// programStacks runs every up through the real pulumi CLI and file backend, with a program
// that needs no provider plugin (it exports what infra.Program would), and then applies the
// ConfigMap, Deployment and Service to the real apiserver itself, waiting for the Deployment
// as the provider's await does. So the watcher's whole loop (replica health, drift, delete)
// runs where the Kubernetes provider plugin is absent; the e2e suite runs the real program.
//
// Test knobs: failures > 0 makes that many ups fail (the real CLI cannot be made to fail on
// demand); an image containing "pending" gets a nodeSelector no node matches, so its pods
// never become available; an image containing "slow" makes the program sleep 6 s.
type programStacks struct {
	*stack.Manager
	kube     kubernetes.Interface
	ups      atomic.Int32
	destroys atomic.Int32
	failures atomic.Int32

	mu       sync.Mutex
	lastOpts stack.RunOptions
}

func (p *programStacks) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	p.ups.Add(1)
	p.mu.Lock()
	p.lastOpts = opts
	p.mu.Unlock()
	if p.failures.Add(-1) >= 0 {
		now := time.Now()
		return stack.Result{Operation: "up", Start: now, End: now}, errors.New("injected failure: backend unreachable")
	}
	name, err := p.StackName(d.Namespace, d.Name)
	if err != nil {
		return stack.Result{}, err
	}
	res, err := p.Manager.Up(ctx, name, func(pctx *pulumi.Context) error {
		if strings.Contains(d.Image, "slow") {
			time.Sleep(6 * time.Second)
		}
		pctx.Export(infra.OutputDeploymentName, pulumi.String(d.Name))
		pctx.Export(infra.OutputConfigMapName, pulumi.String(d.ConfigMapName()))
		pctx.Export(infra.OutputServiceName, pulumi.String(d.Name))
		pctx.Export("replicas", pulumi.Int(int(d.ReplicaCount)))
		return nil
	}, opts)
	if err != nil {
		return res, err
	}
	return res, applyObjects(ctx, p.kube, d)
}

func (p *programStacks) Destroy(ctx context.Context, stackName string, opts stack.RunOptions) (stack.Result, error) {
	p.destroys.Add(1)
	res, err := p.Manager.Destroy(ctx, stackName, opts)
	if err != nil {
		return res, err
	}
	parts := strings.SplitN(stackName, ".", 3) // cluster.namespace.name
	ns, name := parts[1], parts[2]
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	for _, err := range []error{
		p.kube.AppsV1().Deployments(ns).Delete(ctx, name, del),
		p.kube.CoreV1().Services(ns).Delete(ctx, name, del),
		p.kube.CoreV1().ConfigMaps(ns).Delete(ctx, name+api.ConfigMapSuffix, del),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			return res, err
		}
	}
	return res, nil
}

func (p *programStacks) lastRunOptions() stack.RunOptions {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOpts
}

// applyObjects creates or overwrites d's three objects as infra.Program declares them
// (infra.Build, which the infra tests hold equal to what the program declares).
func applyObjects(ctx context.Context, kube kubernetes.Interface, d api.Desired) error {
	o := infra.Build(d)
	cm, dep, svc := o.ConfigMap, o.Deployment, o.Service
	if strings.Contains(d.Image, "pending") {
		dep.Spec.Template.Spec.NodeSelector = map[string]string{"no-such-label": "x"}
	}
	if err := upsert(ctx, kube.CoreV1().ConfigMaps(d.Namespace).Get, func(x *corev1.ConfigMap) error {
		_, err := kube.CoreV1().ConfigMaps(d.Namespace).Update(ctx, x, metav1.UpdateOptions{})
		return err
	}, func() error {
		_, err := kube.CoreV1().ConfigMaps(d.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		return err
	},
		func(x *corev1.ConfigMap) { x.Data, x.Labels = cm.Data, cm.Labels }, cm.Name); err != nil {
		return fmt.Errorf("apply configmap: %w", err)
	}
	if err := upsert(ctx, kube.AppsV1().Deployments(d.Namespace).Get, func(x *appsv1.Deployment) error {
		_, err := kube.AppsV1().Deployments(d.Namespace).Update(ctx, x, metav1.UpdateOptions{})
		return err
	}, func() error {
		_, err := kube.AppsV1().Deployments(d.Namespace).Create(ctx, dep, metav1.CreateOptions{})
		return err
	},
		func(x *appsv1.Deployment) {
			// A field the program does not declare stays as it is, as under the provider's
			// server-side apply: TestKstatus sets the progress deadline beside it.
			deadline := x.Spec.ProgressDeadlineSeconds
			x.Spec, x.Labels = dep.Spec, dep.Labels
			if x.Spec.ProgressDeadlineSeconds == nil {
				x.Spec.ProgressDeadlineSeconds = deadline
			}
		}, dep.Name); err != nil {
		return fmt.Errorf("apply deployment: %w", err)
	}
	if err := upsert(ctx, kube.CoreV1().Services(d.Namespace).Get, func(x *corev1.Service) error {
		_, err := kube.CoreV1().Services(d.Namespace).Update(ctx, x, metav1.UpdateOptions{})
		return err
	}, func() error {
		_, err := kube.CoreV1().Services(d.Namespace).Create(ctx, svc, metav1.CreateOptions{})
		return err
	},
		func(x *corev1.Service) {
			x.Spec.Type, x.Spec.Ports, x.Spec.Selector, x.Labels = svc.Spec.Type, svc.Spec.Ports, svc.Spec.Selector, svc.Labels
		}, svc.Name); err != nil {
		return fmt.Errorf("apply service: %w", err)
	}
	if strings.Contains(d.Image, "pending") {
		return nil
	}
	// The provider's await: the Deployment's pods are available.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		x, err := kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return x.Status.ObservedGeneration >= x.Generation && x.Status.AvailableReplicas == d.ReplicaCount &&
			x.Status.UpdatedReplicas == d.ReplicaCount, nil
	})
}

func upsert[T any](ctx context.Context, get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(T) error, create func() error, mutate func(T), name string) error {
	cur, err := get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return create()
	}
	if err != nil {
		return err
	}
	mutate(cur)
	return update(cur)
}

// program is a provider-less program that sleeps, to hold a stack's lock.
func program(sleep time.Duration) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		time.Sleep(sleep)
		ctx.Export("slept", pulumi.String(sleep.String()))
		return nil
	}
}

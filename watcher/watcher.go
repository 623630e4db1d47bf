// Package watcher reconciles KindCustomHttp objects: a client-go dynamic informer feeds a
// rate-limited workqueue keyed by namespace/name, and each worker brings the object's Pulumi
// stack up to date (through package stack), keeps a finalizer so that deletion destroys the
// stack first, and writes status back. It is the only package that talks to the Kubernetes
// API about KindCustomHttp objects.
package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Finalizer is put on every KindCustomHttp the watcher reconciles and removed only after its
// stack was destroyed and removed from the backend, so deleting the CR never leaves objects
// behind (the original operator left all three).
const Finalizer = "groupsp.measutosh.dev/pulumi-stack"

// Stacks is what the watcher needs from package stack. *stack.Manager implements it; tests
// put a failing implementation in front of it to force errors the real CLI cannot be made
// to produce on demand.
type Stacks interface {
	// StackName is the stack of namespace/name.
	StackName(namespace, name string) (string, error)
	// QualifiedName is the stack name as shown in status.
	QualifiedName(stack string) string
	// Up brings d's stack up to date.
	Up(ctx context.Context, d api.Desired) (stack.Result, error)
	// Destroy destroys the stack and removes it from the backend; a missing stack is no error.
	Destroy(ctx context.Context, stackName string) (stack.Result, error)
}

// Options tune a Watcher. Zero values take the documented defaults.
type Options struct {
	// Namespace limits the watch to one namespace; "" watches all.
	Namespace string
	// Resync is the informer's resync period: how often every object is looked at again even
	// without a change. Default 10 minutes. An unchanged object starts no Pulumi run.
	Resync time.Duration
	// DigestSalt is mixed into the digest of what was applied: anything outside the spec that
	// changes what an up would do (for example the backend, without its credentials). When it
	// changes, every stack is brought up once more.
	DigestSalt string
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
}

// Watcher reconciles KindCustomHttp objects. Create it with New, start it with Run.
type Watcher struct {
	client   dynamic.NamespaceableResourceInterface
	stacks   Stacks
	informer cache.SharedIndexInformer
	lister   cache.GenericLister
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	opts     Options
	log      *slog.Logger
}

// New returns a Watcher of KindCustomHttp objects through client, reconciling them with
// stacks. Nothing runs until Run.
func New(client dynamic.Interface, stacks Stacks, opts Options) *Watcher {
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(client, api.GroupVersionResource, opts.Namespace,
		opts.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
	w := &Watcher{
		client:   client.Resource(api.GroupVersionResource),
		stacks:   stacks,
		informer: inf.Informer(),
		lister:   inf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "kindcustomhttp"}),
		opts: opts,
		log:  opts.Logger,
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.enqueue,
		UpdateFunc: func(_, obj any) { w.enqueue(obj) },
		DeleteFunc: w.enqueue,
	})
	return w
}

func (w *Watcher) enqueue(obj any) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	w.queue.Add(name)
}

// Run starts the informer, waits for its cache to sync, and runs workers workers until ctx
// is cancelled. It returns an error only if the cache never syncs.
func (w *Watcher) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	if workers < 1 {
		workers = 1
	}
	go w.informer.RunWithContext(ctx)
	w.log.Info("waiting for informer cache to sync", "resource", api.GroupVersionResource.String(), "namespace", w.opts.Namespace)
	if !cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
		w.queue.ShutDown()
		return errors.New("wait for KindCustomHttp informer cache to sync: cancelled before it synced")
	}
	w.log.Info("starting workers", "workers", workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, w.runWorker, time.Second)
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	w.log.Info("workers stopped")
	return nil
}

// HasSynced reports whether the informer cache has synced (for readiness probes).
func (w *Watcher) HasSynced() bool { return w.informer.HasSynced() }

func (w *Watcher) runWorker(ctx context.Context) {
	for w.processNext(ctx) {
	}
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	err := w.sync(ctx, key)
	if err == nil {
		w.queue.Forget(key)
		return true
	}
	if errors.Is(err, stack.ErrLocked) {
		w.log.Info("stack locked by another update, will retry", "object", key.String())
	} else {
		w.log.Error("reconcile failed, will retry", "object", key.String(), "err", err)
	}
	w.queue.AddRateLimited(key)
	return true
}

// sync reconciles one object: cache -> deep copy -> delete or (finalizer, validate, up) ->
// status.
func (w *Watcher) sync(ctx context.Context, key cache.ObjectName) error {
	obj, err := w.lister.ByNamespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil // deleted, and the finalizer already did its work
	}
	if err != nil {
		return fmt.Errorf("get %s from cache: %w", key, err)
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	if u.GetDeletionTimestamp() != nil {
		return w.reconcileDelete(ctx, u)
	}
	if u, err = w.ensureFinalizer(ctx, u); err != nil {
		return err
	}
	return w.reconcileStack(ctx, u)
}

// reconcileStack validates the spec and runs up when what would be applied differs from what
// was last applied.
func (w *Watcher) reconcileStack(ctx context.Context, u *unstructured.Unstructured) error {
	gen := u.GetGeneration()
	cr, err := api.FromUnstructured(u)
	if err != nil {
		return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			markStalled(st, gen, ReasonInvalidSpec, err.Error())
		})
	}
	d, err := api.Resolve(cr)
	if err != nil {
		return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			markStalled(st, gen, ReasonInvalidSpec, err.Error())
		})
	}
	stackName, err := w.stacks.StackName(d.Namespace, d.Name)
	if err != nil {
		return w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			markStalled(st, gen, ReasonInvalidSpec, err.Error())
		})
	}
	digest := w.digest(d, stackName)
	if upToDate(cr, digest) {
		return nil
	}

	w.log.Info("running up", "object", klogRef(u), "stack", stackName, "generation", gen)
	// A retry keeps the failure it retries visible (Ready False, Reconciling True "Retrying")
	// instead of flipping status to Progressing and back on every attempt.
	if !retrying(cr) {
		if err := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			st.Stack = w.stacks.QualifiedName(stackName)
			markReconciling(st, gen, "pulumi up of stack "+stackName+" is running")
		}); err != nil {
			return err
		}
	}
	res, upErr := w.stacks.Up(ctx, d)
	statusErr := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
		st.LastUpdate = lastUpdate(res, upErr)
		if upErr != nil {
			reason := failureReason(upErr)
			markFailed(st, gen, reason, upErr.Error())
			return
		}
		st.AppliedDigest = digest
		st.Outputs = outputs(res.Outputs)
		markReady(st, gen, "stack "+stackName+" is up to date")
	})
	if upErr != nil {
		return upErr
	}
	if statusErr != nil {
		return statusErr
	}
	w.log.Info("stack up to date", "object", klogRef(u), "stack", stackName, "changes", res.Changes,
		"seconds", res.End.Sub(res.Start).Seconds())
	return nil
}

// upToDate reports whether the last successful up applied exactly digest to the current
// generation, so that a resync, a restart or an unrelated update starts no Pulumi run.
func upToDate(cr *api.KindCustomHttp, digest string) bool {
	st := cr.Status
	return st.ObservedGeneration == cr.Generation && st.AppliedDigest == digest &&
		meta.IsStatusConditionTrue(st.Conditions, ConditionReady)
}

// retrying reports whether the status already shows a failed attempt at the current
// generation that is being retried.
func retrying(cr *api.KindCustomHttp) bool {
	c := meta.FindStatusCondition(cr.Status.Conditions, ConditionReconciling)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonRetrying && c.ObservedGeneration == cr.Generation
}

// digest is the SHA-256 of everything that decides what an up does: the desired state, the
// program version, the stack and the salt (hex, 64 characters).
func (w *Watcher) digest(d api.Desired, stackName string) string {
	b, _ := json.Marshal(struct {
		Desired api.Desired
		Program string
		Stack   string
		Salt    string
	}{d, infra.ProgramVersion, stackName, w.opts.DigestSalt})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// reconcileDelete destroys the stack, then removes the finalizer. A failed destroy keeps the
// finalizer (and the object) and is retried: removing it first could orphan the objects.
func (w *Watcher) reconcileDelete(ctx context.Context, u *unstructured.Unstructured) error {
	if !hasFinalizer(u) {
		return nil
	}
	stackName, err := w.stacks.StackName(u.GetNamespace(), u.GetName())
	if err != nil {
		// No stack can exist under an invalid name: nothing to destroy.
		w.log.Info("no valid stack name, removing finalizer", "object", klogRef(u), "err", err)
		return w.removeFinalizer(ctx, u)
	}
	w.log.Info("running destroy", "object", klogRef(u), "stack", stackName)
	res, err := w.stacks.Destroy(ctx, stackName)
	if err != nil {
		gen := u.GetGeneration()
		if serr := w.updateStatus(ctx, u, func(st *api.KindCustomHttpStatus) {
			st.LastUpdate = lastUpdate(res, err)
			markFailed(st, gen, ReasonDestroyFailed, err.Error())
		}); serr != nil && !apierrors.IsNotFound(serr) {
			w.log.Error("write status failed", "object", klogRef(u), "err", serr)
		}
		return err
	}
	w.log.Info("stack destroyed", "object", klogRef(u), "stack", stackName, "changes", res.Changes)
	return w.removeFinalizer(ctx, u)
}

func failureReason(err error) string {
	switch {
	case errors.Is(err, stack.ErrLocked):
		return ReasonUpdateConflict
	case errors.Is(err, stack.ErrPluginMissing):
		return ReasonPluginMissing
	}
	return ReasonUpdateFailed
}

func lastUpdate(res stack.Result, err error) *api.UpdateStatus {
	u := &api.UpdateStatus{
		Kind:            res.Operation,
		Result:          "succeeded",
		StartTime:       metav1.NewTime(res.Start.Truncate(time.Second)),
		EndTime:         metav1.NewTime(res.End.Truncate(time.Second)),
		ResourceChanges: res.Changes,
	}
	if err != nil {
		u.Result = "failed"
		u.Message = err.Error()
	}
	return u
}

func outputs(o map[string]string) *api.Outputs {
	return &api.Outputs{
		ConfigMapName:  o[infra.OutputConfigMapName],
		DeploymentName: o[infra.OutputDeploymentName],
		ServiceName:    o[infra.OutputServiceName],
		ClusterIP:      o[infra.OutputClusterIP],
	}
}

func klogRef(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

// Package watcher reconciles KindCustomHttp objects: a client-go dynamic informer feeds a
// rate-limited workqueue keyed by namespace/name, and each worker brings the object's Pulumi
// stack up to date (through package stack), keeps a finalizer so that deletion destroys the
// stack first, watches the objects the stack owns to report replica health and repair drift,
// and writes status and Events back. It is the only package that talks to the Kubernetes API
// about KindCustomHttp objects.
package watcher

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Finalizer is put on every KindCustomHttp the watcher reconciles and removed only after its
// stack was destroyed and removed from the backend, so deleting the CR never leaves objects
// behind (the original operator left all three).
const Finalizer = "groupsp.measutosh.dev/pulumi-stack"

// Stacks is what the watcher needs from package stack. *stack.Manager implements it; tests
// put their own implementation in front of it where they must make Pulumi fail on purpose or
// where the Kubernetes provider plugin is absent.
type Stacks interface {
	// StackName is the stack of namespace/name.
	StackName(namespace, name string) (string, error)
	// QualifiedName is the stack name as shown in status.
	QualifiedName(stack string) string
	// Up brings d's stack up to date.
	Up(ctx context.Context, d api.Desired, opts stack.RunOptions) (stack.Result, error)
	// Destroy destroys the stack and removes it from the backend; a missing stack is no error.
	Destroy(ctx context.Context, stackName string, opts stack.RunOptions) (stack.Result, error)
	// CancelLock removes a lock whose owner is gone.
	CancelLock(ctx context.Context, stackName string) error
}

// Options tune a Watcher. Zero values take the documented defaults.
type Options struct {
	// Namespace limits the watch to one namespace; "" watches all.
	Namespace string
	// LabelSelector limits the watch to KindCustomHttps matching it (sharding); "" is all.
	LabelSelector string
	// Resync is the informers' resync period: how often every object is looked at again even
	// without a change. Default 10 minutes. An unchanged object starts no Pulumi run.
	Resync time.Duration
	// DigestSalt is mixed into the digest of what was applied: anything outside the spec that
	// changes what an up would do (for example the backend, without its credentials). When it
	// changes, every stack is brought up once more.
	DigestSalt string
	// ShutdownGrace is how long in-flight Pulumi operations may go on after Run's context is
	// cancelled before they are cancelled too (Pulumi then stops cleanly and releases the
	// stack's lock). Default 25 s, inside Kubernetes' default 30 s termination grace period.
	ShutdownGrace time.Duration
	// StaleLockTimeout is how old a stack lock must be before the watcher removes it although
	// its owner may live. Default 30 minutes, well over the longest up seen (about 1 minute).
	// A lock taken on this host by a process that no longer exists is removed at once.
	StaleLockTimeout time.Duration
	// Metadata, when set, watches the names and versions of ConfigMaps and Secrets so that a
	// change of a spec.envFrom source rolls the pods within seconds; without it such a change
	// is noticed at the next resync.
	Metadata metadata.Interface
	// FindPlugin, when set, reports where the Kubernetes provider plugin is
	// (stack.Manager.KubernetesPlugin; an error when it is absent). Objects whose up failed
	// with stack.ErrPluginMissing are then retried within PluginPoll of the plugin appearing,
	// instead of after their backoff (up to 5 minutes).
	FindPlugin func() (string, error)
	// PluginPoll is how often FindPlugin is called while objects wait for the plugin.
	// Default 2 s: FindPlugin only looks at files.
	PluginPoll time.Duration
	// Registry receives the watcher's Prometheus metrics; nil registers nowhere.
	Registry prometheus.Registerer
	// Logger receives structured logs; default slog.Default().
	Logger *slog.Logger
}

// Watcher reconciles KindCustomHttp objects. Create it with New, start it with Run.
type Watcher struct {
	client   dynamic.NamespaceableResourceInterface
	stacks   Stacks
	informer cache.SharedIndexInformer
	lister   cache.GenericLister
	owned    *ownedObjects
	kube     kubernetes.Interface
	envSync  []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// retry is the queue's rate limiter, kept to compute the shorter backoff of a backend
	// outage; Forget on the queue resets it.
	retry    workqueue.TypedRateLimiter[cache.ObjectName]
	recorder record.EventRecorder
	events   record.EventBroadcaster
	metrics  *metrics
	opts     Options
	log      *slog.Logger
	leading  atomic.Bool
	// applied and requests cover the time until the informer shows our own status writes.
	applied  appliedMap
	requests handledRequests
	// pluginWait holds the objects whose last up failed because the provider plugin is
	// missing, to requeue when it appears (see Options.FindPlugin).
	pluginWait keySet
	// destroyed holds, per object, the UID whose stack was destroyed and finalizer removed,
	// until the informer shows the object gone: a delivery of the object from before the
	// finalizer's removal must not destroy again (that destroy finds no stack, and its lock
	// sweep would create and remove the stack once more).
	destroyed sync.Map
}

// New returns a Watcher of KindCustomHttp objects through client (dynamic) and kube (typed:
// owned objects and Events), reconciling them with stacks. Nothing runs until Run.
func New(client dynamic.Interface, kube kubernetes.Interface, stacks Stacks, opts Options) *Watcher {
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 25 * time.Second
	}
	if opts.StaleLockTimeout == 0 {
		opts.StaleLockTimeout = 30 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PluginPoll == 0 {
		opts.PluginPoll = 2 * time.Second
	}
	m := newMetrics(opts.Registry)
	inf := dynamicinformer.NewFilteredDynamicInformer(client, api.GroupVersionResource, opts.Namespace,
		opts.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, envFromIndex: envFromKeys},
		func(lo *metav1.ListOptions) { lo.LabelSelector = opts.LabelSelector })
	retry := retryLimiter()
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	w := &Watcher{
		client:   client.Resource(api.GroupVersionResource),
		stacks:   stacks,
		kube:     kube,
		informer: inf.Informer(),
		lister:   inf.Lister(),
		retry:    retry,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			retry,
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "kindcustomhttp", MetricsProvider: m.workqueue}),
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "pulumi-operator"}),
		events:   broadcaster,
		metrics:  m,
		opts:     opts,
		log:      opts.Logger,
	}
	w.owned = newOwnedObjects(kube, opts.Namespace, opts.Resync, w.queue.Add)
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.enqueue,
		UpdateFunc: func(old, obj any) {
			if needsReconcile(old, obj) {
				w.enqueue(obj)
			}
		},
		DeleteFunc: w.enqueue,
	})
	return w
}

// needsReconcile filters the informer's updates of a KindCustomHttp: a change of generation
// (spec), of metadata (labels, annotations such as reconcile-requested-at, finalizers, the
// deletion timestamp), or a resync (same resourceVersion) is queued; a status-only update (the
// operator's own status writes) is not. Without the filter every status write re-queued the
// object at once, past its retry backoff: during a backend outage each failure's status write
// brought the next failed Pulumi run forward. This is controller-runtime's
// GenerationChangedPredicate plus its annotation and label predicates; the operator uses
// client-go's informers directly, so it is written out here.
func needsReconcile(old, obj any) bool {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := obj.(*unstructured.Unstructured)
	if !ok1 || !ok2 {
		return true
	}
	if o.GetResourceVersion() == n.GetResourceVersion() || o.GetGeneration() != n.GetGeneration() {
		return true
	}
	om, _, _ := unstructured.NestedMap(o.Object, "metadata")
	nm, _, _ := unstructured.NestedMap(n.Object, "metadata")
	for _, m := range []map[string]any{om, nm} {
		delete(m, "resourceVersion")
		delete(m, "managedFields")
	}
	return !equality.Semantic.DeepEqual(om, nm)
}

// Retry backoff per object: 1 s doubling to 5 min. client-go's default controller limiter
// starts at 5 ms, which suits API writes but not Pulumi runs of a second or more: during a
// backend outage it gave about 15 failed runs per object in 30 s. The overall token bucket
// (10 per second, burst 100) is client-go's default.
const (
	retryBase = time.Second
	retryMax  = 5 * time.Minute
	// retryMaxBackendDown caps the backoff of a reconcile that failed because the state
	// backend could not be opened (stack.ErrBackendUnavailable).
	retryMaxBackendDown = 15 * time.Second
)

func retryLimiter() workqueue.TypedRateLimiter[cache.ObjectName] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](retryBase, retryMax),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

func (w *Watcher) enqueue(obj any) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	w.queue.Add(name)
}

// Run starts the informers, waits for their caches to sync, and runs workers workers until
// ctx is cancelled. Then it takes no new work, lets running Pulumi operations finish for up to
// Options.ShutdownGrace, cancels the rest (so no lock is left behind), and returns. It returns
// an error only if the caches never sync.
func (w *Watcher) Run(ctx context.Context, workers int) error { return w.run(ctx, nil, workers) }

// run is Run, and also stops when lost is closed: the leader election lease is gone, and
// another replica may take it over once the lease expires (LeaseDuration after the last
// renewal, RenewDeadline of which has already passed). Then there is no grace period: running
// operations are cancelled at once, so that Pulumi has stopped and released the stack's lock
// before the new leader starts its own operations.
func (w *Watcher) run(ctx context.Context, lost <-chan struct{}, workers int) error {
	defer utilruntime.HandleCrash()
	defer w.events.Shutdown()
	if workers < 1 {
		workers = 1
	}
	// work ends with ctx (shutdown) or with the lease (lost).
	work, stopWork := context.WithCancel(ctx)
	defer stopWork()
	go func() {
		select {
		case <-lost:
			stopWork()
		case <-work.Done():
		}
	}()
	go w.informer.RunWithContext(work)
	w.owned.start(work)
	if w.opts.Metadata != nil {
		w.envSync = w.watchEnvSources(work, w.opts.Metadata, w.opts.Resync)
	}
	w.log.Info("waiting for informer caches to sync", "resource", api.GroupVersionResource.String(), "namespace", w.opts.Namespace)
	if !cache.WaitForCacheSync(work.Done(), append(append(w.owned.synced(), w.envSync...), w.informer.HasSynced)...) {
		w.queue.ShutDown()
		return errors.New("wait for informer caches to sync: cancelled before they synced")
	}

	// Pulumi operations run on opCtx, which outlives work by the grace period.
	opCtx, cancelOps := context.WithCancel(context.WithoutCancel(work))
	defer cancelOps()
	go wait.UntilWithContext(work, w.requeueIfPluginAppeared, w.opts.PluginPoll)
	w.log.Info("starting workers", "workers", workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(work, func(context.Context) { w.runWorker(work, opCtx) }, time.Second)
		}()
	}
	<-work.Done()
	w.queue.ShutDown()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	grace := w.opts.ShutdownGrace
	if ctx.Err() == nil { // the lease was lost, not a shutdown
		grace = 0
		w.log.Warn("lost leadership: no new work, cancelling running operations now")
	} else {
		w.log.Info("shutting down: no new work, waiting for running operations", "grace", grace.String())
	}
	select {
	case <-done:
	case <-time.After(grace):
		if grace > 0 {
			w.log.Warn("grace period over: cancelling running operations")
		}
		cancelOps()
		<-done
	}
	w.log.Info("workers stopped")
	return nil
}

// HasSynced reports whether every informer cache has synced (for readiness probes).
func (w *Watcher) HasSynced() bool {
	for _, s := range w.owned.synced() {
		if !s() {
			return false
		}
	}
	return w.informer.HasSynced()
}

// runWorker processes keys until the queue shuts down or work ends. Pulumi operations run on
// ops, which outlives work by the shutdown grace.
func (w *Watcher) runWorker(work, ops context.Context) {
	for w.processNext(work, ops) {
	}
}

func (w *Watcher) processNext(work, ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if work.Err() != nil {
		// A shut-down queue still hands out the keys it holds; after shutdown or a lost
		// lease no new operation may start (the informers' relist at the next start, or the
		// new leader's, finds these objects again).
		return false
	}
	start := time.Now()
	err := w.sync(ctx, key)
	w.metrics.observeReconcile(key, err, time.Since(start))
	if err == nil {
		w.queue.Forget(key)
		return true
	}
	if errors.Is(err, stack.ErrLocked) {
		// A known wait, not an error: one line at info level, retried with backoff.
		w.log.Info("stack locked by another update, will retry", "object", key.String())
	} else {
		w.log.Error("reconcile failed, will retry", "object", key.String(), "err", err)
	}
	if errors.Is(err, stack.ErrPluginMissing) && w.opts.FindPlugin != nil {
		// Retried at once when the plugin appears (requeueIfPluginAppeared); the backoff
		// below stays as the fallback.
		w.pluginWait.add(key)
	}
	if errors.Is(err, stack.ErrBackendUnavailable) {
		// The same doubling, capped lower: a run against a backend that is down fails before
		// any provider starts (a fraction of a CPU-second), and the 5-minute cap made objects
		// wait up to 2 minutes after a 30 s PostgreSQL outage ended.
		w.queue.AddAfter(key, min(w.retry.When(key), retryMaxBackendDown))
		return true
	}
	w.queue.AddRateLimited(key)
	return true
}

// requeueIfPluginAppeared queues every object waiting for the Kubernetes provider plugin, with
// its backoff reset, once Options.FindPlugin finds it. Installing the plugin while the operator
// runs (`make plugins`, `pulumi plugin install`) so takes effect within Options.PluginPoll.
func (w *Watcher) requeueIfPluginAppeared(context.Context) {
	if w.opts.FindPlugin == nil || w.pluginWait.len() == 0 {
		return
	}
	p, err := w.opts.FindPlugin()
	if err != nil {
		return
	}
	keys := w.pluginWait.drain()
	w.log.Info("Kubernetes provider plugin found: retrying the objects that waited for it", "path", p, "objects", len(keys))
	for _, k := range keys {
		w.queue.Forget(k)
		w.queue.Add(k)
	}
}

// keySet is a set of object keys, safe for concurrent use.
type keySet struct {
	mu sync.Mutex
	m  map[cache.ObjectName]struct{}
}

func (s *keySet) add(k cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[cache.ObjectName]struct{}{}
	}
	s.m[k] = struct{}{}
}

func (s *keySet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// drain empties the set and returns what it held.
func (s *keySet) drain() []cache.ObjectName {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cache.ObjectName, 0, len(s.m))
	for k := range s.m {
		out = append(out, k)
	}
	s.m = nil
	return out
}

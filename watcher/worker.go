package watcher

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

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

// Run starts the informers, waits for their caches to sync, and runs workers workers until
// ctx is cancelled. Then it takes no new work, lets running Pulumi operations finish for up to
// Options.ShutdownGrace, cancels the rest (so no lock is left behind), and returns nil, also
// when ctx ends before the caches synced (nothing ran: a clean stop).
func (w *Watcher) Run(ctx context.Context, workers int) error { return w.run(ctx, nil, workers) }

// unsynced is run's result when its work ended before the informer caches synced: nil when ctx
// ended (a shutdown asked for, with nothing started), else an error (the Lease was lost).
func unsynced(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("wait for informer caches to sync: the Lease was lost before they synced")
}

// run is Run, and also stops when lost is closed: the leader's fence has expired (its Lease
// could not be renewed within the renew deadline, or was lost), and another replica may take it
// over fence.KillAfter + fence.Margin later at the earliest. Then there is no grace period:
// running operations are cancelled at once, and the pulumi processes still running KillAfter
// later are killed (fenceProcesses). lost is watched during a SIGTERM's grace too.
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
	w.log.Info("waiting for informer caches to sync", "resource", api.GroupVersionResource.String(), "namespace", w.opts.Namespace)
	// The KindCustomHttp cache first: the owned objects' caches keep whole only the objects of
	// the KindCustomHttps it holds (ownedcache.go).
	if !cache.WaitForCacheSync(work.Done(), w.informer.HasSynced) {
		w.queue.ShutDown()
		return unsynced(ctx)
	}
	w.owned.start(work)
	if w.opts.Metadata != nil {
		w.envSync = w.watchEnvSources(work, w.opts.Metadata, 0) // no resync: see New
	}
	if !cache.WaitForCacheSync(work.Done(), append(w.owned.synced(), w.envSync...)...) {
		w.queue.ShutDown()
		return unsynced(ctx)
	}
	// The initial lists decoded every ConfigMap and Secret in scope whole before cutting each
	// to what the caches keep (ownedcache.go, envSourceStub); the Go runtime's background
	// scavenger hands that garbage back to the OS over minutes, so RSS after a start would
	// carry the size of everybody's objects (test/tenants TestFloodOfLabelledLookAlikes). One
	// forced GC returns it now, once per start.
	debug.FreeOSMemory()

	// Pulumi operations run on opCtx, which outlives work by the grace period.
	opCtx, cancelOps := context.WithCancel(context.WithoutCancel(work))
	defer cancelOps()
	go wait.UntilWithContext(work, w.requeueIfPluginAppeared, w.opts.PluginPoll)
	w.upgrades.setWorkers(workers)
	go w.upgrades.run(work, func() bool { return w.queue.Len() == 0 }, w.queue.Add)
	if w.opts.Namespace == "" && w.opts.LabelSelector == "" {
		// This process owns every stack of its cluster name: it may tell dead workspaces.
		go wait.UntilWithContext(work, func(context.Context) { w.sweepWorkspaces() }, w.opts.Resync)
	}
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
	fenced := func() {
		w.log.Warn("lost leadership: no new work, cancelling running operations now")
		cancelOps()
		w.fenceProcesses(done)
	}
	select {
	case <-lost:
		fenced()
	default:
		grace := w.opts.ShutdownGrace
		w.log.Info("shutting down: no new work, waiting for running operations", "grace", grace.String())
		select {
		case <-done:
		case <-lost: // the Lease is lost during the grace: no more grace
			fenced()
		case <-time.After(grace):
			w.log.Warn("grace period over: cancelling running operations")
			cancelOps()
		}
	}
	<-done
	// Nothing of this replica may outlive run: a leader releases its Lease once run returns,
	// and its successor may start on any stack at once. The workers' operations have returned,
	// but the engine host lives on (and may still be writing a run whose client gave up on it
	// after a cancel it ignored).
	if n := w.stacks.Stop(fence.KillAfter); n > 0 {
		w.log.Warn("killed the pulumi processes that did not end by themselves after the workers stopped", "processes", n, "after", fence.KillAfter.String())
	}
	w.log.Info("workers stopped")
	return nil
}

// fenceProcesses waits up to fence.KillAfter for done (the workers, whose operations were
// cancelled), then kills every pulumi process still running (Stacks.Kill; none starts
// afterwards), so that nothing of this process writes to a stack once another replica may lead.
// The processes end themselves at that moment too (their lease), should this process be unable
// to act.
func (w *Watcher) fenceProcesses(done <-chan struct{}) {
	select {
	case <-done:
	case <-time.After(fence.KillAfter):
	}
	n := w.stacks.Kill()
	w.log.Warn("lost leadership: killed the pulumi processes still running after the cancel", "processes", n, "after", fence.KillAfter.String())
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
	fast := w.lanes.tookFast(key)
	err := w.reconcileFrom(ctx, key, fast)
	w.metrics.observeReconcile(err, time.Since(start))
	w.log.Debug("reconciled", "object", key.String(), "fastLane", fast, "seconds", time.Since(start).Seconds(), "err", err)
	if err == nil {
		w.queue.Forget(key)
		return true
	}
	switch {
	case errors.Is(err, errRolloutInProgress), errors.Is(err, errObjectsTerminating):
		// Not a failure: the stack is up to date (or destroyed); the Deployment's rollout (or
		// the deleted objects' going) is looked at again with backoff.
		w.log.Debug("waiting for the objects", "object", key.String(), "why", err.Error())
		w.queue.AddRateLimited(key)
		return true
	case errors.Is(err, stack.ErrLocked):
		// A known wait, not an error: one line at info level, retried with backoff.
		w.log.Info("stack locked by another update, will retry", "object", key.String())
	default:
		w.log.Error("reconcile failed, will retry", "object", key.String(), "err", err)
	}
	if errors.Is(err, stack.ErrPluginMissing) && w.opts.FindPlugin != nil {
		// Retried at once when the plugin appears (requeueIfPluginAppeared); the backoff
		// below stays as the fallback.
		w.pluginWait.add(key)
	}
	if errors.Is(err, stack.ErrBackendUnavailable) {
		// The same doubling, capped lower: a run against a backend that is down fails before
		// any provider starts, so retrying it is cheap, and an object should not wait minutes
		// after the backend is back.
		w.queue.AddAfter(key, min(w.retry.When(key), retryMaxBackendDown))
		return true
	}
	w.queue.AddRateLimited(key)
	return true
}

// sweepWorkspaces removes the workspaces of stacks whose object is gone (deleted while its
// finalizer was removed by hand, say), and what killed runs left behind (Stacks.SweepWorkspaces).
func (w *Watcher) sweepWorkspaces() {
	live := map[string]bool{}
	for _, obj := range w.informer.GetStore().List() {
		m, ok := obj.(metav1.Object)
		if !ok {
			continue
		}
		if name, err := w.stacks.StackName(m.GetNamespace(), m.GetName()); err == nil {
			live[name] = true
		}
	}
	w.stacks.SweepWorkspaces(func(stackName string) bool { return live[stackName] })
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

func (s *keySet) remove(k cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
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

// Package watcher reconciles KindCustomHttp objects: a client-go dynamic informer feeds a
// rate-limited workqueue keyed by namespace/name, and each worker brings the object's Pulumi
// stack up to date (through package stack), keeps a finalizer so that deletion destroys the
// stack first, watches the objects the stack owns to report replica health and repair drift,
// and writes status and Events back. It and package commands are the only packages that read
// KindCustomHttp objects from the Kubernetes API (the dynamic client); internal/boundaries
// enforces that over the import graph.
package watcher

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Finalizer is put on every KindCustomHttp the watcher reconciles and removed only after its
// stack was destroyed and removed from the backend, so deleting the CR never leaves objects
// behind (the original operator left all three).
const Finalizer = "groupsp.measutosh.dev/pulumi-stack"

// FieldManager names the watcher in managedFields (finalizer and status writes).
const FieldManager = "pulumi-operator"

// Stacks is what the watcher needs from package stack. ManagerStacks adapts a *stack.Manager
// to it; integration tests put their own implementation in front of that where they must make
// Pulumi fail on purpose or where the Kubernetes provider plugin is absent, and the unit tests
// (TestUnit*, fakes_test.go) replace it with a fake that records calls and fails on demand.
type Stacks interface {
	// StackName is the stack of namespace/name.
	StackName(namespace, name string) (string, error)
	// QualifiedName is the stack name as shown in status.
	QualifiedName(stack string) string
	// Up brings d's stack up to date, importing the objects adopt names (infra.Adopt) into a
	// stack that did not exist (stack.RunOptions.Adopt).
	Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error)
	// Destroy destroys the stack and removes it from the backend; a missing stack is no error.
	Destroy(ctx context.Context, stackName string, opts stack.RunOptions) (stack.Result, error)
	// CancelLock removes exactly the locks ids names (stack.Lock.ID) of stackName, whose owners
	// are gone; all are every lock the failed operation reported (stack.Manager.CancelLock).
	CancelLock(ctx context.Context, stackName string, ids []string, all []stack.Lock) error
	// HolderGone judges a lock of stackName by the holder record of the pulumi process of this
	// operator that took it (stack.Manager.HolderGone): gone, alive, or neither (not provably
	// this operator's).
	HolderGone(l stack.Lock, stackName string) (gone, alive bool, why string)
	// Locks lists every lock held now on the project's stacks, each with its stack
	// (stack.Lock.Stack); ok false when that cannot be told.
	Locks(ctx context.Context) (locks []stack.Lock, ok bool)
	// Kill ends every pulumi process of the operator at once (SIGKILL) and returns how many it
	// signalled: how a leader that lost its Lease fences itself.
	Kill() int
	// Stop ends every pulumi process of the operator before the watcher returns: those that
	// end by themselves within wait (an idle engine host once told to stop), then, killed,
	// the rest; it returns how many it killed (stack.Manager.Stop).
	Stop(wait time.Duration) int
	// SweepWorkspaces removes the local workspaces of stacks for which live is false, and the
	// leftovers of killed runs; it returns how many it removed.
	SweepWorkspaces(live func(stackName string) bool) int
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
	// OperationTimeout bounds one up or destroy: past it the operation is cancelled (Pulumi
	// stops cleanly, saves the state and releases the lock), the object is Ready False with
	// api.ReasonTimedOut and retried with backoff, so that no object holds a worker for long. Default
	// 3 minutes: an up waits for no rollout (infra.SkipAwait) and takes seconds; the Kubernetes
	// provider's own await timeout, which this replaces for the operator, is 10 minutes.
	OperationTimeout time.Duration
	// StaleLockTimeout, when set, is how old a stack lock must be before the watcher removes it
	// although its owner may live. Zero (the default) never removes a lock by age: see
	// stalelock.go for the locks that are removed (a dead process of this operator, an earlier
	// leader of this installation) and why every other one is waited out.
	StaleLockTimeout time.Duration
	// MinRefreshInterval is the least time between two ups of one object that only repair drift
	// or answer a reconcile request (both with a refresh): a tenant who scales their Deployments
	// in a loop, an HPA fighting the spec, or a script annotating objects gets at most one such
	// up per object per interval; a spec change is never held back. Zero takes the default,
	// 10 s; negative turns the limit off.
	MinRefreshInterval time.Duration
	// AdoptOriginal lets every object take over the objects the original operator made for it
	// (api.AdoptOriginalAnnotation says it for one object).
	AdoptOriginal bool
	// HandoverDrain is how long the original operator's pods keep running after they left the
	// Service during a handover, so that no resolver still hands out their addresses
	// (DefaultHandoverDrain when 0).
	HandoverDrain time.Duration
	// MaxUpsPerNamespace caps the ups running at once for the objects of one namespace (0: no
	// cap), so that with it below the worker count one namespace's work always leaves a worker
	// to the others. An object over the cap is parked until an up of its namespace ends.
	MaxUpsPerNamespace int
	// ProgramUpgradesPerMinute paces the ups whose only cause is a newer program version of the
	// operator (infra.ProgramVersion; ReasonProgramUpgraded): at most this many a minute, each
	// once the queue's other work is done (programUpgrades), so that an operator upgrade does
	// not run one up per stack at once. Zero takes the default, 60; negative runs them all at
	// once.
	ProgramUpgradesPerMinute int
	// Metadata, when set, watches the names and versions of ConfigMaps and Secrets so that a
	// change of a spec.envFrom source rolls the pods within seconds; without it such a change
	// is noticed at the next resync.
	Metadata metadata.Interface
	// SecretNamespaces are the namespaces whose Secrets the operator may read (get, and list
	// and watch of their metadata): "*" is every namespace. A Secret named in spec.envFrom
	// elsewhere is not read at all; its data still reaches the pods, but a change of it does not
	// roll them (desired.Options.ReadSecret; Event EnvSourceNotWatched). Empty (the default):
	// no Secret is read, so the operator needs no permission on Secrets (README "Security").
	SecretNamespaces []string
	// EnvDigestKey is the key of the digest of spec.envFrom sources (desired.LoadKey); an
	// object with envFrom sources fails (desired.ErrNoKey) without one.
	EnvDigestKey []byte
	// FindPlugin, when set, reports where the Kubernetes provider plugin is
	// (stack.Manager.KubernetesPlugin; an error when it is absent). Objects whose up failed
	// with stack.ErrPluginMissing are then retried within PluginPoll of the plugin appearing,
	// instead of after their backoff (up to 5 minutes).
	FindPlugin func() (string, error)
	// DeleteBlockedAfter is how long a delete may wait, once its stack is destroyed, for the
	// objects the destroy deleted to go before it is reported as blocked (Ready False with
	// api.ReasonDeleteBlocked naming them, a Warning Event, pulumi_operator_deletes_blocked).
	// Default 2 minutes: the kubelet kills a pod 30 s (the default terminationGracePeriodSeconds,
	// which the program leaves alone) after asking it to stop, and the garbage collector then
	// removes the Deployment; a wait four times as long is held by something else.
	DeleteBlockedAfter time.Duration
	// PluginPoll is how often FindPlugin is called while objects wait for the plugin.
	// Default 2 s: FindPlugin only looks at files.
	PluginPoll time.Duration
	// RequireAdmissionPolicy refuses the up of an object whose spec.envFrom names a Secret
	// unless an admission policy (config/admission) is in force and checked the spec's writer:
	// Ready False with reason AdmissionPolicyMissing, AdmittedWithoutPolicy or
	// AdmissionPolicyUnknown, saying what to install or do (admission.go). Default false: such
	// objects are only reported (condition ReferencesChecked, a Warning Event).
	RequireAdmissionPolicy bool
	// AdmissionPolicySelector selects the admission policy and its binding by label; default
	// AdmissionPolicyLabel=AdmissionPolicyValue, the label they ship with. Tests select one of
	// their own, so that runs sharing a cluster do not see each other's.
	AdmissionPolicySelector string
	// AdmissionPolicyPoll is how long one look at the admission policy serves reconciles before
	// the next reconcile looks again; a change then queues every object. Default 30 s: two
	// lists of a few cluster-scoped objects each time. An up that --require-admission-policy
	// guards always looks afresh.
	AdmissionPolicyPoll time.Duration
	// AllowServiceTypes are the service types that expose the pods outside the cluster
	// (NodePort, LoadBalancer) which spec.serviceType may name; an object asking for another is
	// Stalled with reason ServiceTypeNotAllowed. Default none: the operator creates Services
	// with its own rights, past the policies that limit which users may create such Services.
	AllowServiceTypes []api.ServiceType
	// StateBudget is the most bytes one object's stack may hold in a DIY backend: its
	// checkpoint and the history entries it keeps (stack.Config.KeepHistory), each one more
	// checkpoint. A stack whose checkpoint (infra.EstimateStateBytes) leaves room for fewer keeps
	// that many (infra.HistoryWithin); an object whose checkpoint and one history entry exceed
	// it is Stalled with reason StateBudgetExceeded and runs no up. 0: no budget, every stack
	// keeps Config.KeepHistory updates. It bounds what one object can take of the state volume,
	// so that a tenant's large objects cannot fill it for the others (README "Security").
	StateBudget int64
	// StateVolume is the directory of a file backend (stack.Manager.FileBackendDir): before
	// each up the watcher checks that its file system has room for what the up writes, three
	// checkpoints (infra.EstimateStateBytes), and otherwise fails the reconcile with reason
	// StateVolumeFull instead of running an up whose checkpoint write could run out of space
	// and leave the state truncated. Empty: no check (other backends).
	StateVolume string
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
	kube     kubeclient.Interface
	envSync  []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	// lanes is the queue's storage: fair across namespaces, keys whose owned objects changed
	// first unless they need an up.
	lanes *fairLanes
	// retry is the queue's rate limiter, kept to compute the shorter backoff of a backend
	// outage; Forget on the queue resets it.
	retry    workqueue.TypedRateLimiter[cache.ObjectName]
	recorder record.EventRecorder
	events   record.EventBroadcaster
	metrics  *metrics
	opts     Options
	log      *slog.Logger
	leading  atomic.Bool
	// objects holds what this process remembers of each object between its reconciles.
	objects objectStates
	// pluginWait holds the objects whose last up failed because the provider plugin is
	// missing, to requeue when it appears (see Options.FindPlugin).
	pluginWait keySet
	// policies looks up the admission policy (admission.go).
	policies *admissionPolicies
	// upgrades paces the ups whose only cause is a newer program version.
	upgrades *programUpgrades
	// fenced holds the host names of the operator pods that led this installation before this
	// process took the Lease (recordLeader); nil without leader election.
	fenced atomic.Pointer[map[string]bool]
	// fence is the leader's write permission (RunLeaderElected); nil without leader election,
	// which permits every write.
	fence *fence.Fence
	// leaseLocks holds the locks held when this replica acquired the Lease, by ID (a snapshot,
	// RunLeaderElected): the Lease rule removes an earlier holder's lock only among these, never
	// one taken later, and their stacks are the ones whose operation the change of leader cut
	// short (interrupted). nil: no snapshot, no lock removed by the Lease rule.
	leaseLocks atomic.Pointer[map[string]stack.Lock]
	// resumed holds the stacks interrupted found cut short that have had an up since (stack
	// name -> true): each is resumed once.
	resumed sync.Map
	// lockSeen holds, per lock ID, when this process first saw the lock (monotonic time.Time):
	// --stale-lock-timeout counts a lock's age from there, never from the time its taker's clock
	// wrote into it.
	lockSeen sync.Map
	// nsUps counts the ups running per namespace (MaxUpsPerNamespace).
	nsUps namespaceSlots
	// lockSafeAt is when (fence clock, ns) the processes of the replica that led before this one
	// are gone at the latest: the Lease rule (stalelock.go) removes none of their locks before.
	lockSafeAt atomic.Int64
}

// New returns a Watcher of KindCustomHttp objects through client (dynamic) and kube (typed:
// owned objects and Events), reconciling them with stacks. Nothing runs until Run.
func New(client dynamic.Interface, kube kubeclient.Interface, stacks Stacks, opts Options) *Watcher {
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 25 * time.Second
	}
	if opts.OperationTimeout == 0 {
		opts.OperationTimeout = 3 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MinRefreshInterval == 0 {
		opts.MinRefreshInterval = 10 * time.Second
	}
	if opts.PluginPoll == 0 {
		opts.PluginPoll = 2 * time.Second
	}
	if opts.DeleteBlockedAfter == 0 {
		opts.DeleteBlockedAfter = 2 * time.Minute
	}
	if opts.ProgramUpgradesPerMinute == 0 {
		opts.ProgramUpgradesPerMinute = 60
	}
	if opts.AdmissionPolicyPoll == 0 {
		opts.AdmissionPolicyPoll = 30 * time.Second
	}
	m := newMetrics(opts.Registry)
	inf := dynamicinformer.NewFilteredDynamicInformer(client, api.GroupVersionResource, opts.Namespace,
		opts.Resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, envFromIndex: envFromKeys},
		func(lo *metav1.ListOptions) { lo.LabelSelector = opts.LabelSelector })
	// The cache holds no managedFields and no last-applied copy of any object (stripMetadata).
	_ = inf.Informer().SetTransform(stripMetadata())
	retry := retryLimiter()
	lanes := newFairLanes()
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	w := &Watcher{
		client:   client.Resource(api.GroupVersionResource),
		stacks:   stacks,
		kube:     kube,
		informer: inf.Informer(),
		lister:   inf.Lister(),
		retry:    retry,
		lanes:    lanes,
		queue:    newQueue("kindcustomhttp", retry, m.workqueue, lanes),
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "pulumi-operator"}),
		events:   broadcaster,
		metrics:  m,
		opts:     opts,
		log:      opts.Logger,
		policies: newAdmissionPolicies(kube, opts.AdmissionPolicySelector, opts.AdmissionPolicyPoll, opts.Registry),
		upgrades: newProgramUpgrades(opts.ProgramUpgradesPerMinute),
	}
	m.registerUpgrades(opts.Registry, w.upgrades)
	// No resync for the owned objects' and the envFrom sources' informers (0, here and in
	// worker.go): the KindCustomHttp informer's own resync already queues every object each
	// period, and its reconcile reads the owned objects from these caches to look for drift.
	// A resync of each of them would queue every object again: four reconciles per object per
	// period instead of one (docs/benchmarks.md, the idle figure). Their real changes still
	// queue the owner at once.
	w.owned = newOwnedObjects(kube, opts.Metadata, opts.Namespace, 0, func(key cache.ObjectName) {
		w.lanes.markOwned(key)
		w.queue.Add(key)
	}, func(namespace, name string) bool {
		_, exists, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
		return err == nil && exists
	})
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

func (w *Watcher) enqueue(obj any) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	w.queue.Add(name)
}

// readsSecrets reports whether the watcher reads the Secrets of namespace ns
// (Options.SecretNamespaces).
func (w *Watcher) readsSecrets(ns string) bool {
	return slices.Contains(w.opts.SecretNamespaces, "*") || slices.Contains(w.opts.SecretNamespaces, ns)
}

// objectRef is the "namespace/name" of an object, for log attributes and error messages.
func objectRef(o metav1.Object) string { return cache.MetaObjectToName(o).String() }

// HasSynced reports whether every informer cache has synced (for readiness probes).
func (w *Watcher) HasSynced() bool {
	for _, s := range w.owned.synced() {
		if !s() {
			return false
		}
	}
	return w.informer.HasSynced()
}

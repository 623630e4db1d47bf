package watcher

// The unit tests' harness (tests named TestUnit*, run with `go test ./watcher/ -run Unit`):
// a Watcher made by New over client-go's fake dynamic and typed clients, its informer caches
// filled by hand instead of by a running informer, and reconcile (the sync handler) called
// directly, as kubernetes/sample-controller's controller_test.go does. Stacks is fakeStacks,
// which records calls and fails on demand. No cluster and no pulumi CLI are needed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// unitNS is the namespace of every unit-test object.
const unitNS = "ns"

// journal is the ordered record of what a reconcile did to the outside world: the writes the
// apiserver accepted ("patch finalizers=[...]", "status Ready=... Reconciling=...") and the
// calls fakeStacks got ("up refresh=false", "destroy <stack>", "cancel-lock <stack>").
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
}

// put replaces the entries with entries.
func (j *journal) put(entries []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = entries
}

// take returns the entries recorded since the last take and forgets them.
func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.entries
	j.entries = nil
	return out
}

// ranUp reports whether journal entries hold an up, with or without refresh, in the
// background or not: for the checks that no up ran.
func ranUp(entries []string) bool {
	return slices.ContainsFunc(entries, func(e string) bool { return strings.HasPrefix(e, "up ") })
}

// fakeStacks is the Stacks of the unit tests: stack names are the real stack.Name rule
// (cluster "test"), operations only record themselves in the journal and return what the
// test set, which is how a test makes Pulumi fail in ways a real run cannot be made to on
// demand (locked by a dead process, backend down, plugin missing).
type fakeStacks struct {
	j          *journal
	mu         sync.Mutex
	upErr      error
	upResult   stack.Result // Operation, times and outputs are filled in when zero
	destroyErr error
	// destroyRecovered is the Result.Recovered of a destroy (pending operations resolved).
	destroyRecovered []string
	// destroyMissing makes Destroy find no stack (Result.StackMissing).
	destroyMissing bool
	cancelErr      error
	ups            []stack.RunOptions
	// adopts are the infra.Adopt of each up, in order (an up that names an object imports it
	// and makes destroyMissing false: the stack exists again).
	adopts []infra.Adopt
	// onUp, when set, runs inside Up, as things that happen while an up runs do (a user
	// changing the spec).
	onUp func()
	// hang makes Up and Destroy run until their context ends, as a run stuck on something
	// outside (a provider waiting on an unreachable apiserver) does, and fail then as a
	// cancelled pulumi run does. hangHard makes Up ignore its context too, as a run whose cancel
	// never gets through does: only Kill ends it.
	hang, hangHard bool
	// holderGone and holderAlive say, by pid, what HolderGone finds; locks is what Locks lists.
	holderGone, holderAlive map[int]bool
	locks                   []stack.Lock
	killed                  chan struct{}
	killOnce                sync.Once
	// onStop, when set, runs inside Stop (the processes' end, which a test may hold up).
	onStop func()
	// onRefreshUp, when set, runs inside a successful Up with a refresh (a drift repair, a
	// requested refresh) with what it applies: the unit fixture puts the owned objects of d
	// there, as a real up does, so that the look after a repair finds them repaired.
	onRefreshUp func(d api.Desired)
	// made holds the stacks an Up has made (a failed one too: stack.Manager makes the stack
	// before the engine runs) and Destroy has not removed. An Up that makes its stack skips the
	// refresh, as stack.Manager does (RunOptions.Refresh): the journal says what ran, ups what
	// the watcher asked.
	made map[string]bool
}

func (s *fakeStacks) StackName(namespace, name string) (string, error) {
	return stack.Name("test", namespace, name)
}

func (s *fakeStacks) QualifiedName(stackName string) string {
	return "organization/kindcustomhttp/" + stackName
}

func (s *fakeStacks) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ups = append(s.ups, opts)
	s.adopts = append(s.adopts, adopt)
	if name, _ := s.StackName(d.Namespace, d.Name); !s.made[name] {
		if s.made == nil {
			s.made = map[string]bool{}
		}
		s.made[name] = true
		opts.Refresh = false
	}
	if opts.Background {
		s.j.add("up refresh=%v background", opts.Refresh)
	} else {
		s.j.add("up refresh=%v", opts.Refresh)
	}
	if s.onUp != nil {
		s.onUp()
	}
	if s.hang {
		<-ctx.Done()
		return stack.Result{Operation: "up", Start: time.Now(), End: time.Now()}, errors.New("update cancelled")
	}
	if s.hangHard {
		<-s.killCh()
		return stack.Result{Operation: "up", Start: time.Now(), End: time.Now()}, errors.New("signal: killed")
	}
	if opts.Refresh && s.upErr == nil && s.onRefreshUp != nil {
		s.onRefreshUp(d)
	}
	res := s.upResult
	res.Operation = "up"
	if res.Start.IsZero() {
		res.Start = time.Now()
		res.End = res.Start.Add(time.Second)
	}
	if adopt.Any() && s.upErr == nil {
		// What the engine reports of an up that imported: the stack exists again.
		n := 0
		for _, b := range []bool{adopt.ConfigMap, adopt.Deployment, adopt.Service} {
			if b {
				n++
			}
		}
		res.Changes = map[string]int{"import": n}
		s.destroyMissing = false
	}
	if res.Outputs == nil && s.upErr == nil {
		res.Outputs = map[string]string{infra.OutputDeploymentName: d.Name, infra.OutputServiceName: d.Name,
			infra.OutputConfigMapName: d.ConfigMapName(), infra.OutputClusterIP: "10.0.0.1"}
	}
	return res, s.upErr
}

func (s *fakeStacks) Destroy(ctx context.Context, stackName string, _ stack.RunOptions) (stack.Result, error) {
	s.j.add("destroy %s", stackName)
	if s.destroyErr == nil && !s.hang { // a destroy that fails or is cancelled leaves its stack
		s.mu.Lock()
		delete(s.made, stackName)
		s.mu.Unlock()
	}
	if s.hang {
		<-ctx.Done()
		return stack.Result{Operation: "destroy", Start: time.Now(), End: time.Now()}, errors.New("destroy cancelled")
	}
	now := time.Now()
	if s.destroyMissing {
		return stack.Result{Operation: "destroy", Start: now, End: now, StackMissing: true}, s.destroyErr
	}
	return stack.Result{Operation: "destroy", Start: now, End: now, Changes: map[string]int{"delete": 3},
		Recovered: s.destroyRecovered}, s.destroyErr
}

func (s *fakeStacks) killCh() chan struct{} {
	s.killOnce.Do(func() { s.killed = make(chan struct{}) })
	return s.killed
}

func (s *fakeStacks) SweepWorkspaces(live func(string) bool) int {
	s.j.add("sweep")
	return 0
}

func (s *fakeStacks) Stop(time.Duration) int {
	if s.onStop != nil {
		s.onStop()
	}
	return 0
}

func (s *fakeStacks) Kill() int {
	s.j.add("kill")
	ch := s.killCh()
	select {
	case <-ch:
	default:
		close(ch)
	}
	return 1
}

func (s *fakeStacks) CancelLock(_ context.Context, stackName string, ids []string, _ []stack.Lock) error {
	s.j.add("cancel-lock %s %v", stackName, ids)
	return s.cancelErr
}

// HolderGone answers from holderGone and holderAlive, by the lock's pid: what a holder record
// would prove.
func (s *fakeStacks) HolderGone(l stack.Lock, _ string) (bool, bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.holderGone[l.Pid]:
		return true, false, "its holder record says it has ended"
	case s.holderAlive[l.Pid]:
		return false, true, ""
	}
	return false, false, ""
}

// Locks answers locks (nil: the listing fails).
func (s *fakeStacks) Locks(context.Context) ([]stack.Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks, s.locks != nil
}

// unitFixture is one Watcher over fake clients.
type unitFixture struct {
	t        testing.TB
	dyn      *dynamicfake.FakeDynamicClient
	kube     *kubefake.Clientset
	stacks   *fakeStacks
	journal  *journal
	recorder *record.FakeRecorder
	registry *prometheus.Registry
	w        *Watcher
	// failUpdates, when set, is returned by every write (update or patch) of a KindCustomHttp
	// (not its status).
	failUpdates error
	// versions counts the owned objects' writes, for their resourceVersions (newVersion).
	versions int
}

// newUnit builds a Watcher with New over fake clients; opts.Registry and Logger are filled in.
func newUnit(t testing.TB, opts Options) *unitFixture {
	t.Helper()
	j := &journal{}
	f := &unitFixture{t: t, journal: j, stacks: &fakeStacks{j: j}, kube: kubefake.NewClientset(),
		recorder: record.NewFakeRecorder(100), registry: prometheus.NewRegistry()}
	f.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.GroupVersionResource: api.ListKind})
	f.dyn.PrependReactor("update", api.Resource, f.apiserverUpdate)
	f.dyn.PrependReactor("patch", api.Resource, f.apiserverPatch)
	opts.Registry, opts.Logger = f.registry, testLogger()
	if opts.EnvDigestKey == nil {
		opts.EnvDigestKey = testEnvDigestKey
	}
	f.stacks.onRefreshUp = func(d api.Desired) {
		dep, svc, cm := ownedOf(t, d)
		f.putOwned(dep, svc, cm)
	}
	f.w = New(f.dyn, f.kube, f.stacks, opts)
	f.w.recorder = f.recorder // synchronous, readable Events instead of the broadcaster's
	t.Cleanup(func() {
		f.w.queue.ShutDown()
		f.w.events.Shutdown()
	})
	return f
}

// apiserverUpdate gives the fake dynamic client the apiserver's update semantics the watcher
// relies on and that client-go's object tracker lacks (controller-runtime's fake client has
// them, but this project does not use controller-runtime): see store.
func (f *unitFixture) apiserverUpdate(a ktesting.Action) (bool, runtime.Object, error) {
	ua := a.(ktesting.UpdateAction)
	return f.store(ua.GetObject().(*unstructured.Unstructured), ua.GetSubresource() == "status", "update")
}

// apiserverPatch does the same for a JSON merge patch (RFC 7386) of the object, the kind of
// patch the watcher sends (its finalizers): the patch applied to the stored object, then stored
// as an update is, so that a resourceVersion the patch names is a precondition, as on the
// apiserver. Other patches are left to the fake's own reactor.
func (f *unitFixture) apiserverPatch(a ktesting.Action) (bool, runtime.Object, error) {
	pa := a.(ktesting.PatchAction)
	if pa.GetPatchType() != types.MergePatchType || pa.GetSubresource() != "" {
		return false, nil, nil
	}
	obj, err := f.dyn.Tracker().Get(api.GroupVersionResource, pa.GetNamespace(), pa.GetName())
	if err != nil {
		return true, nil, err
	}
	var doc, patch map[string]any
	raw, err := json.Marshal(obj)
	if err == nil {
		err = json.Unmarshal(raw, &doc)
	}
	if err == nil {
		err = json.Unmarshal(pa.GetPatch(), &patch)
	}
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	mergePatch(doc, patch)
	if raw, err = json.Marshal(doc); err != nil {
		return true, nil, err
	}
	next := &unstructured.Unstructured{}
	if err := next.UnmarshalJSON(raw); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	return f.store(next, false, "patch")
}

// mergePatch applies the JSON merge patch patch to doc (RFC 7386): a null removes a key, an
// object is merged key by key, anything else replaces.
func mergePatch(doc, patch map[string]any) {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			dv, ok := doc[k].(map[string]any)
			if !ok {
				dv = map[string]any{}
			}
			mergePatch(dv, pv)
			doc[k] = dv
		default:
			doc[k] = v
		}
	}
}

// store writes in, an update (status: of the status subresource) or a patched object, with the
// apiserver's semantics: optimistic concurrency (a stale resourceVersion is a Conflict, a write
// bumps it), the status subresource (an update of the object keeps the stored status; a status
// update changes only the status), generation bumped by a spec change, and an object being
// deleted goes away with its last finalizer. Accepted writes are journaled ("status ...", or
// "<verb> finalizers=[...]"); a failure set in failUpdates is returned for object writes.
func (f *unitFixture) store(in *unstructured.Unstructured, status bool, verb string) (bool, runtime.Object, error) {
	if f.failUpdates != nil && !status {
		return true, nil, f.failUpdates
	}
	tracker := f.dyn.Tracker()
	obj, err := tracker.Get(api.GroupVersionResource, in.GetNamespace(), in.GetName())
	if err != nil {
		return true, nil, err
	}
	cur := obj.(*unstructured.Unstructured)
	if in.GetResourceVersion() != cur.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(api.GroupVersionResource.GroupResource(), in.GetName(),
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	next := cur.DeepCopy()
	if status {
		next.Object["status"] = in.Object["status"]
	} else {
		next.Object["metadata"], next.Object["spec"] = in.Object["metadata"], in.Object["spec"]
		if !equality.Semantic.DeepEqual(cur.Object["spec"], in.Object["spec"]) {
			next.SetGeneration(cur.GetGeneration() + 1)
		}
	}
	rv, _ := strconv.Atoi(cur.GetResourceVersion())
	next.SetResourceVersion(strconv.Itoa(rv + 1))
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		f.journal.add("deleted")
		return true, next, tracker.Delete(api.GroupVersionResource, next.GetNamespace(), next.GetName())
	}
	if status {
		f.journal.add("status %s", conditionSummary(next))
	} else {
		f.journal.add("%s finalizers=%v", verb, next.GetFinalizers())
	}
	return true, next, tracker.Update(api.GroupVersionResource, next, next.GetNamespace())
}

// conditionSummary is "Ready=<status>/<reason> Reconciling=<status>/<reason>" of u.
func conditionSummary(u *unstructured.Unstructured) string {
	var st api.KindCustomHttpStatus
	raw, _ := u.Object["status"].(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
		return "unreadable: " + err.Error()
	}
	s := ""
	for _, typ := range []string{api.ConditionReady, api.ConditionReconciling} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil {
			s += fmt.Sprintf(" %s=%s/%s", typ, c.Status, c.Reason)
		}
	}
	if s == "" {
		return "none"
	}
	return s[1:]
}

// kch builds a KindCustomHttp at generation 1, resourceVersion 1, with the given spec (nil:
// two replicas on port 80, one configMapData key) and finalizers.
func kch(name string, spec map[string]any, finalizers ...string) *unstructured.Unstructured {
	if spec == nil {
		spec = map[string]any{"replicaCount": int64(2), "port": int64(80), "configMapData": map[string]any{"hostports": "a,1"}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(api.GroupVersionKind)
	u.SetNamespace(unitNS)
	u.SetName(name)
	u.SetUID(types.UID("uid-" + name))
	u.SetGeneration(1)
	u.SetResourceVersion("1")
	u.SetFinalizers(finalizers)
	return u
}

// create stores u in the fake apiserver and shows it in the informer cache.
func (f *unitFixture) create(u *unstructured.Unstructured) {
	f.t.Helper()
	if err := f.dyn.Tracker().Add(u.DeepCopy()); err != nil {
		f.t.Fatalf("add %s: %v", u.GetName(), err)
	}
	f.deliver(u.GetName())
}

// stored is the object as the fake apiserver holds it.
func (f *unitFixture) stored(name string) *unstructured.Unstructured {
	f.t.Helper()
	obj, err := f.dyn.Tracker().Get(api.GroupVersionResource, unitNS, name)
	if err != nil {
		f.t.Fatalf("get %s: %v", name, err)
	}
	return obj.(*unstructured.Unstructured).DeepCopy()
}

// storedCR is stored, converted; of a spec that does not convert (an unknown field) only
// metadata and status are read.
func (f *unitFixture) storedCR(name string) *api.KindCustomHttp {
	f.t.Helper()
	u := f.stored(name)
	o, err := api.FromUnstructured(u)
	if err != nil {
		delete(u.Object, "spec")
		if o, err = api.FromUnstructured(u); err != nil {
			f.t.Fatal(err)
		}
	}
	return o
}

// deliver makes the informer cache show the stored object, as a watch event would.
func (f *unitFixture) deliver(name string) {
	f.t.Helper()
	if err := f.w.informer.GetIndexer().Update(f.stored(name)); err != nil {
		f.t.Fatal(err)
	}
}

// change edits the stored object as a user would (spec and metadata through an update,
// status through the status subresource when status is true) and delivers it.
func (f *unitFixture) change(name string, status bool, edit func(u *unstructured.Unstructured)) {
	f.t.Helper()
	u := f.stored(name)
	edit(u)
	kept := f.journal.take()
	defer f.journal.put(kept) // the test's own write is no reconcile's doing
	c := f.dyn.Resource(api.GroupVersionResource).Namespace(unitNS)
	var err error
	if status {
		_, err = c.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
	} else {
		_, err = c.Update(context.Background(), u, metav1.UpdateOptions{})
	}
	if err != nil {
		f.t.Fatalf("change %s: %v", name, err)
	}
	f.deliver(name)
}

// markDeleted does what the apiserver does on a delete of an object with finalizers: sets
// deletionTimestamp; the informer shows it.
func (f *unitFixture) markDeleted(name string) {
	f.t.Helper()
	u := f.stored(name)
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	if err := f.dyn.Tracker().Update(api.GroupVersionResource, u, unitNS); err != nil {
		f.t.Fatal(err)
	}
	f.deliver(name)
}

// reconcile runs the sync handler on name and returns its error; errRolloutInProgress, which
// only asks the worker to look again later, is nil here (reconcileRaw keeps it).
func (f *unitFixture) reconcile(name string) error {
	if err := f.reconcileRaw(name); !errors.Is(err, errRolloutInProgress) {
		return err
	}
	return nil
}

// reconcileRaw runs the sync handler on name and returns its error as the worker sees it.
func (f *unitFixture) reconcileRaw(name string) error {
	return f.w.reconcile(context.Background(), cache.ObjectName{Namespace: unitNS, Name: name})
}

// events drains the recorded Events as "Type Reason".
func (f *unitFixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			var typ, reason string
			_, _ = fmt.Sscan(e, &typ, &reason)
			out = append(out, typ+" "+reason)
		default:
			return out
		}
	}
}

// desiredOf is u's Desired.
func desiredOf(t testing.TB, u *unstructured.Unstructured) api.Desired {
	t.Helper()
	cr, err := api.FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	d, err := api.Resolve(cr)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// owned are the Deployment, Service and ConfigMap an up of u's spec leaves (what the program
// declares, infra.Expected), each with a UID of its name, with every replica available.
func owned(t testing.TB, u *unstructured.Unstructured) (*appsv1.Deployment, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	return ownedOf(t, desiredOf(t, u))
}

// ownedOf is owned for the desired state d.
func ownedOf(t testing.TB, d api.Desired) (*appsv1.Deployment, *corev1.Service, *corev1.ConfigMap) {
	t.Helper()
	objs, err := infra.Expected(d)
	if err != nil {
		t.Fatal(err)
	}
	dep, svc, cm := objs.Deployment, objs.Service, objs.ConfigMap
	for _, m := range []metav1.Object{dep, svc, cm} {
		m.SetUID(types.UID("uid-" + m.GetName()))
	}
	dep.Generation = 1
	replicas := *dep.Spec.Replicas
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas,
		ReadyReplicas: replicas, AvailableReplicas: replicas}
	return dep, svc, cm
}

// ownedStore is where an owned object lives: its resource in the fake typed client and the
// owned-object informer cache that shows it.
func (f *unitFixture) ownedStore(o runtime.Object) (schema.GroupVersionResource, cache.Indexer) {
	f.t.Helper()
	deployments, services, configMaps := f.w.owned.informers[0], f.w.owned.informers[1], f.w.owned.informers[2]
	switch o.(type) {
	case *appsv1.Deployment:
		return appsv1.SchemeGroupVersion.WithResource("deployments"), deployments.GetIndexer()
	case *corev1.Service:
		return corev1.SchemeGroupVersion.WithResource("services"), services.GetIndexer()
	case *corev1.ConfigMap:
		return corev1.SchemeGroupVersion.WithResource("configmaps"), configMaps.GetIndexer()
	}
	f.t.Fatalf("not an owned kind: %T", o)
	return schema.GroupVersionResource{}, nil
}

// putOwned stores (creates or replaces) objs in the fake typed client and shows them in the
// owned-object caches, as a change and its watch event would. Each gets a new resourceVersion,
// as every write does on the apiserver.
func (f *unitFixture) putOwned(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		gvr, _ := f.ownedStore(o)
		f.newVersion(o)
		ns := o.(metav1.Object).GetNamespace()
		err := f.kube.Tracker().Update(gvr, o, ns)
		if apierrors.IsNotFound(err) {
			err = f.kube.Tracker().Create(gvr, o, ns)
		}
		if err != nil {
			f.t.Fatal(err)
		}
	}
	f.cacheOwned(objs...)
}

// newVersion gives o the next resourceVersion of the fixture's fake apiserver.
func (f *unitFixture) newVersion(o runtime.Object) {
	f.versions++
	o.(metav1.Object).SetResourceVersion(strconv.Itoa(1000 + f.versions))
}

// cacheOwned shows objs in the owned-object caches only (the cache then differs from the
// live objects, as it does for a moment after every change); each gets a new resourceVersion
// unless putOwned gave it one.
func (f *unitFixture) cacheOwned(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		_, idx := f.ownedStore(o)
		if old, ok, _ := idx.Get(o); ok && old.(metav1.Object).GetResourceVersion() == o.(metav1.Object).GetResourceVersion() {
			f.newVersion(o)
		}
		if err := idx.Update(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// deleteOwned deletes o from the fake typed client and its cache.
func (f *unitFixture) deleteOwned(o runtime.Object) {
	f.t.Helper()
	gvr, idx := f.ownedStore(o)
	m := o.(metav1.Object)
	if err := f.kube.Tracker().Delete(gvr, m.GetNamespace(), m.GetName()); err != nil {
		f.t.Fatal(err)
	}
	if err := idx.Delete(o); err != nil {
		f.t.Fatal(err)
	}
}

// applied creates u with the owned objects of its spec and runs the first reconcile (the
// create up), then shows the stored result in the cache: a stack that is up to date. The
// journal and Events of that first reconcile are discarded.
func (f *unitFixture) applied(u *unstructured.Unstructured) {
	f.t.Helper()
	dep, svc, cm := owned(f.t, u)
	f.putOwned(dep, svc, cm)
	f.create(u)
	if err := f.reconcile(u.GetName()); err != nil {
		f.t.Fatalf("first reconcile: %v", err)
	}
	f.deliver(u.GetName())
	f.journal.take()
	f.events()
	f.stacks.ups = nil
}

// wantCondition fails unless o's condition typ has status and reason at o's generation.
func wantCondition(t *testing.T, o *api.KindCustomHttp, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(o.Status.Conditions, typ)
	switch {
	case c == nil:
		t.Errorf("no %s condition in %+v", typ, o.Status.Conditions)
	case c.Status != status || c.Reason != reason:
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	case c.ObservedGeneration != o.Generation || o.Status.ObservedGeneration != o.Generation:
		t.Errorf("%s observedGeneration %d, status.observedGeneration %d, want %d",
			typ, c.ObservedGeneration, o.Status.ObservedGeneration, o.Generation)
	}
}

package watcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

func (f *fixture) patch(t *testing.T, name, mergePatch string) {
	t.Helper()
	if _, err := f.cr.Patch(context.Background(), name, types.MergePatchType, []byte(mergePatch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch %s: %v", name, err)
	}
}

func (f *fixture) deploymentReplicas(t *testing.T, name string) int32 {
	t.Helper()
	d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return -1
	}
	return *d.Spec.Replicas
}

// poll is pollFor with a 60 s timeout.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	pollFor(t, 60*time.Second, what, cond)
}

// A hand-made change to an owned object is seen through the owned-object informers, repaired
// with a refreshing up, and recorded in Events; an unchanged object is never touched.
func TestDriftRepair(t *testing.T) {
	f := start(t)
	f.create(t, "web", "  replicaCount: 2\n  port: 80\n  configMapData: {hostports: \"a,1\"}\n")
	f.waitFor(t, "web", "Ready", readyAt(1))
	ups := f.stacks.ups.Load()

	// kubectl scale deploy/web --replicas=5
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := f.cluster.Kube.AppsV1().Deployments(f.ns).GetScale(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = 5
		_, err = f.cluster.Kube.AppsV1().Deployments(f.ns).UpdateScale(context.Background(), "web", s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "replicas repaired to 2", func() bool { return f.deploymentReplicas(t, "web") == 2 && f.stacks.ups.Load() > ups })
	f.waitEvent(t, "web", ReasonDriftDetected)
	f.waitEvent(t, "web", ReasonRepaired)
	if !f.stacks.lastRunOptions().Refresh {
		t.Error("the repair ran up without refresh: Pulumi would not have seen the change")
	}
	f.waitFor(t, "web", "Ready after repair", readyAt(1))

	// kubectl delete configmap web-configmap
	ups = f.stacks.ups.Load()
	if err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Delete(context.Background(), "web-configmap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "configmap re-created", func() bool {
		cm, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), "web-configmap", metav1.GetOptions{})
		return err == nil && cm.Data["hostports"] == "a,1"
	})
	if f.stacks.ups.Load() != ups+1 {
		t.Errorf("ups for one deleted ConfigMap = %d, want 1", f.stacks.ups.Load()-ups)
	}

	// Nothing changed since: resyncs every second start nothing.
	f.noUpsThrough(t, 3, "resyncs without drift")
}

// Ready means the pods are available, not only that Pulumi finished.
func TestReadyWaitsForReplicas(t *testing.T) {
	f := start(t)
	f.create(t, "stuck", "  replicaCount: 2\n  port: 80\n  image: example.com/pending:1\n")
	// The image's pods cannot be placed (the local cluster's node takes no such image): Ready
	// carries the pods' own reason and counts the available pods.
	o := f.waitFor(t, "stuck", "Unschedulable with a count", func(o *api.KindCustomHttp) bool {
		c := cond(o, api.ConditionReady)
		return c.Reason == "Unschedulable" && o.Status.AppliedDigest != "" && strings.Contains(c.Message, "replicas available")
	})
	if c := cond(o, api.ConditionReady); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "0 of 2 replicas available") {
		t.Fatalf("Ready = %+v", c)
	}
	if c := cond(o, api.ConditionReconciling); c.Status != metav1.ConditionTrue {
		t.Fatalf("Reconciling = %+v, want True while pods are unavailable", c)
	}
	if o.Status.Replicas != 2 || o.Status.AvailableReplicas != 0 {
		t.Fatalf("replicas %d available %d", o.Status.Replicas, o.Status.AvailableReplicas)
	}
	f.patch(t, "stuck", `{"spec":{"image":"example.com/ok:1"}}`)
	o = f.waitFor(t, "stuck", "Ready once pods are available", readyAt(2))
	if o.Status.AvailableReplicas != 2 {
		t.Fatalf("available = %d", o.Status.AvailableReplicas)
	}
}

func TestSuspend(t *testing.T) {
	f := start(t)
	f.create(t, "paused", "  replicaCount: 1\n  port: 80\n  suspend: true\n")
	o := f.waitFor(t, "paused", "Suspended", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReconciling).Reason == api.ReasonSuspended
	})
	if c := cond(o, api.ConditionReconciling); c.Status != metav1.ConditionFalse {
		t.Fatalf("Reconciling = %+v", c)
	}
	f.noUpsThrough(t, 2, "resyncs while suspended")
	if n := f.stacks.ups.Load(); n != 0 {
		t.Fatalf("%d ups while suspended", n)
	}
	f.patch(t, "paused", `{"spec":{"suspend":false}}`)
	f.waitFor(t, "paused", "Ready after resume", readyAt(2))
}

// kstatusOf is kstatus' reading (sigs.k8s.io/cli-utils/pkg/kstatus) of the stored object name.
func (f *fixture) kstatusOf(t *testing.T, name string) status.Status {
	t.Helper()
	u, err := f.cr.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

// suspendedAt: Reconciling False, Suspended, at generation gen.
func suspendedAt(gen int64) func(*api.KindCustomHttp) bool {
	return func(o *api.KindCustomHttp) bool {
		c := cond(o, api.ConditionReconciling)
		return c.Reason == api.ReasonSuspended && c.ObservedGeneration == gen
	}
}

// A suspended object's status describes the generation the stack holds. Suspending alone
// changes nothing the stack holds: status.observedGeneration follows, kstatus reads Current.
// A spec changed while suspended was never applied: status.observedGeneration stays at the
// generation the stack holds (and Ready with it), so kstatus reads InProgress, not Current,
// until the object is resumed and the up applies it.
func TestSuspendKeepsObservedGeneration(t *testing.T) {
	f := start(t)
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "Ready", readyAt(1))
	ups := f.stacks.ups.Load()

	f.patch(t, "web", `{"spec":{"suspend":true}}`)
	o := f.waitFor(t, "web", "Suspended at generation 2", suspendedAt(2))
	if o.Status.ObservedGeneration != 2 || cond(o, api.ConditionReady).Status != metav1.ConditionTrue {
		t.Errorf("suspended alone: status.observedGeneration %d, Ready %+v; want 2 and True", o.Status.ObservedGeneration, cond(o, api.ConditionReady))
	}
	if s := f.kstatusOf(t, "web"); s != status.CurrentStatus {
		t.Errorf("kstatus of an object suspended without a change: %s, want %s", s, status.CurrentStatus)
	}

	f.patch(t, "web", `{"spec":{"replicaCount":2}}`)
	o = f.waitFor(t, "web", "Suspended at generation 3", suspendedAt(3))
	if ready := cond(o, api.ConditionReady); o.Status.ObservedGeneration != 2 || ready.ObservedGeneration != 1 {
		t.Errorf("suspended with a new spec: status.observedGeneration %d, Ready at %d; want 2 (the stack holds generation 1's spec, which 2 only suspended) and 1",
			o.Status.ObservedGeneration, ready.ObservedGeneration)
	}
	if s := f.kstatusOf(t, "web"); s != status.InProgressStatus {
		t.Errorf("kstatus of a suspended object whose new spec was never applied: %s, want %s", s, status.InProgressStatus)
	}
	if n := f.stacks.ups.Load() - ups; n != 0 {
		t.Fatalf("%d ups while suspended", n)
	}

	f.patch(t, "web", `{"spec":{"suspend":false}}`)
	f.waitFor(t, "web", "Ready at generation 4 after the resume", readyAt(4))
	if f.deploymentReplicas(t, "web") != 2 {
		t.Errorf("Deployment replicas %d after the resume, want 2", f.deploymentReplicas(t, "web"))
	}
}

// The reconcile-request annotation forces one refreshing up and is echoed in status.
func TestReconcileRequestAnnotation(t *testing.T) {
	f := start(t)
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "Ready", readyAt(1))
	ups := f.stacks.ups.Load()
	f.patch(t, "web", fmt.Sprintf(`{"metadata":{"annotations":{%q:"2026-11-22T10:00:00Z"}}}`, api.ReconcileRequestAnnotation))
	o := f.waitFor(t, "web", "request handled", func(o *api.KindCustomHttp) bool {
		return o.Status.LastHandledReconcileAt == "2026-11-22T10:00:00Z"
	})
	if f.stacks.ups.Load() != ups+1 || !f.stacks.lastRunOptions().Refresh {
		t.Fatalf("ups %d (want %d) refresh %v", f.stacks.ups.Load(), ups+1, f.stacks.lastRunOptions().Refresh)
	}
	if c := cond(o, api.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", c)
	}
	f.noUpsThrough(t, 2, "resyncs after a handled request")
	f.waitEvent(t, "web", ReasonRequested)
}

// holdLock starts a slow up of the CR's stack in the background (as a laptop `up` would) and
// returns once it holds the lock, with the lock holder's pid, read from the file backend's lock
// file (probing with another up could take the lock first and make the slow one fail).
func holdLock(t *testing.T, f *fixture, name string, sleep time.Duration) (int, chan error) {
	t.Helper()
	stackName, _ := f.stacks.StackName(f.ns, name)
	if _, err := f.stacks.Manager.Up(context.Background(), stackName, program(0), stack.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.stacks.Manager.Up(context.Background(), stackName, program(sleep), stack.RunOptions{})
		done <- err
	}()
	var pid int
	poll(t, "lock taken", func() bool {
		files, _ := filepath.Glob(filepath.Join(f.backend, ".pulumi", "locks", "*", "kindcustomhttp", stackName, "*.json"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			var l struct{ Pid int }
			if err == nil && json.Unmarshal(b, &l) == nil && l.Pid > 0 {
				pid = l.Pid
				return true
			}
		}
		return false
	})
	return pid, done
}

// A stack locked by a live update is a wait (UpdateConflict), not a failure storm; the CR
// becomes Ready once the lock is released.
func TestLockedStackIsAWait(t *testing.T) {
	f := start(t)
	_, done := holdLock(t, f, "web", 8*time.Second)
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "UpdateConflict", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonUpdateConflict
	})
	// The holder itself may read a checkpoint torn by the watcher's concurrent attempt (the
	// file backend's race, classified as ErrLocked); only another failure is one.
	if err := <-done; err != nil && !errors.Is(err, stack.ErrLocked) {
		t.Fatalf("the lock holder failed: %v", err)
	}
	f.waitFor(t, "web", "Ready after the lock is released", readyAt(1))
	if v := counter(t, f.registry, "pulumi_operator_reconciles_total", "result", "locked"); v < 1 {
		t.Errorf("reconciles_total{result=locked} = %v", v)
	}
}

// A lock left by a killed pulumi process on this host is removed and reported.
func TestStaleLockCleared(t *testing.T) {
	f := start(t)
	pid, done := holdLock(t, f, "web", 30*time.Second)
	p, _ := os.FindProcess(pid)
	if err := p.Kill(); err != nil {
		t.Fatalf("kill lock holder: %v", err)
	}
	<-done
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "web", "Ready after the stale lock is removed", readyAt(1))
	f.waitEvent(t, "web", ReasonStaleLockCleared)
}

// SIGTERM (Run's context cancelled) lets an in-flight up finish within the grace period.
func TestShutdownLetsUpFinish(t *testing.T) {
	f := startWith(t, Options{ShutdownGrace: 30 * time.Second})
	f.create(t, "slow", "  replicaCount: 1\n  port: 80\n  image: example.com/slow:1\n")
	poll(t, "up started", func() bool { return f.stacks.ups.Load() == 1 })
	time.Sleep(500 * time.Millisecond)
	f.stop()
	u, err := f.cr.Get(context.Background(), "slow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := api.FromUnstructured(u)
	if lu := o.Status.LastUpdate; lu == nil || lu.Result != "succeeded" || o.Status.AppliedDigest == "" {
		t.Fatalf("after shutdown the in-flight up did not finish and report: %+v", o.Status)
	}
	f.stop = f.run(t, Options{Namespace: f.ns, Resync: time.Second, Logger: testLogger()}) // for cleanup
}

// hangingUps runs ups as programStacks does, except that an image containing "hang" runs a
// program that blocks for 10 minutes, far past any shutdown bound, so only a cancelled up
// ends in time. The program ends early when the engine goes away (its context is done: a
// real program's resource calls fail then; the Automation API waits for an inline program to
// return before Up returns) or when release is closed (cleanup). running receives once the
// program runs.
type hangingUps struct {
	*programStacks
	running chan struct{}
	release chan struct{}
}

func (h *hangingUps) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	if !strings.Contains(d.Image, "hang") {
		return h.programStacks.Up(ctx, d, adopt, opts)
	}
	h.ups.Add(1)
	name, err := h.StackName(d.Namespace, d.Name)
	if err != nil {
		return stack.Result{}, err
	}
	return h.Manager.Up(ctx, name, func(pctx *pulumi.Context) error {
		select {
		case h.running <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-pctx.Context().Done(): // the engine went away: how a real program's calls end
		case <-time.After(10 * time.Minute):
		}
		pctx.Export(infra.OutputDeploymentName, pulumi.String(d.Name))
		return nil
	}, opts)
}

// Past the grace period the up is cancelled: Run returns long before the program would end,
// the up ends failed, and Pulumi released the stack's lock.
func TestShutdownCancelsAfterGrace(t *testing.T) {
	h := &hangingUps{running: make(chan struct{}, 1), release: make(chan struct{})}
	f := startWrapped(t, Options{ShutdownGrace: time.Second}, func(p *programStacks) Stacks {
		h.programStacks = p
		return h
	})
	var once sync.Once
	release := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(release) // before the fixture's cleanup, which waits for Run
	f.create(t, "slow", "  replicaCount: 1\n  port: 80\n  image: example.com/hang:1\n")
	select {
	case <-h.running:
	case <-time.After(60 * time.Second):
		t.Fatal("the up's program never started")
	}

	start := time.Now()
	stopped := make(chan struct{})
	go func() { f.stop(); close(stopped) }()
	// Grace 1 s, then SIGINT to the CLI, which the Automation API kills 10 s later if it is
	// still running; 60 s leaves room for a loaded machine and none for the 10-minute program.
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatalf("Run did not return within 60 s of shutdown with a 1 s grace period: the up was not cancelled")
	}
	t.Logf("Run returned %s after shutdown", time.Since(start).Round(100*time.Millisecond))
	if n := histogramCountOf(t, f.registry, "pulumi_operator_pulumi_operation_duration_seconds", "result", "failed"); n < 1 {
		t.Errorf("failed ups observed = %d, want the cancelled one", n)
	}
	if n := histogramCountOf(t, f.registry, "pulumi_operator_pulumi_operation_duration_seconds", "result", "succeeded"); n != 0 {
		t.Errorf("succeeded ups observed = %d, want 0: the program cannot have finished", n)
	}
	// The cancelled up is in status, although Run's context had ended (flushStatus does not
	// end with it): not left at "pulumi up ... is running".
	u, err := f.cr.Get(context.Background(), "slow", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := api.FromUnstructured(u)
	if lu := o.Status.LastUpdate; lu == nil || lu.Result != "failed" || cond(o, api.ConditionReady).Reason == api.ReasonProgressing {
		t.Errorf("status after the cancelled up: lastUpdate %+v, Ready %+v; want the failed up recorded", lu, cond(o, api.ConditionReady))
	}
	// Pulumi stopped cleanly: no lock file left, and the next up of the stack just runs.
	stackName, _ := f.stacks.StackName(f.ns, "slow")
	if locks, _ := filepath.Glob(filepath.Join(f.backend, ".pulumi", "locks", "*", "kindcustomhttp", stackName, "*.json")); len(locks) > 0 {
		t.Errorf("lock left behind by the cancelled up: %v", locks)
	}
	if _, err := f.stacks.Manager.Up(context.Background(), stackName, program(0), stack.RunOptions{}); err != nil {
		t.Fatalf("after a cancelled up the stack is not usable (lock left behind?): %v", err)
	}
	release()
	f.stop = f.run(t, Options{Namespace: f.ns, Resync: time.Second, Logger: testLogger()}) // for cleanup
}

func TestMetrics(t *testing.T) {
	f := start(t)
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n")
	f.create(t, "bad", "  replicaCount: 1\n  port: 80\n  configMapData: {\"a/b\": x}\n")
	f.waitFor(t, "web", "Ready", readyAt(1))
	f.waitFor(t, "bad", "Stalled", func(o *api.KindCustomHttp) bool { return cond(o, api.ConditionStalled).Status == metav1.ConditionTrue })
	if v := counter(t, f.registry, "pulumi_operator_reconciles_total", "result", "success"); v < 2 {
		t.Errorf("reconciles_total{result=success} = %v", v)
	}
	if v := gauge(t, f.registry, "pulumi_operator_stacks_managed"); v != 2 {
		t.Errorf("stacks_managed = %v, want 2", v)
	}
	if v := gauge(t, f.registry, "pulumi_operator_stacks_failing"); v != 1 {
		t.Errorf("stacks_failing = %v, want 1", v)
	}
	if v := counter(t, f.registry, "workqueue_adds_total", "name", "kindcustomhttp"); v < 2 {
		t.Errorf("workqueue_adds_total = %v", v)
	}
	if n := histogramCount(t, f.registry, "pulumi_operator_pulumi_operation_duration_seconds"); n < 1 {
		t.Errorf("pulumi operation observations = %d", n)
	}
	if n := histogramCount(t, f.registry, "workqueue_queue_duration_seconds"); n < 1 {
		t.Errorf("workqueue latency observations = %d", n)
	}
}

func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	t.Fatalf("metric %s not exported", name)
	return nil
}

func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	for _, m := range family(t, reg, name).GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return family(t, reg, name).GetMetric()[0].GetGauge().GetValue()
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range family(t, reg, name).GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// histogramCountOf is the sample count of the histogram family name over its series whose
// label has value.
func histogramCountOf(t *testing.T, reg *prometheus.Registry, name, label, value string) uint64 {
	t.Helper()
	var n uint64
	for _, m := range family(t, reg, name).GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

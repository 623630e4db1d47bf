package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestFaults makes happen, on the real node with the chart's install, what real clusters do to
// an operator, and checks what the user sees and what is left behind:
//
//   - broken: workloads whose pods can never start (an image that cannot be pulled), more of
//     them than workers, beside a healthy object: the healthy one is Ready within 30 s, the
//     broken ones say why (the kubelet's own reason), and one recovers by itself once fixed.
//   - force-deleted: the operator pod force-deleted (`kubectl delete pod --grace-period=0
//     --force`, what an eviction or a lost node amounts to) in the middle of an up whose process
//     is hung: the new pod removes the dead pod's lock (the Lease rule) and the object is Ready
//     within 60 s of the new leader; no lock, no duplicate object.
//   - container-killed: the operator container's PID 1 killed (SIGKILL) in the middle of a
//     destroy: nothing of the old container lives on, the restarted container finishes the
//     destroy, and nothing is left.
func TestFaults(t *testing.T) {
	n := connect(t)
	opNS, sel, stateDir, pod := installChart(t, n)
	ns := "faults-e2e"
	n.restrictedNamespace(t, ns)
	t.Run("broken", func(t *testing.T) { brokenWorkloads(t, n, ns) })
	t.Run("force-deleted", func(t *testing.T) { forceDeleted(t, n, opNS, sel, stateDir, pod, ns) })
	t.Run("container-killed", func(t *testing.T) { containerKilled(t, n, opNS, sel, stateDir, ns) })
}

// brokenWorkloads: three objects whose image cannot be pulled (more than the chart's 2 workers)
// and a healthy one created after them.
func brokenWorkloads(t *testing.T, n *node, ns string) {
	ctx := context.Background()
	res := n.dyn.Resource(crs).Namespace(ns)
	var broken []string
	for i := range 3 {
		name := fmt.Sprintf("broken-%d", i)
		u := sample(t, ns, name, "localhost,8080\n")
		if err := unstructured.SetNestedField(u.Object, "registry.invalid/no-such-image:1", "spec", "image"); err != nil {
			t.Fatal(err)
		}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		broken = append(broken, name)
	}
	t.Cleanup(func() {
		for _, b := range broken {
			_ = res.Delete(context.Background(), b, metav1.DeleteOptions{})
		}
	})
	healthy := sample(t, ns, "healthy", "localhost,8080\n")
	created := time.Now()
	if _, err := res.Create(ctx, healthy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), "healthy", metav1.DeleteOptions{}) })
	n.waitReady(t, ns, "healthy", 30*time.Second)
	t.Logf("healthy object Ready %s after its creation, beside %d objects whose pods cannot start", time.Since(created).Round(100*time.Millisecond), len(broken))

	for _, b := range broken {
		var reason, msg string
		within(t, 3*time.Minute, b+" says why its pods cannot start", func(ctx context.Context) (bool, error) {
			cr, err := res.Get(ctx, b, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			var status string
			status, reason, msg = condition(cr, "Ready")
			return status == "False" && (reason == "ErrImagePull" || reason == "ImagePullBackOff"), nil
		})
		t.Logf("%s: Ready False, %s: %s", b, reason, msg)
	}

	// The cause goes: the first broken object gets an image that exists, and recovers by
	// itself (its Deployment's change reaches the operator; no restart, no annotation).
	fixed := time.Now()
	if _, err := res.Patch(ctx, broken[0], types.MergePatchType, []byte(`{"spec":{"image":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitReady(t, ns, broken[0], 2*time.Minute)
	t.Logf("%s Ready %s after its image was fixed", broken[0], time.Since(fixed).Round(100*time.Millisecond))
}

// forceDeleted: an up hung in the middle (its engine host stopped while it holds the stack's
// lock), then the operator pod force-deleted.
func forceDeleted(t *testing.T, n *node, opNS, sel, stateDir, pod, ns string) {
	ctx := context.Background()
	res := n.dyn.Resource(crs).Namespace(ns)
	if _, err := res.Create(ctx, sample(t, ns, "web", "localhost,8080\n"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), "web", metav1.DeleteOptions{}) })
	n.waitReady(t, ns, "web", reconcile)
	uid := n.podUID(t, opNS, pod)

	// Catch an up holding its lock and stop its engine host there (when the up ended before the
	// stop landed, the host is let go and another change tried).
	var stopped []int
	want := ""
	caught := n.catchUp(t, stateDir, func(attempt int) {
		want = fmt.Sprintf("localhost,8080\npeer,%d\n", 80+attempt)
		patchData(t, n, ns, "web", want)
	}, func() bool {
		stopped = signalPodProcs(uid, "pulumi-operator-engine", "", syscall.SIGSTOP)
		if _, locks := stackFiles(t, stateDir); len(stopped) > 0 && len(locks) > 0 {
			return true
		}
		for _, p := range stopped {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
		return false
	})
	if !caught {
		t.Fatal("never caught an up holding the stack's lock")
	}
	_, locks := stackFiles(t, stateDir)
	t.Logf("up hung: engine host %v stopped holding %v", stopped, locks)

	zero := int64(0)
	if err := n.kube.CoreV1().Pods(opNS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("force-delete operator pod %s: %v", pod, err)
	}
	deleted := time.Now()
	next := n.operatorPod(t, opNS, sel, pod, operatorStart)
	var led time.Time
	within(t, 2*time.Minute, "the new pod leading", func(ctx context.Context) (bool, error) {
		if strings.Contains(n.podLog(t, opNS, next), "became leader") {
			led = time.Now()
			return true, nil
		}
		return false, nil
	})
	n.waitReady(t, ns, "web", 60*time.Second)
	ready := time.Now()
	log := n.podLog(t, opNS, next)
	if !strings.Contains(log, "cancelled stale lock") || !strings.Contains(log, "earlier operator pod of this installation") {
		t.Errorf("the new pod's log does not say it removed the dead pod's lock by the Lease rule")
	}
	if _, locks := stackFiles(t, stateDir); len(locks) != 0 {
		t.Errorf("locks left: %v", locks)
	}
	n.available(t, ns, "web", 2, 2*time.Minute)
	expectBody(t, n.serviceURL(t, ns, "web")+"/config/hostports", want)
	objs := n.objectsOf(t, ns)
	for _, o := range []string{"deployment/web", "service/web", "configmap/web-configmap"} {
		if c := countOf(objs, o); c != 1 {
			t.Errorf("%s exists %d times, want once (objects %v)", o, c, objs)
		}
	}
	t.Logf("force-deleted pod %s: pod %s led %s after the delete; Ready %s after it led (%s after the delete); lock removed by the Lease rule, none left",
		pod, next, led.Sub(deleted).Round(100*time.Millisecond), ready.Sub(led).Round(100*time.Millisecond), ready.Sub(deleted).Round(100*time.Millisecond))
}

// containerKilled: the operator container's PID 1 killed (SIGKILL) while a destroy's pulumi
// process is stopped holding the lock.
func containerKilled(t *testing.T, n *node, opNS, sel, stateDir, ns string) {
	pod := n.operatorPod(t, opNS, sel, "", operatorStart)
	uid := n.podUID(t, opNS, pod)
	restarts := n.restarts(t, opNS, pod)
	doomed, stopped := catchDestroy(t, n, uid, ns)
	if doomed == "" {
		t.Fatal("never caught a destroy's pulumi process running (5 objects deleted)")
	}
	res := n.dyn.Resource(crs).Namespace(ns)
	init := podInit(uid)
	if init == 0 {
		t.Fatal("found no PID 1 of the operator container")
	}
	if err := syscall.Kill(init, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the operator container's PID 1 (%d): %v", init, err)
	}
	killed := time.Now()
	t.Logf("destroy's pulumi process %v stopped; killed the container's PID 1 (%d)", stopped, init)
	within(t, 30*time.Second, "nothing of the killed container left", func(context.Context) (bool, error) {
		return len(podProcsStartedBefore(uid, killed)) == 0, nil
	})
	left := time.Since(killed)
	within(t, 2*time.Minute, "the container restarted", func(context.Context) (bool, error) {
		return n.restarts(t, opNS, pod) > restarts, nil
	})
	within(t, reconcile, "the object gone", func(ctx context.Context) (bool, error) {
		_, err := res.Get(ctx, doomed, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	gone := time.Since(killed)
	if objs := n.objectsOf(t, ns); slices.ContainsFunc(objs, func(o string) bool { return strings.Contains(o, "doomed") }) {
		t.Errorf("objects left after the destroy: %v", objs)
	}
	stacks, locks := stackFiles(t, stateDir)
	if len(locks) != 0 || slices.ContainsFunc(stacks, func(s string) bool { return strings.Contains(s, "doomed") }) {
		t.Errorf("backend after the destroy: stacks %v, locks %v", stacks, locks)
	}
	t.Logf("container killed mid-destroy of %s: no process of it left after %s; the restarted container finished the destroy %s after the kill",
		doomed, left.Round(100*time.Millisecond), gone.Round(100*time.Millisecond))
}

// catchDestroy creates an object, waits for it to be Ready, deletes it and stops (SIGSTOP) the
// destroy's pulumi process in pod uid, looking every 20 ms. A destroy can end within a
// fraction of a second: one that ended before it was seen is let be and another object tried,
// at most 5. It returns the object whose destroy is stopped and the stopped pids, or "" when
// every destroy was missed.
func catchDestroy(t *testing.T, n *node, uid, ns string) (string, []int) {
	t.Helper()
	ctx := context.Background()
	res := n.dyn.Resource(crs).Namespace(ns)
	for attempt := 1; attempt <= 5; attempt++ {
		name := fmt.Sprintf("doomed-%d", attempt)
		if _, err := res.Create(ctx, sample(t, ns, name, "localhost,8080\n"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.waitReady(t, ns, name, reconcile)
		if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if stopped := signalPodProcs(uid, "pulumi", "destroy", syscall.SIGSTOP); len(stopped) > 0 {
				return name, stopped
			}
			if _, err := res.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				t.Logf("%s: its destroy ended before it was seen; trying another object", name)
				break
			}
		}
	}
	return "", nil
}

func countOf(xs []string, x string) int {
	c := 0
	for _, y := range xs {
		if y == x {
			c++
		}
	}
	return c
}

// podUID is the UID of pod ns/name.
func (n *node) podUID(t *testing.T, ns, name string) string {
	t.Helper()
	p, err := n.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// restarts is the restart count of pod ns/name's first container.
func (n *node) restarts(t *testing.T, ns, name string) int32 {
	t.Helper()
	p, err := n.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		return -1
	}
	return p.Status.ContainerStatuses[0].RestartCount
}

// podLog is the log of pod ns/name's operator container.
func (n *node) podLog(t *testing.T, ns, name string) string {
	t.Helper()
	b, _ := n.kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	return string(b)
}

// hostProc is one process of the host, as procfs reads it.
type hostProc struct {
	pid, ppid int
	argv      []string
	cgroup    string  // every cgroup path, one a line
	started   float64 // seconds since the epoch
}

// hostProcs lists the processes of the host.
func hostProcs() []hostProc {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	var out []hostProc
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		hp := hostProc{pid: p.PID, ppid: st.PPID}
		hp.started, _ = st.StartTime()
		hp.argv, _ = p.CmdLine()
		if cgs, err := p.Cgroups(); err == nil {
			for _, cg := range cgs {
				hp.cgroup += cg.Path + "\n"
			}
		}
		out = append(out, hp)
	}
	return out
}

// inPod reports whether p runs in the pod with UID uid (its cgroup path names the pod).
func (p hostProc) inPod(uid string) bool {
	return strings.Contains(p.cgroup, "pod"+uid) || strings.Contains(p.cgroup, "pod"+strings.ReplaceAll(uid, "-", "_"))
}

// signalPodProcs sends sig to the processes of pod uid whose argv[0] is named base and whose
// arguments contain arg (any, when empty), and returns their pids.
func signalPodProcs(uid, base, arg string, sig syscall.Signal) []int {
	var out []int
	for _, p := range hostProcs() {
		if !p.inPod(uid) || len(p.argv) == 0 || filepath.Base(p.argv[0]) != base {
			continue
		}
		if arg != "" && !slices.Contains(p.argv[1:], arg) {
			continue
		}
		if syscall.Kill(p.pid, sig) == nil {
			out = append(out, p.pid)
		}
	}
	return out
}

// podInit is the host pid of the operator container's PID 1: the pod's pulumi-operator process
// whose parent is not in the pod (the runtime's shim), 0 when there is none.
func podInit(uid string) int {
	procs := hostProcs()
	in := map[int]bool{}
	for _, p := range procs {
		if p.inPod(uid) {
			in[p.pid] = true
		}
	}
	for _, p := range procs {
		if in[p.pid] && !in[p.ppid] && len(p.argv) > 0 && filepath.Base(p.argv[0]) == "pulumi-operator" {
			return p.pid
		}
	}
	return 0
}

// podProcsStartedBefore lists the processes of pod uid (but its pause container) that started
// before t (a second of slack for the two clocks).
func podProcsStartedBefore(uid string, t time.Time) []int {
	var out []int
	for _, p := range hostProcs() {
		if !p.inPod(uid) || len(p.argv) == 0 || filepath.Base(p.argv[0]) == "pause" {
			continue
		}
		if p.started < float64(t.Add(-time.Second).Unix()) {
			out = append(out, p.pid)
		}
	}
	return out
}

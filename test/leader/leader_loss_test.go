package leader

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestLeaderLossCancelsOperations: a leader that loses its Lease in the middle of an up must
// end that up, fencing itself, before another replica can take the Lease over; the new leader
// then removes the lock the killed up left (the old leader can no longer write), adopts what it
// had created, and brings the object to Ready: no wait for a stale-lock timeout, no duplicate.
//
// Two operator processes with the default lease timings (15 s lease, 10 s renew deadline, 2 s
// retry) and a 25 s shutdown grace (the default, longer than the lease: a grace on loss would
// let the old leader run on for 25 s). They reach the API server through testenv.HoldingProxy,
// which holds back the answer to the Deployment's create: the up hangs in the middle, as on a
// slow network, and a graceful cancel cannot end it. The Lease is then taken by an identity that
// never renews it, as a replica cut off from the leader would: the leader must notice within
// its renew deadline, kill its pulumi processes and exit before the follower leads. As root
// each replica runs in a UTS namespace of its own with its own host name, as two pods do, so
// the new leader removes the lock by the Lease rule (an earlier lock holder of this
// installation), not by this host's process table.
//
// Run twice: with every up a pulumi CLI process ("cli", --engine-host none), and with the ups in
// the engine host ("engine-host", the default of a binary that has one beside it).
func TestLeaderLossCancelsOperations(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	t.Run("cli", func(t *testing.T) { leaderLoss(t, stack.NoEngineHost) })
	t.Run("engine-host", func(t *testing.T) { leaderLoss(t, testenv.EngineHost(t)) })
}

// ownHostName returns the command prefix that runs a command in a UTS namespace of its own
// named host (unshare(1), root only), or nil where that cannot be done.
func ownHostName(host string) []string {
	if os.Geteuid() != 0 {
		return nil
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil
	}
	if exec.Command(unshare, "--uts", "true").Run() != nil {
		return nil
	}
	return []string{unshare, "--uts", "--fork", "sh", "-c", `hostname "$0" && exec "$@"`, host}
}

// leaderLoss is TestLeaderLossCancelsOperations with --engine-host engineHost.
func leaderLoss(t *testing.T, engineHost string) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	cli := testenv.PulumiCLI(t)
	bin := buildOperator(t)
	state := t.TempDir()
	ctx := context.Background()
	proxy := c.HoldingProxy(t, func(r *http.Request) bool {
		return r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/"+ns+"/deployments")
	})
	ownHosts := ownHostName("replica-a") != nil
	if !ownHosts {
		t.Log("not root or no unshare: both replicas share this host's name; the new leader removes the old one's lock by its holder record, not by the Lease rule")
	}

	type replica struct {
		cmd    *exec.Cmd
		logs   *testenv.SyncBuffer
		exited chan error
	}
	start := func(name string) *replica {
		r := &replica{logs: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
		args := append(ownHostName(name), bin, "--kubeconfig", proxy.Kubeconfig, "--state-dir", state, "--cluster-name", "loss",
			"--pulumi", cli, "--engine-host", engineHost, "watch", "--namespace", ns, "--leader-elect", "--leader-election-namespace", ns,
			"--health-addr", "", "--metrics-addr", "", "--workers", "1")
		r.cmd = exec.Command(args[0], args[1:]...)
		r.cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=loss")
		r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.exited <- r.cmd.Wait() }()
		t.Cleanup(func() {
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(40 * time.Second):
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
			}
			if t.Failed() {
				t.Logf("%s log:\n%s", name, r.logs.String())
			}
		})
		return r
	}
	waitLog := func(r *replica, what string, timeout time.Duration) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true,
			func(context.Context) (bool, error) { return strings.Contains(r.logs.String(), what), nil })
		if err != nil {
			t.Fatalf("log never said %q within %s", what, timeout)
		}
	}

	a := start("replica-a")
	waitLog(a, "became leader", 30*time.Second)
	b := start("replica-b")

	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "slow"},
		"spec":     map[string]any{"replicaCount": int64(1), "port": int64(80)},
	}}
	if _, err := crs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crs.Delete(context.Background(), "slow", metav1.DeleteOptions{}) })
	waitLog(a, "running up", 30*time.Second)
	// The up has created the Deployment and waits for the API server's answer.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return proxy.Held() > 0, nil
	}); err != nil {
		t.Fatal("the leader's up never created the Deployment")
	}
	if strings.Contains(b.logs.String(), "became leader") {
		t.Fatal("two leaders at once")
	}
	// A cancel would still end this up cleanly (the provider gives up its request): stop the
	// process that runs it (SIGSTOP), as a hung one would be, so that only the fence's kill can
	// end it, and it leaves its lock.
	stopped := stopPulumi(t, a.cmd.Process.Pid)
	t.Logf("stopped the leader's pulumi processes %v", stopped)

	// Take the Lease away from the leader.
	leases := c.Kube.CoordinationV1().Leases(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, leaseID, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		intruder := "intruder"
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime = &intruder, &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("take the Lease: %v", err)
	}
	taken := time.Now()

	// The old leader fences itself and exits (ErrLeadershipLost) before the follower leads.
	var aExit time.Duration
	select {
	case err := <-a.exited:
		aExit = time.Since(taken)
		if err == nil || !strings.Contains(a.logs.String(), watcher.ErrLeadershipLost.Error()) {
			t.Errorf("old leader exited with %v, want a non-zero exit saying %q", err, watcher.ErrLeadershipLost)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the old leader still runs 40 s after losing its Lease")
	}
	if strings.Contains(b.logs.String(), "became leader") {
		t.Fatalf("the follower led before the old leader had stopped (%s after the Lease was taken)", aExit.Round(100*time.Millisecond))
	}
	if !strings.Contains(a.logs.String(), "killed the pulumi processes still running") {
		t.Error("the old leader did not say it killed its pulumi processes (its up could not be cancelled)")
	}
	for _, pid := range stopped {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("pulumi process %d of the old leader still runs after its exit", pid)
		}
	}
	proxy.Release() // nothing of the old leader waits for it any more
	waitLog(b, "became leader", 40*time.Second)
	bLeads := time.Since(taken)
	t.Logf("Lease taken; old leader fenced and gone after %s, follower led after %s", aExit.Round(100*time.Millisecond), bLeads.Round(100*time.Millisecond))

	// The new leader removes the killed up's lock at once, adopts the Deployment it created
	// and brings the object to Ready.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := crs.Get(ctx, "slow", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		o, err := api.FromUnstructured(u)
		if err != nil {
			return false, err
		}
		for _, cd := range o.Status.Conditions {
			if cd.Type == api.ConditionReady && cd.Status == metav1.ConditionTrue && cd.ObservedGeneration == o.Generation {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("the new leader never brought the object to Ready")
	}
	readyAfter := time.Since(taken) - bLeads
	// The old leader's lock goes by one of two rules, whichever the new leader meets first: the
	// holder record of its killed pulumi process is no longer locked (the state directory is
	// shared, as a file backend on a shared volume is), or, with a host name of its own, the
	// Lease rule (an earlier operator pod of this installation, fenced by now).
	whys := []string{"its holder record is no longer locked"}
	if ownHosts {
		whys = append(whys, "earlier operator pod of this installation")
	}
	why := ""
	log := b.logs.String()
	for _, w := range whys {
		if strings.Contains(log, "cancelled stale lock") && strings.Contains(log, w) {
			why = w
		}
	}
	if why == "" {
		t.Errorf("the new leader's log does not say it removed the old leader's lock for one of %q", whys)
	}
	deps, err := c.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 {
		t.Errorf("Deployments after the takeover: %v (%v), want exactly one", deps, err)
	}
	t.Logf("Ready %s after the new leader led (lock removed because %s)", readyAfter.Round(100*time.Millisecond), why)

	if err := crs.Delete(ctx, "slow", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := crs.Get(ctx, "slow", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the object was never deleted (destroy, then finalizer removal)")
	}
}

// stopPulumi sends SIGSTOP to the pulumi CLI and engine host processes below pid (procfs' parent
// links, named by their command line) and returns their pids; it fails the test when there is
// none.
func stopPulumi(t *testing.T, pid int) []int {
	t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	parent, name := map[int]int{}, map[int]string{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			parent[p.PID] = st.PPID
		}
		if argv, err := p.CmdLine(); err == nil && len(argv) > 0 {
			name[p.PID] = filepath.Base(argv[0])
		}
	}
	below := func(p int) bool {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				return true
			}
		}
		return false
	}
	var out []int
	for p, n := range name {
		if below(p) && (n == "pulumi" || n == stack.EngineHost) && syscall.Kill(p, syscall.SIGSTOP) == nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no pulumi process below %d to stop", pid)
	}
	return out
}

// zombie reports whether pid has exited and waits to be reaped (or is gone).
func zombie(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return true
	}
	st, err := p.Stat()
	return err != nil || st.State == "Z"
}

// leaseID is the watch command's default --leader-election-id.
const leaseID = "pulumi-operator.groupsp.measutosh.dev"

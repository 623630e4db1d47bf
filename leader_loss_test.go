package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestLeaderLossCancelsOperations: a leader that loses its Lease in the middle of a slow up
// must cancel that up and stop before another replica can take the Lease over, so that two
// replicas never run Pulumi on one stack and the new leader never finds the stack locked.
//
// Two operator processes with the default lease timings (15 s lease, 10 s renew deadline, 2 s
// retry) and a 25 s shutdown grace (the default, longer than the lease: a grace on loss would
// let the old leader run on for 25 s). The up is held open by a zero-pods ResourceQuota (the
// provider waits for available replicas). The Lease is then taken by an identity that never
// renews it, as a replica cut off from the leader would: the leader must notice within its
// renew deadline and exit, cancelled up and all, before the follower leads.
//
// Run twice: with every up a pulumi CLI process ("cli", --engine-host none), and with the ups in
// the engine host ("engine-host", the default of a binary that has one beside it), whose run is
// cancelled through its request, not a signal.
func TestLeaderLossCancelsOperations(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	t.Run("cli", func(t *testing.T) { leaderLoss(t, stack.NoEngineHost) })
	t.Run("engine-host", func(t *testing.T) { leaderLoss(t, testenv.EngineHost(t)) })
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

	quotas := c.Kube.CoreV1().ResourceQuotas(ns)
	if _, err := quotas.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	type replica struct {
		cmd    *exec.Cmd
		logs   *testenv.SyncBuffer
		exited chan error
	}
	start := func(name string) *replica {
		r := &replica{logs: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
		r.cmd = exec.Command(bin, "--kubeconfig", c.Kubeconfig, "--state-dir", state, "--cluster-name", "loss",
			"--pulumi", cli, "--engine-host", engineHost, "watch", "--namespace", ns, "--leader-elect", "--leader-election-namespace", ns,
			"--health-addr", "", "--metrics-addr", "", "--workers", "1")
		r.cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=loss")
		r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { r.exited <- r.cmd.Wait() }()
		t.Cleanup(func() {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.exited:
			case <-time.After(40 * time.Second):
				_ = r.cmd.Process.Kill()
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
	// The up is past its program and waits for the Deployment, which can have no pods.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "slow", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("the leader's up never created the Deployment")
	}
	if strings.Contains(b.logs.String(), "became leader") {
		t.Fatal("two leaders at once")
	}

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

	// The old leader exits (ErrLeadershipLost) before the follower leads.
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
	if !strings.Contains(a.logs.String(), "lost leadership: no new work, cancelling running operations now") {
		t.Error("the old leader did not say it cancelled its running operations")
	}
	waitLog(b, "became leader", 40*time.Second)
	bLeads := time.Since(taken)
	t.Logf("Lease taken; old leader gone after %s, follower led after %s", aExit.Round(100*time.Millisecond), bLeads.Round(100*time.Millisecond))

	// The new leader picks the object up and finds the stack unlocked: the cancelled up
	// released its lock.
	waitLog(b, "running up", 30*time.Second)
	if err := quotas.Delete(ctx, "no-pods", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
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
			if cd.Type == watcher.ConditionReady && cd.Status == metav1.ConditionTrue && cd.ObservedGeneration == o.Generation {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("the new leader never brought the object to Ready")
	}
	for _, bad := range []string{"stack locked by another update", "cancelled stale lock"} {
		if strings.Contains(b.logs.String(), bad) {
			t.Errorf("the new leader's log says %q: the old leader's up still held the stack", bad)
		}
	}

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

// leaseID is the watch command's default --leader-election-id.
const leaseID = "pulumi-operator.groupsp.measutosh.dev"

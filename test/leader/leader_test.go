// Package leader tests leader election with processes of the built binary (`pulumi-operator
// watch`, two at a time against one local cluster): a killed leader is replaced, and a leader
// that loses its Lease during a slow up cancels it and exits before the other one leads.
package leader

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// buildOperator builds this package's binary into a temporary directory.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pulumi-operator")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestLeaderElection runs two operator processes with --leader-elect: only the leader
// reconciles; when it is killed (SIGKILL, no lease release) the other takes over within the
// lease duration (15 s) plus a retry period.
func TestLeaderElection(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	cli := testenv.PulumiCLI(t)
	bin := buildOperator(t)
	state := t.TempDir()
	start := func(name string) (*exec.Cmd, *testenv.SyncBuffer) {
		logs := &testenv.SyncBuffer{}
		cmd := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "--state-dir", state, "--cluster-name", "le",
			"--pulumi", cli, "watch", "--namespace", ns, "--leader-elect", "--leader-election-namespace", ns,
			"--health-addr", "", "--metrics-addr", "")
		cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=le", "HOSTNAME="+name)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_, _ = cmd.Process.Wait()
			if t.Failed() {
				t.Logf("%s log:\n%s", name, logs.String())
			}
		})
		return cmd, logs
	}
	waitLog := func(logs *testenv.SyncBuffer, what string, timeout time.Duration) time.Duration {
		t.Helper()
		begin := time.Now()
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true,
			func(context.Context) (bool, error) { return strings.Contains(logs.String(), what), nil })
		if err != nil {
			t.Fatalf("log never said %q", what)
		}
		return time.Since(begin)
	}

	a, aLogs := start("replica-a")
	waitLog(aLogs, "became leader", 30*time.Second)
	_, bLogs := start("replica-b")
	time.Sleep(3 * time.Second)
	if strings.Contains(bLogs.String(), "became leader") {
		t.Fatal("two leaders at once")
	}

	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "led"},
		"spec":     map[string]any{"replicaCount": int64(1), "port": int64(80)},
	}}
	if _, err := cr.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(aLogs, "running up", 30*time.Second)
	if strings.Contains(bLogs.String(), "running up") {
		t.Fatal("the follower reconciled")
	}

	// Kill the leader without letting it release the Lease.
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took := waitLog(bLogs, "became leader", 40*time.Second)
	if took > 15*time.Second+2*time.Second+5*time.Second {
		t.Errorf("takeover took %s, want within the 15 s lease plus a retry", took)
	}
	t.Logf("the follower took over %s after the leader was killed", took.Round(100*time.Millisecond))
	if _, err := cr.Patch(context.Background(), "led", types.MergePatchType, []byte(`{"spec":{"replicaCount":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog(bLogs, "running up", 60*time.Second)

	// Delete while the new leader runs, so the finalizer is handled.
	if err := cr.Delete(context.Background(), "led", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Gone means NotFound: any other error (a timeout under load) says nothing, poll on.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cr.Get(ctx, "led", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		obj, gerr := cr.Get(context.Background(), "led", metav1.GetOptions{})
		switch {
		case gerr == nil:
			t.Fatalf("KindCustomHttp %s/led still exists 60 s after its delete (finalizers %v): the new leader did not destroy its stack and remove the finalizer",
				ns, obj.GetFinalizers())
		case !apierrors.IsNotFound(gerr):
			t.Fatalf("KindCustomHttp %s/led: not seen deleted within 60 s; get: %v", ns, gerr)
		}
	}
}

package crash

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestDriftNotRepaired: a drift that the repair's up cannot undo is reported, not hidden behind
// Ready. A ConfigMap key applied (server-side apply) by another pulumi-kubernetes field manager,
// as a stack whose adopted object lost its manager leaves it, stays whatever the stack's
// manager applies; after the repair the operator looks again and the Warning Event
// DriftNotRepaired names the key. (A key added by a plain update, kubectl edit's kind, is
// repaired: pulumi-kubernetes takes over such fields; watcher/TestDriftRepair.)
func TestDriftNotRepaired(t *testing.T) {
	requirePlugin(t)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase, cluster, name = "drift-passphrase", "drift", "d"
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: c.Kubeconfig, backendURL: "file://" + filepath.Join(t.TempDir(), "backend"),
		stateDir: t.TempDir(), cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
	t.Cleanup(func() { deleteAllAndWait(t, c, ns, 3*time.Minute) })
	s := spec{replicas: 1, data: map[string]string{"hostports": "a,8080\n"}}
	if err := createCR(ctx, c, ns, name, s, nil); err != nil {
		t.Fatal(err)
	}
	op.start()
	waitConverged(t, c, ns, map[string]spec{name: s}, nil, 3*time.Minute)
	apply := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `-configmap"},"data":{"extra.txt":"x"}}`)
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, name+"-configmap", types.ApplyPatchType, apply,
		metav1.PatchOptions{FieldManager: "pulumi-kubernetes-deadbeef"}); err != nil {
		t.Fatal(err)
	}
	var ev *corev1.Event
	deadline := time.Now().Add(2 * time.Minute)
	for ev == nil && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		l, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + watcher.ReasonDriftNotRepaired})
		if err == nil && len(l.Items) > 0 {
			ev = &l.Items[0]
		}
	}
	if ev == nil {
		t.Fatalf("no %s Event within 2m; Events:\n%s\noperator log:\n%s", watcher.ReasonDriftNotRepaired, eventTexts(t, c, ns), op.logs.String())
	}
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "data[extra.txt] is not declared") {
		t.Errorf("Event %s %q: want a Warning naming data[extra.txt]", ev.Type, ev.Message)
	}
	if n := eventCounts(t, c, ns)[watcher.ReasonRepaired]; n == 0 {
		t.Errorf("no %s Event: the repair's up did not run before the report", watcher.ReasonRepaired)
	}
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-configmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["extra.txt"] != "x" {
		t.Errorf("the key another field manager applied is gone (%v): this test no longer makes a drift that no up repairs", cm.Data)
	}
	if !strings.Contains(op.logs.String(), "drift left after the repair") {
		t.Errorf("the operator's log does not say the drift was left")
	}
	t.Logf("%s %s: %s", ev.Type, ev.Reason, ev.Message)
}

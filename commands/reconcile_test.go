package commands

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	sigyaml "sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// twoContexts writes a copy of the cluster's kubeconfig whose current context points at a
// closed port and whose context "live" is the cluster, with namespace ns: only --context
// live reaches the cluster, and it names the namespace.
func twoContexts(t *testing.T, c *testenv.Cluster, ns string) string {
	t.Helper()
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := raw.Contexts[raw.CurrentContext]
	raw.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	raw.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: cur.AuthInfo}
	raw.Contexts["live"] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: cur.AuthInfo, Namespace: ns}
	raw.CurrentContext = "dead"
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*raw, kc); err != nil {
		t.Fatal(err)
	}
	return kc
}

// reconcile asks the watcher for a reconcile as `flux reconcile` does: bad names and
// suspended objects are errors; --context picks the kubeconfig context, whose namespace is
// the default; --wait exits 0 once the watcher has handled the request and the object is
// Ready, ExitFailed when the up after the request failed, ExitTimeout when nobody handled it.
func TestReconcileCommand(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	l := newRunner(t)
	objs := createCR(t, c, ns, "web")
	annotation := func() string {
		u, err := objs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetAnnotations()[api.ReconcileRequestAnnotation]
	}

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no name":   {[]string{"reconcile", "-n", ns}, "one argument"},
		"not found": {[]string{"reconcile", "nope", "-n", ns}, "KindCustomHttp " + ns + "/nope not found"},
		"two names": {[]string{"reconcile", "web", "-n", ns, "other"}, `unexpected "other"`},
		"bad flag":  {[]string{"reconcile", "web", "--timeout", "soon"}, "reconcile NAME: invalid value"},
	} {
		if _, stderr, code := l.run(tc.args...); code != ExitInvalidInput || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", name, code, stderr, ExitInvalidInput, tc.want)
		}
	}

	// --context: the current context is dead; "live" reaches the cluster and names ns.
	kc := twoContexts(t, c, ns)
	if _, stderr, code := l.run("--kubeconfig", kc, "reconcile", "web"); code == 0 {
		t.Fatalf("reconcile through the dead current context succeeded: %s", stderr)
	}
	stdout, stderr, code := l.run("--kubeconfig", kc, "--context", "live", "reconcile", "web")
	if code != 0 || annotation() == "" || !strings.Contains(stdout, "requested a reconcile of "+ns+"/web") {
		t.Fatalf("reconcile --context live (namespace from the context): exit %d, annotation %q\n%s\n%s", code, annotation(), stdout, stderr)
	}

	// Nobody watches yet: --wait runs out.
	_, stderr, code = l.run("reconcile", "web", "-n", ns, "--wait", "--timeout", "2s")
	if code != ExitTimeout || !strings.Contains(stderr, "no result within --timeout 2s") {
		t.Fatalf("reconcile --wait without a watcher: exit %d (want %d): %s", code, ExitTimeout, stderr)
	}

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchOut, watchDone := l.startContext(wctx, "watch", "--namespace", ns, "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	defer func() {
		stopWatch()
		<-watchDone
	}()
	stdout, stderr, code = l.run("reconcile", "web", "-n", ns, "--wait", "--timeout", "3m")
	if code != 0 || !strings.Contains(stdout, "reconciled: Ready") {
		t.Fatalf("reconcile --wait with a watcher: exit %d\n%s\n%s\nwatch:\n%s", code, stdout, stderr, watchOut.String())
	}
	u, err := objs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if handled, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt"); handled != annotation() {
		t.Fatalf("status.lastHandledReconcileAt %q, want the request %q", handled, annotation())
	}

	// The up after the request fails: the Deployment is gone and a quota forbids a new one.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-deployments"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/deployments.apps": resource.MustParse("0")}}}
	if _, err := c.Kube.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := c.Kube.CoreV1().ResourceQuotas(ns).Get(ctx, "no-deployments", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	}); err != nil {
		t.Fatalf("the quota controller never filled in the quota's status: %v", err)
	}
	if err := c.Kube.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = l.run("reconcile", "web", "-n", ns, "--wait", "--timeout", "3m")
	if code != ExitFailed || !strings.Contains(stderr, "up failed") {
		t.Fatalf("reconcile --wait of an up that fails: exit %d (want %d)\n%s\n%s", code, ExitFailed, stdout, stderr)
	}
	t.Logf("failed reconcile: %s", strings.TrimSpace(stderr))

	// A suspended object: the watcher would not act on the request.
	if _, err := objs.Patch(ctx, "web", "application/merge-patch+json", []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := l.run("reconcile", "web", "-n", ns); code != ExitInvalidInput || !strings.Contains(stderr, "suspended") {
		t.Fatalf("reconcile of a suspended object: exit %d, %s", code, stderr)
	}
}

// reconcile --wait learns the outcome of a request whose reconcile fails before any up, which
// the watcher echoes in status.lastHandledReconcileAt as it does an up's: an invalid spec, a
// missing envFrom source, an object of the same name the operator did not make. Each exits
// ExitFailed with the watcher's reason, well within --timeout. An object suspended after the
// request (the command refuses one suspended before) exits ExitInvalidInput, saying so.
func TestReconcileWaitFailuresBeforeTheUp(t *testing.T) {
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	c.InstallCRD(t)
	ctx := context.Background()
	l := newRunner(t)
	objs := c.Client.Resource(kindCustomHttps).Namespace(ns)
	create := func(name, spec string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		doc := "apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec: " + spec + "\n"
		if err := sigyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := objs.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "taken"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create("badkey", `{replicaCount: 1, port: 80, configMapData: {"a/b": x}}`)
	create("noenv", `{replicaCount: 1, port: 80, envFrom: [{configMapRef: {name: absent}}]}`)
	create("taken", `{replicaCount: 1, port: 80}`)
	create("paused", `{replicaCount: 1, port: 80}`)
	t.Cleanup(func() {
		// Nothing was created for them: let them go without the watcher's destroy.
		for _, name := range []string{"badkey", "noenv", "taken", "paused"} {
			_, _ = objs.Patch(ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		}
	})

	wctx, stopWatch := context.WithCancel(ctx)
	watchOut, watchDone := l.startContext(wctx, "watch", "--namespace", ns, "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	defer func() {
		stopWatch()
		<-watchDone
	}()
	for name, reason := range map[string]string{"badkey": api.ReasonInvalidSpec, "noenv": api.ReasonEnvSourceMissing, "taken": api.ReasonObjectConflict} {
		start := time.Now()
		stdout, stderr, code := l.run("reconcile", name, "-n", ns, "--wait", "--timeout", "30s")
		if code != ExitFailed || !strings.Contains(stderr, reason) {
			t.Errorf("reconcile --wait of %s: exit %d after %s (want %d naming %s)\n%s\n%s\nwatch:\n%s", name, code,
				time.Since(start).Round(time.Second), ExitFailed, reason, stdout, stderr, watchOut.String())
		}
	}

	// The request and spec.suspend in one write: the watcher handles the request suspended.
	const token = "2026-05-06T07:08:09Z"
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"suspend":true}}`, api.ReconcileRequestAnnotation, token)
	if _, err := objs.Patch(ctx, "paused", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := waitHandled(wctx2, objs, "paused", token)
	if code := ExitCode(err); code != ExitInvalidInput || !strings.Contains(fmt.Sprint(err), "suspended") {
		t.Errorf("waitHandled of a request on an object suspended with it: exit %d, %v; want %d saying suspended", code, err, ExitInvalidInput)
	}
}

// handledOutcome reads a handled request's result from the conditions alone: Ready at the
// current generation is success, Stalled or a retried failure is a failure, Suspended at the
// current generation is its own outcome (nothing ran), anything else (replicas rolling out,
// Ready at an older generation) is still on its way.
func TestHandledOutcome(t *testing.T) {
	cond := func(typ string, st metav1.ConditionStatus, reason string, gen int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: reason + " message", ObservedGeneration: gen}
	}
	for name, tc := range map[string]struct {
		conds                 []metav1.Condition
		ok, failed, suspended bool
	}{
		"ready":            {conds: []metav1.Condition{cond("Ready", "True", "Succeeded", 2)}, ok: true},
		"ready, older gen": {conds: []metav1.Condition{cond("Ready", "True", "Succeeded", 1)}},
		"no conditions":    {},
		"replicas rolling": {conds: []metav1.Condition{cond("Ready", "False", "ReplicasUnavailable", 2), cond("Reconciling", "True", "ReplicasUnavailable", 2)}},
		"failed, retrying": {conds: []metav1.Condition{cond("Ready", "False", "UpdateFailed", 2), cond("Reconciling", "True", "Retrying", 2)}, failed: true},
		"stalled":          {conds: []metav1.Condition{cond("Ready", "False", "InvalidSpec", 2), cond("Stalled", "True", "InvalidSpec", 2)}, failed: true},
		"stalled is false": {conds: []metav1.Condition{cond("Ready", "False", "Progressing", 2), cond("Stalled", "False", "Progressing", 2)}},
		"suspended, Ready at the generation before": {conds: []metav1.Condition{cond("Ready", "True", "Succeeded", 1), cond("Reconciling", "False", "Suspended", 2)},
			failed: true, suspended: true},
		"suspended before, resumed since": {conds: []metav1.Condition{cond("Ready", "True", "Succeeded", 1), cond("Reconciling", "False", "Suspended", 1)}},
	} {
		t.Run(name, func(t *testing.T) {
			cr := &api.KindCustomHttp{}
			cr.Generation = 2
			cr.Status.Conditions = tc.conds
			msg, err := handledOutcome(cr)
			if (msg != "") != tc.ok || (err != nil) != tc.failed {
				t.Fatalf("handledOutcome = %q, %v; want success %v, failure %v", msg, err, tc.ok, tc.failed)
			}
			if errors.Is(err, errSuspended) != tc.suspended {
				t.Errorf("handledOutcome = %v; want suspended %v", err, tc.suspended)
			}
			if err != nil && !tc.suspended && !strings.Contains(err.Error(), "message") {
				t.Errorf("failure %q does not carry the condition's message", err)
			}
		})
	}
}

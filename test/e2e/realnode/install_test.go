package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// Generous bounds: a first up on the node pulls nothing but starts the provider plugin and
// waits for real pods.
const (
	operatorStart = 3 * time.Minute
	reconcile     = 4 * time.Minute
)

// installChart installs the chart (release "e2e") with the built image into namespace
// pulumi-operator-e2e, enforcing Pod Security restricted, with its state on a volume of the
// node, and more helm flags set (--set name=value), and waits for the operator pod to be
// Ready; the release is uninstalled when the test ends. It returns the namespace, the operator
// pods' label selector, the state volume's directory on the host and the pod's name.
func installChart(t testing.TB, n *node, set ...string) (opNS, sel, stateDir, pod string) {
	t.Helper()
	const release = "e2e"
	opNS = "pulumi-operator-e2e"
	sel = "app.kubernetes.io/instance=" + release
	n.restrictedNamespace(t, opNS)
	stateDir = n.stateVolume(t, opNS, "e2e-state", true)
	helm := filepath.Join(testenv.RepoRoot(), "bin", "helm")
	args := append([]string{"install", release, "charts/pulumi-operator", "--kubeconfig", n.kubeconfig,
		"--namespace", opNS, "--set", "passphrase=e2e-real", "--set", "persistence.existingClaim=e2e-state",
		"--set", "clusterName=realnode", "--set", "logFormat=text"}, set...)
	t.Logf("helm install:\n%s", run(t, nil, helm, args...))
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpOperator(t, opNS, sel)
		}
		// The CRD stays (crds/), as with any chart; the namespaces of the test go.
		if out, err := execOut(helm, "uninstall", release, "--kubeconfig", n.kubeconfig, "--namespace", opNS, "--wait"); err != nil {
			t.Logf("helm uninstall: %v\n%s", err, out)
		}
	})
	pod = n.operatorPod(t, opNS, sel, "", operatorStart)
	n.checkRestricted(t, opNS, pod)
	t.Logf("operator pod %s Ready (its /readyz through the kubelet's probe), non-root 65532, read-only root file system", pod)
	return opNS, sel, stateDir, pod
}

// TestHelmInstall installs the chart with the built image, then walks the sample's life:
// created (pods Ready through their probes, the ConfigMap's content served through the
// Service, /ping between two KindCustomHttps by Service name), changed (a rollout with no
// failed request), an up interrupted by deleting the operator pod (finished by the next
// pod, no lock, no duplicate), deleted (objects and stack gone).
func TestHelmInstall(t *testing.T) {
	n := connect(t)
	ctx := context.Background()
	opNS, sel, stateDir, pod := installChart(t, n)
	ns := "peerns-e2e"
	n.restrictedNamespace(t, ns)

	// Created: the original sample, unchanged but for its namespace.
	smp := sample(t, ns, "kindcustomhttp-sample", "localhost,8080\n")
	if _, err := n.dyn.Resource(crs).Namespace(ns).Create(ctx, smp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the sample: %v", err)
	}
	n.waitReady(t, ns, "kindcustomhttp-sample", reconcile)
	pods := n.available(t, ns, "kindcustomhttp-sample", 2, time.Minute)
	url := n.serviceURL(t, ns, "kindcustomhttp-sample")
	expectBody(t, url+"/config/hostports", "localhost,8080\n")
	code, body, err := get(url + "/ping")
	if err != nil || code != 200 || !strings.HasPrefix(body, "pong from kindcustomhttp-sample-") {
		t.Fatalf("GET %s/ping = %d %q %v, want pong from one of %v", url, code, body, err, pods)
	}
	t.Logf("sample: pods %v Ready; GET %s/config/hostports served the ConfigMap; /ping: %s", pods, url, body)

	// A peer that pings the sample by its Service name (cluster DNS, search path).
	peer := sample(t, ns, "peer", "kindcustomhttp-sample,80\n")
	if _, err := n.dyn.Resource(crs).Namespace(ns).Create(ctx, peer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the peer: %v", err)
	}
	n.waitReady(t, ns, "peer", reconcile)
	n.available(t, ns, "peer", 2, time.Minute)
	peerURL := n.serviceURL(t, ns, "peer")
	var pings int
	for i := 0; i < 90 && pings == 0; i++ { // the first round runs 1 s after start, then every 30 s
		pings, err = pingSuccesses(peerURL, "kindcustomhttp-sample:80")
		if pings == 0 {
			time.Sleep(time.Second)
		}
	}
	if pings == 0 {
		t.Fatalf("the peer's pods never pinged kindcustomhttp-sample:80 successfully (last error %v)", err)
	}
	t.Logf("peer: /ping of kindcustomhttp-sample:80 by Service name answered (%d successes on one pod)", pings)

	// Changed: the sample now pings the peer; its pods roll while requests keep coming.
	loop := startLoop(url)
	patchData(t, n, ns, "kindcustomhttp-sample", "peer,80\n")
	n.waitReady(t, ns, "kindcustomhttp-sample", reconcile)
	newPods := n.available(t, ns, "kindcustomhttp-sample", 2, 2*time.Minute)
	expectBody(t, url+"/config/hostports", "peer,80\n")
	time.Sleep(2 * time.Second) // requests after the rollout, too
	sent, failed, errs := loop.stop()
	if slices.ContainsFunc(newPods, func(p string) bool { return slices.Contains(pods, p) }) {
		t.Errorf("pods after the change %v include pods from before %v: no rollout", newPods, pods)
	}
	if sent < 20 || failed != 0 {
		t.Fatalf("requests through the Service during the rollout: %d sent, %d failed (first: %v); want many, 0 failed", sent, failed, errs)
	}
	t.Logf("change: pods %v -> %v, new content served; %d requests during the rollout, 0 failed", pods, newPods, sent)

	// An up interrupted: the operator pod is deleted while the peer's up runs.
	peerData := ""
	caught := n.catchUp(t, stateDir, func(attempt int) {
		peerData = fmt.Sprintf("kindcustomhttp-sample,80\nlocalhost,%d\n", 8079+attempt)
		patchData(t, n, ns, "peer", peerData)
	}, func() bool { return true })
	if !caught {
		t.Fatal("never caught the peer's up holding its stack's lock")
	}
	if err := n.kube.CoreV1().Pods(opNS).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete operator pod %s: %v", pod, err)
	}
	next := n.operatorPod(t, opNS, sel, pod, operatorStart)
	n.waitReady(t, ns, "peer", reconcile)
	n.available(t, ns, "peer", 2, 2*time.Minute)
	expectBody(t, peerURL+"/config/hostports", peerData)
	stacks, locks := stackFiles(t, stateDir)
	if len(locks) != 0 {
		t.Errorf("locks left after the interrupted up: %v", locks)
	}
	if len(stacks) != 2 {
		t.Errorf("stacks after the interrupted up: %v, want the sample's and the peer's", stacks)
	}
	objs := n.objectsOf(t, ns)
	want := []string{"configmap/kindcustomhttp-sample-configmap", "configmap/peer-configmap",
		"deployment/kindcustomhttp-sample", "deployment/peer", "service/kindcustomhttp-sample", "service/peer"}
	slices.Sort(objs)
	if !slices.Equal(objs, want) {
		t.Errorf("objects after the interrupted up: %v, want %v (no duplicates)", objs, want)
	}
	t.Logf("interrupted up: pod %s deleted mid-up, pod %s finished it; stacks %v, no lock", pod, next, stacks)

	// Deleted: objects and stacks go.
	for _, name := range []string{"kindcustomhttp-sample", "peer"} {
		if err := n.dyn.Resource(crs).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
	}
	within(t, reconcile, "both KindCustomHttps gone", func(ctx context.Context) (bool, error) {
		l, err := n.dyn.Resource(crs).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, err
	})
	if objs := n.objectsOf(t, ns); len(objs) != 0 {
		t.Errorf("objects left after the delete: %v", objs)
	}
	if stacks, locks := stackFiles(t, stateDir); len(stacks) != 0 || len(locks) != 0 {
		t.Errorf("backend after the delete: stacks %v, locks %v; want none", stacks, locks)
	}
}

// TestKustomizeInstall installs with `make deploy` (config/default: the CRD, RBAC, namespace
// pulumi-operator-system enforcing restricted, the operator with the built image), runs the
// sample to Ready and its content through the Service, deletes it, and `make undeploy`s.
func TestKustomizeInstall(t *testing.T) {
	n := connect(t)
	ctx := context.Background()
	const opNS = "pulumi-operator-system"
	sel := "app.kubernetes.io/name=pulumi-operator,app.kubernetes.io/component=manager"
	env := []string{"KUBECONFIG=" + n.kubeconfig}
	if _, err := n.kube.CoreV1().Namespaces().Get(ctx, opNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		n.restrictedNamespace(t, opNS) // make deploy creates it too; here first, for the Secret and the volume
	} else {
		t.Cleanup(func() { n.deleteNamespace(t, opNS) })
	}
	stateDir := n.stateVolume(t, opNS, "pulumi-operator-state", false)
	secret := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"pulumi-operator-secrets","namespace":%q},"stringData":{"passphrase":"e2e-real"}}`, opNS)
	f := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(f, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(testenv.RepoRoot(), "bin", "kubectl")
	run(t, env, kubectl, "apply", "-f", f)
	t.Logf("make deploy:\n%s", run(t, env, "make", "--no-print-directory", "deploy"))
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpOperator(t, opNS, sel)
		}
		if out, err := execOutEnv(env, "make", "--no-print-directory", "undeploy"); err != nil {
			t.Logf("make undeploy: %v\n%s", err, out)
		}
	})
	pod := n.operatorPod(t, opNS, sel, "", operatorStart)
	n.checkRestricted(t, opNS, pod)
	t.Logf("operator pod %s Ready, non-root 65532, read-only root file system", pod)

	ns := "kustomize-e2e"
	n.restrictedNamespace(t, ns)
	smp := sample(t, ns, "kindcustomhttp-sample", "localhost,8080\n")
	if _, err := n.dyn.Resource(crs).Namespace(ns).Create(ctx, smp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the sample: %v", err)
	}
	n.waitReady(t, ns, "kindcustomhttp-sample", reconcile)
	n.available(t, ns, "kindcustomhttp-sample", 2, time.Minute)
	expectBody(t, n.serviceURL(t, ns, "kindcustomhttp-sample")+"/config/hostports", "localhost,8080\n")
	if err := n.dyn.Resource(crs).Namespace(ns).Delete(ctx, "kindcustomhttp-sample", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, reconcile, "the sample gone", func(ctx context.Context) (bool, error) {
		_, err := n.dyn.Resource(crs).Namespace(ns).Get(ctx, "kindcustomhttp-sample", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if objs := n.objectsOf(t, ns); len(objs) != 0 {
		t.Errorf("objects left after the delete: %v", objs)
	}
	if stacks, locks := stackFiles(t, stateDir); len(stacks) != 0 || len(locks) != 0 {
		t.Errorf("backend after the delete: stacks %v, locks %v; want none", stacks, locks)
	}
}

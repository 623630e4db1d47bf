// Package e2e runs the whole loop with the real binary: `pulumi-operator watch` against the
// local cluster, the real pulumi CLI, the real Kubernetes provider plugin and a file backend.
// It needs the plugin, which no reachable registry serves; without it every test says SKIP.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

var (
	deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	services    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	configmaps  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// startOperator builds and runs `pulumi-operator watch` on namespace ns with a fresh state
// directory, stopping it (SIGTERM) when the test ends.
func startOperator(t *testing.T, c *testenv.Cluster, ns string) (stateDir string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "pulumi-operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	stateDir = filepath.Join(dir, "state")
	cmd := exec.Command(bin, "--kubeconfig", c.Kubeconfig, "--state-dir", stateDir, "--cluster-name", "e2e",
		"--pulumi", testenv.PulumiCLI(t), "--project-file", filepath.Join(testenv.RepoRoot(), "Pulumi.yaml"),
		// The namespace's Secrets are granted (the admin kubeconfig may read them anyway), so
		// that rotating one rolls the pods.
		"watch", "--namespace", ns, "--secret-namespaces", ns, "--workers", "2")
	cmd.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=e2e")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("operator did not stop within 30 s of SIGINT")
		}
		if t.Failed() {
			t.Logf("operator log:\n%s", logs.String())
		}
	})
	return stateDir
}

func TestSampleEndToEnd(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	// The namespace enforces Pod Security "restricted": the program's pods must pass it.
	restricted := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`)
	if _, err := c.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, restricted, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	stateDir := startOperator(t, c, ns)
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)

	// The original operator's sample, unchanged but for the namespace.
	u, _ := testenv.Sample(t, ns)
	name := u.GetName()
	if _, err := cr.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, name, 1)
	checkObjects(t, c, ns, name, 2, 80, "localhost,8080\n")

	// Change replicaCount, port and configMapData at once.
	patch := []byte(`{"spec":{"replicaCount":3,"port":8081,"configMapData":{"hostports":"peer-a,8080\npeer-b,8080\n"}}}`)
	if _, err := cr.Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, name, 2)
	checkObjects(t, c, ns, name, 3, 8081, "peer-a,8080\npeer-b,8080\n")
	// The configMapData change rolled the pods: a new pod template (new config digest), so a
	// second ReplicaSet.
	dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := api.Desired{ConfigMapData: map[string]string{"hostports": "peer-a,8080\npeer-b,8080\n"}}.ConfigDigest()
	if got := dep.Spec.Template.Annotations[infra.ConfigDigestAnnotation]; got != want {
		t.Errorf("pod template config digest = %q, want %q", got, want)
	}
	rs, err := c.Kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
	if err != nil || len(rs.Items) < 2 {
		t.Errorf("ReplicaSets after a config change = %d (%v), want a rollout (2)", len(rs.Items), err)
	}

	// envFrom: a Secret's keys reach the container by reference; rotating it rolls the pods.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"PASSWORD": "one"}}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cr.Patch(ctx, name, "application/merge-patch+json", []byte(`{"spec":{"envFrom":[{"secretRef":{"name":"creds"}}]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, name, 3)
	digest := func() string {
		d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Spec.Template.Spec.Containers[0].EnvFrom) != 1 || d.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name != "creds" {
			t.Fatalf("envFrom = %+v", d.Spec.Template.Spec.Containers[0].EnvFrom)
		}
		return d.Spec.Template.Annotations[infra.EnvDigestAnnotation]
	}
	before := digest()
	sec, _ = c.Kube.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
	sec.Data["PASSWORD"] = []byte("two")
	if _, err := c.Kube.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return digest() != before, nil
	})
	if err != nil || before == "" {
		t.Fatalf("rotating the Secret did not roll the pods (env digest %q)", before)
	}

	// What the provider made is what the program declares (infra.Build, which drift compares
	// with): through a create, three changes and the rollouts they started (each a stream of
	// Deployment events, each event a drift check), the operator saw no drift.
	evs, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + watcher.ReasonDriftDetected})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		t.Errorf("drift found in what the provider made from the program: %s", e.Message)
	}

	// Delete: objects, stack and CR all go.
	if err := cr.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, g := range []struct {
			r    schema.GroupVersionResource
			name string
		}{{api.GroupVersionResource, name}, {deployments, name}, {services, name}, {configmaps, name + "-configmap"}} {
			if _, err := c.Client.Resource(g.r).Namespace(ns).Get(ctx, g.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("objects left after delete: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(stateDir, "backend", ".pulumi", "stacks", "*", "*.json"))
	if len(left) != 0 {
		t.Fatalf("stack state left after delete: %v", left)
	}
}

func waitReady(t *testing.T, c *testenv.Cluster, ns, name string, gen int64) {
	t.Helper()
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 180*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := c.Client.Resource(api.GroupVersionResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = u
		o, err := api.FromUnstructured(u)
		if err != nil {
			return false, err
		}
		for _, cd := range o.Status.Conditions {
			if cd.Type == "Ready" && cd.Status == metav1.ConditionTrue && o.Status.ObservedGeneration == gen {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		b, _ := yaml.Marshal(last)
		t.Fatalf("%s/%s not Ready at generation %d: %v\n%s", ns, name, gen, err, b)
	}
}

func checkObjects(t *testing.T, c *testenv.Cluster, ns, name string, replicas, port int64, hostports string) {
	t.Helper()
	ctx := context.Background()
	dep, err := c.Client.Resource(deployments).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != replicas {
		t.Errorf("deployment replicas = %d, want %d", r, replicas)
	}
	if r, _, _ := unstructured.NestedInt64(dep.Object, "status", "availableReplicas"); r != replicas {
		t.Errorf("deployment available replicas = %d, want %d", r, replicas)
	}
	if l := dep.GetLabels(); l["app.kubernetes.io/instance"] != name || l["app.kubernetes.io/managed-by"] != "pulumi-operator" {
		t.Errorf("deployment labels = %v", l)
	}
	svc, err := c.Client.Resource(services).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != fmt.Sprint(port) {
		t.Errorf("service ports = %v, want port %d", ports, port)
	}
	cm, err := c.Client.Resource(configmaps).Namespace(ns).Get(ctx, name+"-configmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "hostports"); got != hostports {
		t.Errorf("configmap hostports = %q, want %q", got, hostports)
	}
	if !strings.Contains(fmt.Sprint(svc.GetLabels()), name) {
		t.Errorf("service labels = %v", svc.GetLabels())
	}
}

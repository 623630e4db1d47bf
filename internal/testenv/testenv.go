// Package testenv gives tests the real parts they run against: the repository's pinned pulumi
// CLI, the local simulated cluster started by `make cluster`, and the Kubernetes provider
// plugin. When a part is absent a test says SKIP with the reason; under CI=true a missing CLI,
// cluster or plugin is a failure instead, because `make test` always provides them.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Missing says SKIP with what is absent, loudly; under CI=true it fails instead, because `make
// test` provides every part (the CLI, the cluster's binaries, the tools) before it runs a test.
func Missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("FAIL: %s (CI runs `make test`, which must provide it)", what)
	}
	t.Skipf("SKIP: %s", what)
}

// PulumiCLI returns the pinned pulumi CLI built by `make tools` (bin/pulumi), or
// $PULUMI_OPERATOR_PULUMI.
func PulumiCLI(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PULUMI_OPERATOR_PULUMI")
	if p == "" {
		p = filepath.Join(RepoRoot(), "bin", "pulumi")
	}
	if _, err := os.Stat(p); err != nil {
		Missing(t, "no pulumi CLI at "+p+": run `make tools`")
	}
	return p
}

// EngineHost returns the engine host built by `make build` beside the pinned CLI
// (bin/pulumi-operator-engine, stack.EngineHost).
func EngineHost(t testing.TB) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(PulumiCLI(t)), "pulumi-operator-engine")
	if _, err := os.Stat(p); err != nil {
		Missing(t, "no engine host at "+p+": run `make build`")
	}
	return p
}

// PreviousPulumiCLI returns the previous release's pulumi CLI, which is also its engine host
// under the name pulumi-operator-engine beside it: bin/pulumi-previous/pulumi, built by `make
// tools` (hack/build-pulumi-previous.sh), or $PULUMI_OPERATOR_PREVIOUS_PULUMI.
func PreviousPulumiCLI(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PULUMI_OPERATOR_PREVIOUS_PULUMI")
	if p == "" {
		p = filepath.Join(RepoRoot(), "bin", "pulumi-previous", "pulumi")
	}
	if why, err := os.ReadFile(filepath.Join(filepath.Dir(p), "MISSING")); err == nil {
		Missing(t, "no previous release's CLI and engine host: "+strings.TrimSpace(string(why)))
	}
	for _, f := range []string{p, filepath.Join(filepath.Dir(p), "pulumi-operator-engine")} {
		if _, err := os.Stat(f); err != nil {
			Missing(t, "no previous release's CLI and engine host at "+f+": run `make tools`")
		}
	}
	return p
}

// Kubeconfig returns the local cluster's kubeconfig: $PULUMI_OPERATOR_TEST_KUBECONFIG, else
// .local/cluster/kubeconfig (written by `make cluster`).
func Kubeconfig(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PULUMI_OPERATOR_TEST_KUBECONFIG")
	if p == "" {
		p = filepath.Join(RepoRoot(), ".local", "cluster", "kubeconfig")
	}
	if _, err := os.Stat(p); err != nil {
		Missing(t, "no local cluster kubeconfig at "+p+": run `make cluster`")
	}
	abs, _ := filepath.Abs(p)
	return abs
}

// RequireKubernetesPlugin returns the Kubernetes provider plugin that the pinned CLI
// (PulumiCLI) will run, as find (stack.FindKubernetesPluginFor) reports it. Where it is absent
// the test says SKIP with the reason, loudly; under CI=true it fails instead: `make test`
// installs the plugin (`make plugins`, from PULUMI_KUBERNETES_PLUGIN_FILE where there is no
// internet), so a missing plugin there means the main job went untested.
func RequireKubernetesPlugin(t testing.TB, find func(pulumiPath string) (string, error)) string {
	t.Helper()
	p, err := find(PulumiCLI(t))
	if err != nil {
		Missing(t, "needs the Kubernetes provider plugin: "+err.Error())
	}
	return p
}

// Cluster is a connection to the local cluster.
type Cluster struct {
	Kubeconfig string
	Config     *rest.Config
	Client     dynamic.Interface
	Kube       kubernetes.Interface
}

// Connect connects to the local cluster (see Kubeconfig).
func Connect(t testing.TB) *Cluster {
	t.Helper()
	kc := Kubeconfig(t)
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", kc, err)
	}
	rc.QPS, rc.Burst = 200, 400
	c, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Kubeconfig: kc, Config: rc, Client: c, Kube: k}
}

var (
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	nsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// InstallCRD creates or updates the CRD from config/crd and waits until it is Established.
func (c *Cluster) InstallCRD(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "crd", "groupsp.measutosh.dev_kindcustomhttps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cur, err := c.Client.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Client.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{})
	case err == nil:
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = c.Client.Resource(crdGVR).Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := c.Client.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(cur.Object, "status", "conditions")
		for _, x := range conds {
			m := x.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD never became Established: %v", err)
	}
}

// Namespace creates a namespace named after the test (with a unique suffix) and deletes it
// when the test ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-") + fmt.Sprintf("-%d", time.Now().UnixNano()%1_000_000)
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name}}}
	if _, err := c.Client.Resource(nsGVR).Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.Resource(nsGVR).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// Sample is the original operator's sample (config/samples/groupsp_v1_kindcustomhttp.yaml), its
// namespace set to ns, and the file's text.
func Sample(t testing.TB, ns string) (*unstructured.Unstructured, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "samples", "groupsp_v1_kindcustomhttp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	return u, b
}

// FreePort is a TCP port on 127.0.0.1 that nothing listened on a moment ago, for a server a
// test starts (another process may take it first; the test then fails, it does not hang).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is a 127.0.0.1 address no listener holds now, for a server a test starts: the kernel
// picks a free port, which is released again for the server to take.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// ComponentLog is the last max lines (each cut at 300 bytes) of the local cluster's log of component (for example
// "kube-controller-manager"; hack/cluster-up.sh writes them to logs/<component>.log beside the
// kubeconfig) that contain match, for a failure message: the cluster's logs are removed when
// `make test` ends, so what a test does not print of them is lost. It says why when there is
// no such log.
func (c *Cluster) ComponentLog(component, match string, max int) string {
	p := filepath.Join(filepath.Dir(c.Kubeconfig), "logs", component+".log")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Sprintf("(no %s log: %v)\n", component, err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, match) {
			if len(l) > 300 {
				l = l[:300] + " ..."
			}
			lines = append(lines, l)
		}
	}
	if len(lines) > max {
		lines = lines[len(lines)-max:]
	}
	return fmt.Sprintf("%s log, %d lines with %q:\n%s", component, len(lines), match, strings.Join(append(lines, ""), "\n"))
}

// StandIn writes an executable script named name into a new temporary directory and returns its
// path: it runs this test binary with env=value added to its environment and the script's
// arguments, so that the binary's TestMain, seeing env set, serves as a stand-in for the program
// name (a server made to fail on purpose) instead of running the tests. The value travels in the
// script because the scripts under test may start programs with a cleared environment.
func StandIn(t testing.TB, name, env, value string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %q \"$@\"\n", env, value, self)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// requireLanguageHost returns the Go language host the pinned CLI will run for a `runtime:
// go` project (what `make plugins` installs into the project's Pulumi home), and checks that
// `go` is on PATH (this language host version asks `go version` even for a prebuilt binary,
// pulumi/pulumi#11167). Missing: SKIP with the reason, a failure under CI=true.
func requireLanguageHost(t *testing.T, home string) {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(home, "plugins", "language-go-v*", "pulumi-language-go"))
	if len(found) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("FAIL: no Go language host (pulumi-language-go) in %s/plugins: `make plugins` installs it (PULUMI_GO_LANGUAGE_PLUGIN_FILE where there is no internet)", home)
		}
		t.Skipf("SKIP: no Go language host (pulumi-language-go) in %s/plugins: `make plugins` installs it (PULUMI_GO_LANGUAGE_PLUGIN_FILE where there is no internet)", home)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("no go on PATH, which the Go language host asks for its version: %v", err)
	}
}

// plainCLI is a project directory holding the repository's Pulumi.yaml and the operator
// binary it names (bin/pulumi-operator), with the environment a user of the plain pulumi CLI
// sets (README "With the plain pulumi CLI").
type plainCLI struct {
	t             *testing.T
	dir, stateDir string
	env           []string
	pulumi        string
}

func newPlainCLI(t *testing.T, kubeconfig string) *plainCLI {
	t.Helper()
	pulumi := testenv.PulumiCLI(t)
	home := stack.DefaultPulumiHome(pulumi)
	requireLanguageHost(t, home)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "pulumi-operator"), ".")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	proj, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), proj, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &plainCLI{t: t, dir: dir, stateDir: filepath.Join(dir, "state"), pulumi: pulumi}
	p.env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PULUMI_CONFIG_PASSPHRASE=e2e",
		"PULUMI_BACKEND_URL=file://"+filepath.Join(p.stateDir, "backend"), "PULUMI_HOME="+home,
		"PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE=true", "PULUMI_SKIP_UPDATE_CHECK=true", "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true")
	return p
}

// run runs name (the pulumi CLI or the operator binary) in the project directory and returns
// its combined output and exit code.
func (p *plainCLI) run(name string, args ...string) (string, int) {
	p.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		p.t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// pulumi runs the plain pulumi CLI; want is the exit code expected (0 or non-zero: 1).
func (p *plainCLI) pulumiOK(args ...string) string {
	p.t.Helper()
	out, code := p.run(p.pulumi, args...)
	if code != 0 {
		p.t.Fatalf("pulumi %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

func (p *plainCLI) pulumiFails(want string, args ...string) {
	p.t.Helper()
	out, code := p.run(p.pulumi, args...)
	if code == 0 || !strings.Contains(out, want) {
		p.t.Fatalf("pulumi %s: exit %d, want a failure saying %q\n%s", strings.Join(args, " "), code, want, out)
	}
}

// operator runs the operator binary's command line on the same backend and project.
func (p *plainCLI) operator(args ...string) string {
	p.t.Helper()
	full := append([]string{"--state-dir", p.stateDir, "--cluster-name", "e2e", "--pulumi", p.pulumi,
		"--project-file", filepath.Join(p.dir, "Pulumi.yaml")}, args...)
	out, code := p.run(filepath.Join(p.dir, "bin", "pulumi-operator"), full...)
	if code != 0 {
		p.t.Fatalf("pulumi-operator %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// TestPlainPulumiCLI: the plain pulumi CLI runs the operator's stacks with the operator's own
// program: a preview of a stack the operator brought up has no changes; an up from a laptop
// applies the live object's change, after which the operator has nothing left to do; a manifest
// in the stack's config takes the object's place; refresh, export, cancel and destroy work as
// Pulumi documents and the operator recreates a stack destroyed behind its back; a stack that
// names no object, a missing object and a wrong manifest are clear errors.
func TestPlainPulumiCLI(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	p := newPlainCLI(t, c.Kubeconfig)
	ns := c.Namespace(t)
	ctx := context.Background()
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	u, raw := testenv.Sample(t, ns)
	name := u.GetName()
	if _, err := cr.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := "e2e." + ns + "." + name
	obj := ns + "/" + name

	// The operator brings the object up; the plain CLI sees nothing to do.
	p.operator("up", "--from-cluster", obj)
	p.pulumiOK("preview", "--expect-no-changes", "-s", s)

	// A change to the live object: a preview shows it, an up from the laptop applies it, and
	// the operator then finds its stack up to date.
	if _, err := cr.Patch(ctx, name, "application/merge-patch+json", []byte(`{"spec":{"replicaCount":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p.pulumiFails("no changes were expected", "preview", "--expect-no-changes", "-s", s)
	p.pulumiOK("up", "--yes", "--skip-preview", "-s", s)
	dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Fatalf("after the laptop's up the Deployment is %v, %v; want 3 replicas", dep.Spec.Replicas, err)
	}
	// The plain CLI's up waited for the rollout (the program awaits it after the update), and
	// its objects name the live object as their owner, as the operator's do.
	if dep.Status.ObservedGeneration != dep.Generation || dep.Status.AvailableReplicas != 3 || dep.Status.Replicas != 3 {
		t.Errorf("the laptop's up returned before the rollout: status %+v", dep.Status)
	}
	if live, err := cr.Get(ctx, name, metav1.GetOptions{}); err != nil || len(dep.OwnerReferences) != 1 || dep.OwnerReferences[0].UID != live.GetUID() {
		t.Errorf("the Deployment's ownerReferences %v, want the KindCustomHttp's UID (%v)", dep.OwnerReferences, err)
	}
	if out := p.operator("preview", "--from-cluster", obj); !strings.Contains(out, "no changes") {
		t.Fatalf("after the laptop's up the operator's preview wants changes:\n%s", out)
	}
	var outputs map[string]any
	if err := json.Unmarshal([]byte(p.pulumiOK("stack", "output", "--json", "-s", s)), &outputs); err != nil || outputs[infra.OutputDeploymentName] != name {
		t.Fatalf("stack outputs = %v, %v; want the deployment's name among them", outputs, err)
	}

	// A manifest in the stack's config takes the object's place.
	manifest := strings.Replace(strings.Replace(string(raw), "namespace: peerns", "namespace: "+ns, 1), "replicaCount: 2", "replicaCount: 1", 1)
	if err := os.WriteFile(filepath.Join(p.dir, "web.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	p.pulumiOK("config", "set", "manifest", "web.yaml", "-s", s)
	p.pulumiFails("no changes were expected", "preview", "--expect-no-changes", "-s", s)
	p.pulumiOK("config", "set", "manifest", "nope.yaml", "-s", s)
	p.pulumiFails("nope.yaml", "preview", "-s", s)
	p.pulumiOK("config", "rm", "manifest", "-s", s)

	// Stacks that name no object, or an object not in the cluster.
	p.pulumiOK("stack", "init", "dev")
	p.pulumiFails("stack dev names no KindCustomHttp", "preview", "-s", "dev")
	p.pulumiOK("stack", "rm", "--yes", "dev")
	missing := "e2e." + ns + ".missing"
	p.pulumiOK("stack", "init", missing)
	p.pulumiFails("which is not in the cluster", "preview", "-s", missing)
	p.pulumiOK("stack", "rm", "--yes", missing)

	// refresh and export as Pulumi documents them.
	p.pulumiOK("refresh", "--yes", "--skip-preview", "-s", s)
	var export struct {
		Deployment struct {
			Resources []struct{ Type string } `json:"resources"`
		} `json:"deployment"`
	}
	if err := json.Unmarshal([]byte(p.pulumiOK("stack", "export", "-s", s)), &export); err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, r := range export.Deployment.Resources {
		types[r.Type] = true
	}
	for _, want := range []string{"kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service", "kubernetes:core/v1:ConfigMap"} {
		if !types[want] {
			t.Fatalf("stack export has no %s: %v", want, types)
		}
	}

	// `pulumi cancel` on a DIY backend removes the stack's lock (there is no update to stop
	// here); the stack stays usable by both.
	if out := p.pulumiOK("cancel", "--yes", "-s", s); !strings.Contains(out, "has been canceled") {
		t.Fatalf("pulumi cancel said:\n%s", out)
	}
	p.pulumiOK("preview", "--expect-no-changes", "-s", s)

	// A destroy behind the operator's back: the objects and the stack are gone, and the
	// operator's next up creates both again.
	// The program sets pulumi.com/skipAwait, so destroy returns once the API server accepted
	// each DELETE: a Deployment still held by the garbage collector's foreground deletion (its
	// ReplicaSets first) may be there for a moment, marked for deletion. It must be gone soon
	// after, and never be there unmarked.
	p.pulumiOK("destroy", "--yes", "--skip-preview", "--remove", "-s", s)
	destroyed := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, err
		case d.DeletionTimestamp == nil:
			return false, fmt.Errorf("the Deployment survived pulumi destroy, not marked for deletion (finalizers %v)", d.Finalizers)
		}
		return false, nil
	}); err != nil {
		t.Fatalf("after pulumi destroy: %v", err)
	}
	t.Logf("the Deployment was gone %s after pulumi destroy returned", time.Since(destroyed).Round(time.Millisecond))
	p.operator("up", "--from-cluster", obj)
	if _, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the operator did not create the Deployment again: %v", err)
	}
	p.pulumiOK("preview", "--expect-no-changes", "-s", s)
}

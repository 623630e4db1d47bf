package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
)

// TestStarted: only no arguments with all four engine variables is the engine's start.
func TestStarted(t *testing.T) {
	all := map[string]string{"PULUMI_MONITOR": "127.0.0.1:1", "PULUMI_ENGINE": "127.0.0.1:2", "PULUMI_PROJECT": "kindcustomhttp", "PULUMI_STACK": "c.ns.web"}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if !Started([]string{"pulumi-operator"}, env(all)) {
		t.Fatal("no arguments and every engine variable: not taken for the engine")
	}
	if Started([]string{"pulumi-operator", "watch"}, env(all)) {
		t.Fatal("a command with the engine's variables in the environment was taken for the engine")
	}
	for _, k := range engineEnv {
		some := map[string]string{}
		for kk, v := range all {
			if kk != k {
				some[kk] = v
			}
		}
		if Started([]string{"pulumi-operator"}, env(some)) {
			t.Fatalf("without %s: taken for the engine", k)
		}
	}
}

// TestCheckProviderEnv: the provider must run with infra.ProviderEnv, and the error says what
// to export.
func TestCheckProviderEnv(t *testing.T) {
	if err := checkProviderEnv(func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "export PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE=true") {
		t.Fatalf("without the variable: err = %v, want one saying what to export", err)
	}
	if err := checkProviderEnv(func(k string) string { return "true" }); err != nil {
		t.Fatalf("with the variable: %v", err)
	}
}

// TestObjectOf: a stack name made by stack.Name gives its object back; any other does not.
func TestObjectOf(t *testing.T) {
	if ns, name, ok := objectOf("kind.default.web"); !ok || ns != "default" || name != "web" {
		t.Fatalf("objectOf(kind.default.web) = %q %q %v", ns, name, ok)
	}
	for _, s := range []string{"dev", "a.b", "a.b.c.d", "Kind.default.web", "kind.default.web_x", "kind.default." + strings.Repeat("n", 64)} {
		if _, _, ok := objectOf(s); ok {
			t.Fatalf("objectOf(%q) encodes an object", s)
		}
	}
}

const sample = `apiVersion: groupsp.measutosh.dev/v1
kind: KindCustomHttp
metadata:
  name: web
  namespace: shop
spec:
  replicaCount: 2
  port: 8080
  configMapData:
    hostports: "localhost,8080\n"
`

// TestSourceManifest: a manifest relative to the project gives the object, with no owner when
// no cluster can be reached (the owner's UID is the only thing a manifest's stack asks the
// cluster for, and only when the cluster is there); each bad manifest is an error that says
// what to fix, and none reaches the cluster.
func TestSourceManifest(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("web.yaml", sample)
	write("two.yaml", sample+"---\n"+strings.Replace(sample, "name: web", "name: api", 1))
	write("other.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
	write("bad.yaml", strings.Replace(sample, "replicaCount: 2", "replicaCount: two", 1))
	noCluster := func() (Kube, error) {
		t.Fatal("the cluster was asked for")
		return Kube{}, errors.New("unreachable")
	}
	ctx := context.Background()
	unreachable := func() (Kube, error) { return Kube{}, errors.New("no configuration") }

	for _, stackName := range []string{"kind.shop.web", "dev"} {
		d, err := Source{Stack: stackName, Manifest: "web.yaml", Root: root}.Desired(ctx, unreachable)
		if err != nil {
			t.Fatalf("stack %s, manifest web.yaml: %v", stackName, err)
		}
		if d.Namespace != "shop" || d.Name != "web" || d.ReplicaCount != 2 || d.Port != 8080 || d.OwnerUID != "" {
			t.Fatalf("stack %s: desired = %+v", stackName, d)
		}
	}

	bad := map[string]struct{ stack, manifest, want string }{
		"missing file":   {"kind.shop.web", "nope.yaml", "nope.yaml"},
		"two objects":    {"kind.shop.web", "two.yaml", "holds 2 KindCustomHttp objects"},
		"another kind":   {"kind.shop.web", "other.yaml", "ConfigMap"},
		"bad field":      {"kind.shop.web", "bad.yaml", "replicaCount"},
		"another object": {"kind.shop.api", "web.yaml", "is KindCustomHttp shop/web, but stack kind.shop.api belongs to shop/api"},
		"no manifest":    {"dev", "", "stack dev names no KindCustomHttp"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := Source{Stack: tc.stack, Manifest: tc.manifest, Root: root}.Desired(ctx, noCluster)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestSourceClusterUnreachable: with no manifest, a cluster that cannot be reached is the
// error, not an empty object.
func TestSourceClusterUnreachable(t *testing.T) {
	_, err := Source{Stack: "kind.shop.web"}.Desired(context.Background(), func() (Kube, error) {
		return Kube{}, errors.New("load Kubernetes client config: no configuration")
	})
	if err == nil || !strings.Contains(err.Error(), "no configuration") {
		t.Fatalf("err = %v, want the connection's error", err)
	}
}

// A manifest's object that is in the cluster gets the live object's UID as its owner, so that a
// laptop's up declares the ownerReference the operator's up declares.
func TestSourceManifestOwner(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "web.yaml"), []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(api.GroupVersionKind)
	live.SetNamespace("shop")
	live.SetName("web")
	live.SetUID("live-uid-1")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.GroupVersionResource: api.ListKind}, live)
	d, err := Source{Stack: "kind.shop.web", Manifest: "web.yaml", Root: root}.Desired(context.Background(),
		func() (Kube, error) { return Kube{Dynamic: dyn}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if d.OwnerUID != "live-uid-1" {
		t.Errorf("OwnerUID %q, want the live object's live-uid-1", d.OwnerUID)
	}
}

// TestSourceEnvFromNeedsADigestKey: an object with envFrom sources, run by the plain pulumi CLI
// with neither a passphrase nor a digest key file in the environment, is an error that says
// which to set (ErrNoKey), or names the key file that cannot be read, not the cluster's error.
func TestSourceEnvFromNeedsADigestKey(t *testing.T) {
	root := t.TempDir()
	manifest := strings.Replace(sample, "replicaCount: 2", "replicaCount: 2\n  envFrom: [{configMapRef: {name: env}}]", 1)
	if err := os.WriteFile(filepath.Join(root, "web.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "")
	os.Unsetenv("PULUMI_CONFIG_PASSPHRASE")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "")
	unreachable := func() (Kube, error) { return Kube{}, errors.New("no configuration") }
	for name, tc := range map[string]struct {
		keyFile string
		want    string
	}{
		"no key":              {"", "--env-digest-key-file"},
		"unreadable key file": {filepath.Join(root, "absent"), "read --env-digest-key-file"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(desired.KeyFileEnv, tc.keyFile)
			_, err := Source{Stack: "kind.shop.web", Manifest: "web.yaml", Root: root}.Desired(context.Background(), unreachable)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.keyFile == "" && !errors.Is(err, desired.ErrNoKey)) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

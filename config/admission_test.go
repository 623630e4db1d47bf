package config_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/commands"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// installPolicy creates objs (a ValidatingAdmissionPolicy and its binding) on the cluster,
// deleted when the test ends.
func installPolicy(t *testing.T, c *testenv.Cluster, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		gvr, ok := gvrs[o.GetKind()]
		if !ok {
			continue
		}
		res := c.Client.Resource(gvr)
		_ = res.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) // a leftover of an aborted run
		if _, err := res.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		name := o.GetName()
		t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
}

// impersonated is the cluster's dynamic client acting as user (with the admin's credentials,
// which may impersonate: the API server then authorizes every request as user).
func impersonated(t *testing.T, c *testenv.Cluster, user string) dynamic.Interface {
	t.Helper()
	rc := rest.CopyConfig(c.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// kch is a KindCustomHttp named name in ns whose spec.envFrom names refs ("Secret/x",
// "ConfigMap/y"), with spec.image when image is not empty.
func kch(ns, name, image string, refs ...string) *unstructured.Unstructured {
	var envFrom []any
	for _, r := range refs {
		kind, n, _ := strings.Cut(r, "/")
		field := map[string]string{"Secret": "secretRef", "ConfigMap": "configMapRef"}[kind]
		envFrom = append(envFrom, map[string]any{field: map[string]any{"name": n}})
	}
	spec := map[string]any{"replicaCount": int64(1), "port": int64(80)}
	if envFrom != nil {
		spec["envFrom"] = envFrom
	}
	if image != "" {
		spec["image"] = image
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersionResource.GroupVersion().String(), "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

// TestAdmissionPolicy installs config/admission on the real API server and writes
// KindCustomHttps as impersonated users: alice may write them and get Secret allowed, bob may
// only write them. A reference its author may not get is refused with a message naming it and
// the author; an update that keeps a reference is admitted whoever makes it; one that adds a
// reference is asked again. `pulumi-operator version` reports the policy, and its absence once
// the binding is gone; watcher.AdmissionPolicy, which `watch` runs at start, says
// ErrNoAdmissionPolicy.
func TestAdmissionPolicy(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	installPolicy(t, c, kustomize(t, "config/admission"))

	for _, s := range []string{"allowed", "private"} {
		if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s},
			StringData: map[string]string{"K": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	roles := []rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: "kch-writer"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{api.GroupVersionResource.Group},
			Resources: []string{"kindcustomhttps"}, Verbs: []string{"get", "create", "update", "patch"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "read-allowed"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""},
			Resources: []string{"secrets"}, ResourceNames: []string{"allowed"}, Verbs: []string{"get"}}}},
	}
	for _, r := range roles {
		if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []struct{ user, role string }{{"alice", "kch-writer"}, {"alice", "read-allowed"}, {"bob", "kch-writer"}} {
		if _, err := c.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.user + "-" + b.role},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: b.role},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: b.user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	crs := func(user string) dynamic.ResourceInterface {
		return impersonated(t, c, user).Resource(api.GroupVersionResource).Namespace(ns)
	}
	// A new policy takes a moment to reach the API server's admission chain, and a new
	// RoleBinding its RBAC cache: the wait ends on the policy's own denial only (its name in the
	// message), not on an RBAC "forbidden" that comes before the policy is in force.
	poll(t, "the policy never refused bob's reference to Secret private", func(ctx context.Context) (bool, error) {
		_, err := crs("bob").Create(ctx, kch(ns, "probe", "", "Secret/private"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "pulumi-operator-kindcustomhttp-references"), nil
	})

	tests := map[string]struct {
		user    string
		obj     *unstructured.Unstructured
		update  bool     // Update an existing object instead of Create
		refused []string // nil: admitted; else words the refusal must say
	}{
		"alice names the Secret she may get": {user: "alice", obj: kch(ns, "a1", "", "Secret/allowed")},
		"alice names a Secret she may not get": {user: "alice", obj: kch(ns, "a2", "", "Secret/allowed", "Secret/private"),
			refused: []string{"Secret private", "of namespace " + ns, "alice may not get", "remove it from spec.envFrom"}},
		"bob names no Secret": {user: "bob", obj: kch(ns, "b1", "")},
		"bob names a Secret": {user: "bob", obj: kch(ns, "b2", "", "Secret/allowed"),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob names a ConfigMap he may not get": {user: "bob", obj: kch(ns, "b3", "", "ConfigMap/settings"),
			refused: []string{"ConfigMap settings", "bob may not get"}},
		// a1 exists (alice's): bob changes its replicas and keeps its reference.
		"bob updates alice's object, keeping its reference": {user: "bob", update: true,
			obj: func() *unstructured.Unstructured {
				o := kch(ns, "a1", "", "Secret/allowed")
				o.Object["spec"].(map[string]any)["replicaCount"] = int64(3)
				return o
			}()},
		"bob adds a reference to alice's object": {user: "bob", update: true, obj: kch(ns, "a1", "", "Secret/allowed", "Secret/private"),
			refused: []string{"Secret private", "bob may not get"}},
	}
	// Creates first, so that the updates find a1.
	for _, phase := range []bool{false, true} {
		for name, tc := range tests {
			if tc.update != phase {
				continue
			}
			t.Run(name, func(t *testing.T) {
				var err error
				if tc.update {
					err = updateAs(ctx, crs(tc.user), c.Client.Resource(api.GroupVersionResource).Namespace(ns), tc.obj)
				} else {
					_, err = crs(tc.user).Create(ctx, tc.obj, metav1.CreateOptions{})
				}
				if tc.refused == nil {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
					t.Fatalf("got %v, want a refusal by the policy", err)
				}
				for _, w := range tc.refused {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("refusal %q does not say %q", err, w)
					}
				}
			})
		}
	}

	// The operator sees the policy, and then its absence.
	if name, err := watcher.AdmissionPolicy(ctx, c.Kube); err != nil || name != "pulumi-operator-kindcustomhttp-references" {
		t.Errorf("AdmissionPolicy = %q, %v; want pulumi-operator-kindcustomhttp-references", name, err)
	}
	version := func() string {
		t.Helper()
		var out strings.Builder
		app := commands.App()
		app.Writer, app.ErrWriter = &out, &out
		if err := app.Run([]string{"pulumi-operator", "--kubeconfig", c.Kubeconfig, "version"}); err != nil {
			t.Fatalf("version: %v\n%s", err, out.String())
		}
		return out.String()
	}
	if out, want := version(), "admission policy: pulumi-operator-kindcustomhttp-references (bound, Deny)\n"; !strings.Contains(out, want) {
		t.Errorf("version output lacks %q:\n%s", want, out)
	}
	if err := c.Client.Resource(gvrs["ValidatingAdmissionPolicyBinding"]).Delete(ctx, "pulumi-operator-kindcustomhttp-references", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := watcher.AdmissionPolicy(ctx, c.Kube); !errors.Is(err, watcher.ErrNoAdmissionPolicy) {
		t.Errorf("AdmissionPolicy without a binding: %v, want ErrNoAdmissionPolicy", err)
	}
	if out, want := version(), "admission policy: NOT INSTALLED: no admission policy checks"; !strings.Contains(out, want) {
		t.Errorf("version output lacks %q:\n%s", want, out)
	}
}

// updateAs writes obj's spec over the existing object as the client as (a Get with admin for
// the resourceVersion, then an Update as the user).
func updateAs(ctx context.Context, as, admin dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	cur, err := admin.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get %s: %w", obj.GetName(), err)
	}
	cur.Object["spec"] = obj.Object["spec"]
	_, err = as.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// The chart's policy is config/admission's; with admission.allowedImages it also admits only
// images from those prefixes, keeps an image an update does not change, and always admits the
// default (no spec.image). Tried on the real API server with the chart's rendered policy.
func TestChartAdmissionPolicy(t *testing.T) {
	kust := kustomize(t, "config/admission")
	chart, err := helmTemplate(t, "--set", "passphrase="+testPassword)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		name := "pulumi-operator-kindcustomhttp-references"
		k, h := mustFind(t, kust, kind, name), mustFind(t, chart, kind, name)
		if !reflect.DeepEqual(k.Object["spec"], h.Object["spec"]) {
			t.Errorf("%s: the chart's spec differs from config/admission's:\nconfig:\n%s\nchart:\n%s", kind, toYAML(k.Object["spec"]), toYAML(h.Object["spec"]))
		}
		if h.GetLabels()[watcher.AdmissionPolicyLabel] != watcher.AdmissionPolicyValue {
			t.Errorf("the chart's %s lacks label %s=%s", kind, watcher.AdmissionPolicyLabel, watcher.AdmissionPolicyValue)
		}
	}
	if off, err := helmTemplate(t, "--set", "passphrase="+testPassword, "--set", "admission.enabled=false"); err != nil || find(off, "ValidatingAdmissionPolicy", "pulumi-operator-kindcustomhttp-references") != nil {
		t.Errorf("admission.enabled=false still renders the policy (%v)", err)
	}

	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	chart, err = helmTemplate(t, "--set", "passphrase="+testPassword, "--set", "admission.allowedImages={registry.example/team/}")
	if err != nil {
		t.Fatal(err)
	}
	var policy []*unstructured.Unstructured
	for _, o := range chart {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			policy = append(policy, o)
		}
	}
	if len(policy) != 2 {
		t.Fatalf("the chart rendered %d admission objects, want a policy and a binding", len(policy))
	}
	installPolicy(t, c, policy)
	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	poll(t, "the policy never refused an image outside the list", func(ctx context.Context) (bool, error) {
		_, err := crs.Create(ctx, kch(ns, "probe", "docker.io/evil:1"), dry)
		return err != nil, nil
	})
	_, err = crs.Create(ctx, kch(ns, "probe", "docker.io/evil:1"), dry)
	for _, w := range []string{"spec.image docker.io/evil:1 is not allowed", "registry.example/team/", "admission.allowedImages"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %v does not say %q", err, w)
		}
	}
	for name, image := range map[string]string{"listed": "registry.example/team/web:2", "default": ""} {
		if _, err := crs.Create(ctx, kch(ns, name, image), metav1.CreateOptions{}); err != nil {
			t.Errorf("image %q refused: %v", image, err)
		}
	}
	// A change that leaves spec.image alone passes.
	if _, err := crs.Patch(ctx, "listed", types.MergePatchType, []byte(`{"spec":{"replicaCount":2}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a change that keeps the image was refused: %v", err)
	}
}

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
	"github.com/pulumi-operator/pulumi-operator/commands"
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
// the author. An update is asked again for every reference the object keeps whenever it changes
// anything of spec but replicaCount and suspend: bob may scale or suspend alice's object, or
// relabel it, but not change its image, a prefix or its configMapData, which would roll pods of
// his choosing with her Secret in their environment (the confused deputy through an update).
// `pulumi-operator version` reports the policy, and its absence once the binding is gone;
// watcher.AdmissionPolicy, which `watch` runs, says ErrNoAdmissionPolicy.
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
		// What the takeover of the original operator's objects does with the operator's rights.
		{ObjectMeta: metav1.ObjectMeta{Name: "take-over"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"delete"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"patch"}}}},
	}
	for _, r := range roles {
		if _, err := c.Kube.RbacV1().Roles(ns).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []struct{ user, role string }{{"alice", "kch-writer"}, {"alice", "read-allowed"}, {"alice", "take-over"}, {"bob", "kch-writer"}} {
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

	// big holds the most configMapData the CRD admits, in as many keys as it admits: the
	// comparison of the old spec with the new one stays within the policy's CEL cost budget.
	big := kch(ns, "big", "", "Secret/allowed")
	data := map[string]any{}
	for i := range api.MaxConfigMapDataKeys {
		data[fmt.Sprintf("k%04d", i)] = strings.Repeat("x", api.MaxConfigMapDataBytes/api.MaxConfigMapDataKeys)
	}
	big.Object["spec"].(map[string]any)["configMapData"] = data
	adopting := func(o *unstructured.Unstructured) *unstructured.Unstructured {
		o.SetAnnotations(map[string]string{api.AdoptOriginalAnnotation: "true"})
		return o
	}
	// Creates of alice's objects come first, so that the updates find them.
	for _, o := range []*unstructured.Unstructured{kch(ns, "a1", "", "Secret/allowed"), big, adopting(kch(ns, "a3", ""))} {
		if _, err := crs("alice").Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice's create of %s refused: %v", o.GetName(), err)
		}
	}
	spec := func(f func(s map[string]any)) func(*unstructured.Unstructured) {
		return func(o *unstructured.Unstructured) { f(o.Object["spec"].(map[string]any)) }
	}
	tests := map[string]struct {
		user string
		obj  *unstructured.Unstructured // created, when update is nil
		// update changes the stored object of that name (a1 or big) before it is written back
		// as user; a dry run, so that no case changes what another finds.
		name    string
		update  func(*unstructured.Unstructured)
		refused []string // nil: admitted; else words the refusal must say
	}{
		"alice names the Secret she may get": {user: "alice", obj: kch(ns, "a0", "", "Secret/allowed")},
		"alice names a Secret she may not get": {user: "alice", obj: kch(ns, "a2", "", "Secret/allowed", "Secret/private"),
			refused: []string{"Secret private", "of namespace " + ns, "alice may not get", "remove it from spec.envFrom"}},
		"bob names no Secret": {user: "bob", obj: kch(ns, "b1", "")},
		"bob names a Secret": {user: "bob", obj: kch(ns, "b2", "", "Secret/allowed"),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob names a ConfigMap he may not get": {user: "bob", obj: kch(ns, "b3", "", "ConfigMap/settings"),
			refused: []string{"ConfigMap settings", "bob may not get"}},

		// Scaling and pausing stay open (README "Security"), and so does metadata.
		"bob scales alice's object":   {user: "bob", name: "a1", update: spec(func(s map[string]any) { s["replicaCount"] = int64(3) })},
		"bob suspends alice's object": {user: "bob", name: "a1", update: spec(func(s map[string]any) { s["suspend"] = true })},
		"bob labels alice's object": {user: "bob", name: "a1", update: func(o *unstructured.Unstructured) {
			o.SetLabels(map[string]string{"team": "b"})
		}},
		"bob scales alice's object of 1 MiB": {user: "bob", name: "big", update: spec(func(s map[string]any) { s["replicaCount"] = int64(2) })},
		"alice changes her object's image":   {user: "alice", name: "a1", update: spec(func(s map[string]any) { s["image"] = "registry.example/web:2" })},
		"bob removes alice's reference":      {user: "bob", name: "a1", update: spec(func(s map[string]any) { delete(s, "envFrom") })},

		// Any other change of spec hands her Secret to pods bob chose: refused.
		"bob changes the image of alice's object": {user: "bob", name: "a1",
			update:  spec(func(s map[string]any) { s["image"] = "docker.io/bob/dump-env:1" }),
			refused: []string{"Secret allowed", "bob may not get", "anything of this spec but replicaCount and suspend"}},
		"bob changes a prefix of alice's object": {user: "bob", name: "a1",
			update: spec(func(s map[string]any) {
				s["envFrom"] = []any{map[string]any{"prefix": "HTTP_SERVER_", "secretRef": map[string]any{"name": "allowed"}}}
			}),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob changes the port of alice's object": {user: "bob", name: "a1",
			update:  spec(func(s map[string]any) { s["port"] = int64(8443) }),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob changes configMapData of alice's object of 1 MiB": {user: "bob", name: "big",
			update:  spec(func(s map[string]any) { s["configMapData"].(map[string]any)["k0000"] = "y" }),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob scales alice's object and changes its image": {user: "bob", name: "a1",
			update: spec(func(s map[string]any) {
				s["replicaCount"] = int64(4)
				s["image"] = "docker.io/bob/dump-env:1"
			}),
			refused: []string{"Secret allowed", "bob may not get"}},
		"bob adds a reference to alice's object": {user: "bob", name: "a1",
			update: spec(func(s map[string]any) {
				s["envFrom"] = append(s["envFrom"].([]any), map[string]any{"secretRef": map[string]any{"name": "private"}})
			}),
			refused: []string{"Secret", "bob may not get"}},
		// The takeover of the original operator's objects: only for whoever may do it.
		"alice sets adopt-original, which she may do herself": {user: "alice", obj: adopting(kch(ns, "a4", ""))},
		"bob sets adopt-original on a new object": {user: "bob", obj: adopting(kch(ns, "b4", "")),
			refused: []string{api.AdoptOriginalAnnotation + "=true", "delete Deployment b4", "bob may not"}},
		"bob adds adopt-original to alice's object": {user: "bob", name: "a1", update: func(o *unstructured.Unstructured) {
			o.SetAnnotations(map[string]string{api.AdoptOriginalAnnotation: "true"})
		}, refused: []string{"delete Deployment a1", "bob may not"}},
		"bob scales the object alice set adopt-original on": {user: "bob", name: "a3", update: spec(func(s map[string]any) { s["replicaCount"] = int64(2) })},
		"bob labels the object alice set adopt-original on": {user: "bob", name: "a3", update: func(o *unstructured.Unstructured) {
			o.SetLabels(map[string]string{"team": "b"})
		}},
		"alice adds a Secret she may not get to her object": {user: "alice", name: "a1",
			update: spec(func(s map[string]any) {
				s["envFrom"] = append(s["envFrom"].([]any), map[string]any{"secretRef": map[string]any{"name": "private"}})
			}),
			refused: []string{"Secret private", "alice may not get"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.update != nil {
				err = updateAs(ctx, crs(tc.user), c.Client.Resource(api.GroupVersionResource).Namespace(ns), tc.name, tc.update)
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

// updateAs reads object name with admin (for its resourceVersion), changes it with change and
// writes it back as the client as, in a dry run: the API server admits it (or not) as a real
// update, and the stored object stays as it was.
func updateAs(ctx context.Context, as, admin dynamic.ResourceInterface, name string, change func(*unstructured.Unstructured)) error {
	cur, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get %s: %w", name, err)
	}
	change(cur)
	_, err = as.Update(ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// The chart's policy is config/admission's; with admission.allowedImages it also admits only
// images from those prefixes, always admits the default (no spec.image), and asks again on
// every update but scaling: an object written with another image while the policy was not in
// force may be scaled, but any other change of it is refused until its image is one of the
// list. Tried on the real API server with the chart's rendered policy.
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
	crs := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	// Written before the policy is in force (the default install has no list).
	if _, err := crs.Create(ctx, kch(ns, "old", "docker.io/evil:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	installPolicy(t, c, policy)
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
	// Scaling passes whatever the image; any other change is asked again, the kept image too.
	for name, p := range map[string]struct {
		object, patch string
		refused       bool
	}{
		"scale a listed image":                     {"listed", `{"spec":{"replicaCount":2}}`, false},
		"scale an unlisted image":                  {"old", `{"spec":{"replicaCount":2}}`, false},
		"suspend an unlisted image":                {"old", `{"spec":{"suspend":true}}`, false},
		"change a listed image's port":             {"listed", `{"spec":{"port":81}}`, false},
		"change an unlisted image's port":          {"old", `{"spec":{"port":81}}`, true},
		"change an unlisted image's configMapData": {"old", `{"spec":{"configMapData":{"a":"b"}}}`, true},
	} {
		_, err := crs.Patch(ctx, p.object, types.MergePatchType, []byte(p.patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case !p.refused && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case p.refused && (err == nil || !strings.Contains(err.Error(), "spec.image docker.io/evil:1 is not allowed")):
			t.Errorf("%s: %v, want the image refused", name, err)
		}
	}
}

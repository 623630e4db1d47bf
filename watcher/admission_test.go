package watcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

var (
	policyGVR  = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	bindingGVR = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
)

// testPolicy is config/admission's policy and binding installed for one test: named and
// labelled after the test's namespace, its binding matching that namespace only, so that runs
// sharing a cluster neither see each other's policy (Options.AdmissionPolicySelector) nor are
// refused by it.
type testPolicy struct {
	c        *testenv.Cluster
	policy   *unstructured.Unstructured
	binding  *unstructured.Unstructured
	selector string
}

// policyLabel is a value of AdmissionPolicyLabel no other test run uses.
func policyLabel() string { return fmt.Sprintf("test-%d", time.Now().UnixNano()) }

// newTestPolicy reads config/admission/policy.yaml and makes it the test's own: named and
// labelled label, bound in ns only. Nothing is installed yet (install, bind).
func newTestPolicy(t *testing.T, c *testenv.Cluster, ns, label string) *testPolicy {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "admission", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPolicy{c: c, selector: AdmissionPolicyLabel + "=" + label}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		u.SetName(label)
		u.SetLabels(map[string]string{AdmissionPolicyLabel: label})
		switch u.GetKind() {
		case "ValidatingAdmissionPolicy":
			p.policy = u
		case "ValidatingAdmissionPolicyBinding":
			_ = unstructured.SetNestedField(u.Object, label, "spec", "policyName")
			_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"kubernetes.io/metadata.name": ns},
				"spec", "matchResources", "namespaceSelector", "matchLabels")
			p.binding = u
		}
	}
	if p.policy == nil || p.binding == nil {
		t.Fatal("config/admission/policy.yaml lacks the policy or its binding")
	}
	t.Cleanup(func() {
		_ = c.Client.Resource(bindingGVR).Delete(context.Background(), p.binding.GetName(), metav1.DeleteOptions{})
		_ = c.Client.Resource(policyGVR).Delete(context.Background(), p.policy.GetName(), metav1.DeleteOptions{})
	})
	return p
}

// install creates the policy and binds it.
func (p *testPolicy) install(t *testing.T) {
	t.Helper()
	if _, err := p.c.Client.Resource(policyGVR).Create(context.Background(), p.policy, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the admission policy: %v", err)
	}
	p.bind(t)
}

// bind creates the binding.
func (p *testPolicy) bind(t *testing.T) {
	t.Helper()
	if _, err := p.c.Client.Resource(bindingGVR).Create(context.Background(), p.binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the admission policy's binding: %v", err)
	}
}

// unbind deletes the binding, and waits until it is gone.
func (p *testPolicy) unbind(t *testing.T) {
	t.Helper()
	res := p.c.Client.Resource(bindingGVR)
	if err := res.Delete(context.Background(), p.binding.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the admission policy's binding: %v", err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := res.Get(ctx, p.binding.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal("the binding never went")
	}
}

// tenant grants user, in f's namespace, what rules allow (a Role and its RoleBinding) and
// returns the KindCustomHttps of that namespace as user: the API server authorizes and admits
// each request as user (impersonation, with the admin's credentials). It returns once the grant
// is in force (a RoleBinding reaches the authorizer's cache a moment after its creation).
func tenant(t *testing.T, f *fixture, user string, rules ...rbacv1.PolicyRule) dynamic.ResourceInterface {
	t.Helper()
	ctx := context.Background()
	if _, err := f.cluster.Kube.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cluster.Kube.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(f.cluster.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	crs := d.Resource(api.GroupVersionResource).Namespace(f.ns)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := crs.List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s's grant never came into force", user)
	}
	return crs
}

// kchWriter may write KindCustomHttps, as a team member who deploys them.
var kchWriter = rbacv1.PolicyRule{APIGroups: []string{api.Group}, Resources: []string{api.Resource},
	Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}

// mayGet may get the Secrets names.
func mayGet(names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: names, Verbs: []string{"get"}}
}

// createAs creates the KindCustomHttp name of spec (YAML, indented as fixture.create takes it)
// through crs.
func createAs(t *testing.T, f *fixture, crs dynamic.ResourceInterface, name, specYAML string) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	doc := "apiVersion: groupsp.measutosh.dev/v1\nkind: KindCustomHttp\nmetadata:\n  name: " + name + "\n  namespace: " + f.ns + "\nspec:\n" + specYAML
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	_, err := crs.Create(context.Background(), u, metav1.CreateOptions{})
	return err
}

// patchAs merge-patches the KindCustomHttp name through crs.
func patchAs(crs dynamic.ResourceInterface, name, patch string) error {
	_, err := crs.Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// referencesChecked is a condition test on ReferencesChecked: its status and reason at the
// object's generation.
func referencesChecked(status metav1.ConditionStatus, reason string) func(*api.KindCustomHttp) bool {
	return func(o *api.KindCustomHttp) bool {
		c := cond(o, api.ConditionReferencesChecked)
		return c.Status == status && c.Reason == reason && c.ObservedGeneration == o.Generation
	}
}

// gauge is the value of the Prometheus series name with labels of f's registry, and whether it
// is there.
func (f *fixture) gauge(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	series:
		for _, m := range fam.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// waitGauge waits until gauge name with labels is want.
func (f *fixture) waitGauge(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		v, ok := f.gauge(t, name, labels)
		return ok && v == want, nil
	})
	if err != nil {
		v, ok := f.gauge(t, name, labels)
		t.Fatalf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
	}
}

// uncheckedSeries is the labels of an object's pulumi_operator_condition series for
// ReferencesChecked at status.
func uncheckedSeries(name string, status metav1.ConditionStatus) map[string]string {
	return map[string]string{"name": name, "type": api.ConditionReferencesChecked, "status": string(status)}
}

// TestReferencesAdmittedWithoutPolicy: a tenant's objects written while no admission policy was
// in force are found and reported (condition ReferencesChecked False, a Warning Event, the
// pulumi_operator_condition series), those written under it are not, and what a tenant does
// next moves the verdict as the policy's rule says:
//
//   - "early", created before the policy existed: AdmissionPolicyMissing, then, once the policy
//     is in force, AdmittedWithoutPolicy; bob, who may not get its Secret, scales it (the
//     policy lets him) and it stays unchecked; alice, who may, changes its port (the policy asks
//     her) and it is checked;
//   - "late", created by alice under the policy: checked, and still checked after the binding
//     was deleted and re-created, since its spec did not change meanwhile;
//   - "gap", created while the binding was deleted: AdmittedWithoutPolicy once it is back.
//
// Writes made while no policy is in force go through the admin, whom any policy admits: what
// the operator judges is when a spec was written, not by whom.
func TestReferencesAdmittedWithoutPolicy(t *testing.T) {
	label := policyLabel()
	f := startWith(t, Options{AdmissionPolicySelector: AdmissionPolicyLabel + "=" + label, AdmissionPolicyPoll: 200 * time.Millisecond})
	ctx := context.Background()
	policy := newTestPolicy(t, f.cluster, f.ns, label)
	if _, err := f.cluster.Kube.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		StringData: map[string]string{"PASSWORD": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := tenant(t, f, "alice", kchWriter, mayGet("db"))
	bob := tenant(t, f, "bob", kchWriter)
	const withSecret = "  replicaCount: 1\n  port: 80\n  envFrom:\n    - secretRef:\n        name: db\n"

	f.create(t, "early", withSecret)
	o := f.waitFor(t, "early", "ReferencesChecked False, no policy", referencesChecked(metav1.ConditionFalse, api.ReasonAdmissionPolicyMissing))
	if c := cond(o, api.ConditionReferencesChecked); !strings.Contains(c.Message, "Secret db") || !strings.Contains(c.Message, "config/admission") {
		t.Errorf("ReferencesChecked = %+v, want a message naming Secret db and config/admission", c)
	}
	f.waitEvent(t, "early", api.ReasonAdmissionPolicyMissing)
	f.waitFor(t, "early", "Ready without --require-admission-policy", readyAt(1))
	f.waitGauge(t, "pulumi_operator_condition", uncheckedSeries("early", metav1.ConditionFalse), 1)
	f.waitGauge(t, "pulumi_operator_admission_policy_in_force", nil, 0)

	policy.install(t)
	o = f.waitFor(t, "early", "ReferencesChecked False under the new policy", referencesChecked(metav1.ConditionFalse, api.ReasonAdmittedWithoutPolicy))
	if c := cond(o, api.ConditionReferencesChecked); !strings.Contains(c.Message, "written before admission policy "+policy.policy.GetName()) {
		t.Errorf("ReferencesChecked = %+v, want a message naming the policy", c)
	}
	f.waitEvent(t, "early", api.ReasonAdmittedWithoutPolicy)
	f.waitGauge(t, "pulumi_operator_admission_policy_in_force", nil, 1)

	// The policy admits bob's scaling unasked, so it leaves the spec unchecked.
	if err := patchAs(bob, "early", `{"spec":{"replicaCount":2}}`); err != nil {
		t.Fatalf("bob may scale: %v", err)
	}
	o = f.waitFor(t, "early", "Ready after bob's scaling", readyAt(2))
	if c := cond(o, api.ConditionReferencesChecked); c.Status != metav1.ConditionFalse || c.Reason != api.ReasonAdmittedWithoutPolicy {
		t.Errorf("after a scaling the policy did not ask about, ReferencesChecked = %+v, want False %s", c, api.ReasonAdmittedWithoutPolicy)
	}
	// bob may not change anything else, and alice may: the policy asked her.
	if err := patchAs(bob, "early", `{"spec":{"port":81}}`); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Fatalf("bob changed the port of an object naming a Secret he may not get: %v", err)
	}
	if err := patchAs(alice, "early", `{"spec":{"port":81}}`); err != nil {
		t.Fatalf("alice may change it: %v", err)
	}
	f.waitFor(t, "early", "ReferencesChecked True after alice's change", referencesChecked(metav1.ConditionTrue, api.ReasonAdmitted))
	f.waitGauge(t, "pulumi_operator_condition", uncheckedSeries("early", metav1.ConditionTrue), 1)

	if err := createAs(t, f, alice, "late", withSecret); err != nil {
		t.Fatalf("alice's create: %v", err)
	}
	f.waitFor(t, "late", "ReferencesChecked True", referencesChecked(metav1.ConditionTrue, api.ReasonAdmitted))

	// The binding goes: every object is unchecked while it is gone; one written meanwhile stays
	// so once it is back, the others do not.
	policy.unbind(t)
	f.waitFor(t, "late", "ReferencesChecked False without a binding", referencesChecked(metav1.ConditionFalse, api.ReasonAdmissionPolicyMissing))
	f.waitGauge(t, "pulumi_operator_admission_policy_in_force", nil, 0)
	f.create(t, "gap", withSecret)
	f.waitFor(t, "gap", "ReferencesChecked False without a binding", referencesChecked(metav1.ConditionFalse, api.ReasonAdmissionPolicyMissing))
	policy.bind(t)
	f.waitFor(t, "gap", "ReferencesChecked False once the binding is back", referencesChecked(metav1.ConditionFalse, api.ReasonAdmittedWithoutPolicy))
	for _, name := range []string{"late", "early"} {
		f.waitFor(t, name, "ReferencesChecked True once the binding is back", referencesChecked(metav1.ConditionTrue, api.ReasonAdmitted))
	}
	f.waitGauge(t, "pulumi_operator_condition", uncheckedSeries("gap", metav1.ConditionFalse), 1)

	// Without references there is nothing to judge.
	if err := patchAs(f.cr, "gap", `{"spec":{"envFrom":null}}`); err != nil {
		t.Fatal(err)
	}
	o = f.waitFor(t, "gap", "no ReferencesChecked without references", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReferencesChecked).Type == "" && o.Status.Admission == nil
	})
	// The series follow the status write (writeStatus sets them once UpdateStatus returns), so
	// they are waited for, not read once: a read between the two found the old series.
	series := map[string]string{"name": "gap", "type": api.ConditionReferencesChecked}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok := f.gauge(t, "pulumi_operator_condition", series)
		return !ok, nil
	}); err != nil {
		t.Error("a pulumi_operator_condition series of ReferencesChecked is left for an object without references")
	}
}

// TestRequireAdmissionPolicy: under --require-admission-policy a tenant's object naming a Secret
// does not roll out while no admission policy is in force (Ready False, AdmissionPolicyMissing,
// saying what to install; no up), nor once one is, while its spec is one written before
// (AdmittedWithoutPolicy); it rolls out once alice, whom the policy asks, changes it. An object
// naming only a ConfigMap, and one naming nothing, roll out throughout.
func TestRequireAdmissionPolicy(t *testing.T) {
	label := policyLabel()
	f := startWith(t, Options{RequireAdmissionPolicy: true, AdmissionPolicySelector: AdmissionPolicyLabel + "=" + label,
		AdmissionPolicyPoll: 200 * time.Millisecond})
	ctx := context.Background()
	policy := newTestPolicy(t, f.cluster, f.ns, label)
	if _, err := f.cluster.Kube.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		StringData: map[string]string{"PASSWORD": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"MODE": "fast"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := tenant(t, f, "alice", kchWriter, mayGet("db"),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"settings"}, Verbs: []string{"get"}})

	// No policy: the admin's writes stand for anyone's, as nothing checks them.
	f.create(t, "secret", "  replicaCount: 1\n  port: 80\n  envFrom:\n    - secretRef:\n        name: db\n")
	f.create(t, "config", "  replicaCount: 1\n  port: 80\n  envFrom:\n    - configMapRef:\n        name: settings\n")
	f.create(t, "plain", "  replicaCount: 1\n  port: 80\n")
	o := f.waitFor(t, "secret", "Ready False, no policy", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonAdmissionPolicyMissing
	})
	ready := cond(o, api.ConditionReady)
	for _, w := range []string{"--require-admission-policy", "Secret db", "config/admission", "admission.enabled=true"} {
		if !strings.Contains(ready.Message, w) {
			t.Errorf("Ready message %q does not say %q", ready.Message, w)
		}
	}
	if ready.Status != metav1.ConditionFalse {
		t.Errorf("Ready = %+v, want False", ready)
	}
	f.waitEvent(t, "secret", api.ReasonAdmissionPolicyMissing)
	f.waitFor(t, "config", "Ready: a ConfigMap is not held back", readyAt(1))
	f.waitFor(t, "plain", "Ready", readyAt(1))
	if _, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "secret", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Deployment of the held object: %v, want none", err)
	}

	policy.install(t)
	o = f.waitFor(t, "secret", "Ready False, written before the policy", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonAdmittedWithoutPolicy
	})
	if c := cond(o, api.ConditionReady); !strings.Contains(c.Message, "re-admits it by changing the spec") {
		t.Errorf("Ready = %+v, want a message saying how to re-admit it", c)
	}
	if _, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(ctx, "secret", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Deployment of the held object: %v, want none", err)
	}
	if err := patchAs(alice, "secret", `{"spec":{"port":81}}`); err != nil {
		t.Fatalf("alice may change it: %v", err)
	}
	o = f.waitFor(t, "secret", "Ready after alice's change", readyAt(2))
	if c := cond(o, api.ConditionReferencesChecked); c.Status != metav1.ConditionTrue {
		t.Errorf("ReferencesChecked = %+v, want True", c)
	}
}

// TestServiceTypeNeedsOptIn: a tenant who may write KindCustomHttps, and nothing else, asks for
// a LoadBalancer or a NodePort Service, which the operator would create with its own rights.
// By default both are Stalled (ServiceTypeNotAllowed, saying how to allow them) and no Service
// is made; ClusterIP and Headless roll out. With Options.AllowServiceTypes LoadBalancer, a
// LoadBalancer rolls out and a NodePort is still Stalled.
func TestServiceTypeNeedsOptIn(t *testing.T) {
	tests := map[string]struct {
		allow   []api.ServiceType
		stalled []string // objects (named after their serviceType) Stalled; the others Ready
	}{
		"default":              {stalled: []string{"loadbalancer", "nodeport"}},
		"LoadBalancer allowed": {allow: []api.ServiceType{api.ServiceTypeLoadBalancer}, stalled: []string{"nodeport"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := startWith(t, Options{AllowServiceTypes: tc.allow})
			carol := tenant(t, f, "carol", kchWriter)
			types := map[string]api.ServiceType{"loadbalancer": api.ServiceTypeLoadBalancer, "nodeport": api.ServiceTypeNodePort,
				"clusterip": api.ServiceTypeClusterIP, "headless": api.ServiceTypeHeadless}
			for obj, st := range types {
				if err := createAs(t, f, carol, obj, "  replicaCount: 1\n  port: 80\n  serviceType: "+string(st)+"\n"); err != nil {
					t.Fatalf("carol's create of %s: %v", obj, err)
				}
			}
			for obj, st := range types {
				if !slices.Contains(tc.stalled, obj) {
					f.waitFor(t, obj, "Ready", readyAt(1))
					svc, err := f.cluster.Kube.CoreV1().Services(f.ns).Get(context.Background(), obj, metav1.GetOptions{})
					want := corev1.ServiceType(st)
					if st == api.ServiceTypeHeadless {
						want = corev1.ServiceTypeClusterIP // with clusterIP None
					}
					if err != nil || svc.Spec.Type != want {
						t.Errorf("Service %s: %v, type %v; want %s", obj, err, svc.Spec.Type, want)
					}
					continue
				}
				o := f.waitFor(t, obj, "Stalled", func(o *api.KindCustomHttp) bool {
					return cond(o, api.ConditionStalled).Status == metav1.ConditionTrue
				})
				c := cond(o, api.ConditionStalled)
				for _, w := range []string{"spec.serviceType " + string(st), "--allow-service-types", "allowServiceTypes"} {
					if c.Reason != api.ReasonServiceTypeNotAllowed || !strings.Contains(c.Message, w) {
						t.Errorf("Stalled = %+v, want reason %s saying %q", c, api.ReasonServiceTypeNotAllowed, w)
					}
				}
				if r := cond(o, api.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != api.ReasonServiceTypeNotAllowed {
					t.Errorf("Ready = %+v, want False %s", r, api.ReasonServiceTypeNotAllowed)
				}
				f.waitEvent(t, obj, api.ReasonServiceTypeNotAllowed)
				if _, err := f.cluster.Kube.CoreV1().Services(f.ns).Get(context.Background(), obj, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("Service %s of a stalled object: %v, want none", obj, err)
				}
			}
			if n := f.stacks.ups.Load(); n != int32(len(types)-len(tc.stalled)) {
				t.Errorf("%d ups, want %d (none for a stalled object)", n, len(types)-len(tc.stalled))
			}
		})
	}
}

package watcher

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktesting "k8s.io/client-go/testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// policyObjects are an admission policy and a binding with the shipped label, created at the
// given times, the binding with the given validation actions.
func policyObjects(name string, policyAt, bindingAt time.Time, actions ...admissionv1.ValidationAction) []runtime.Object {
	labels := map[string]string{AdmissionPolicyLabel: AdmissionPolicyValue}
	return []runtime.Object{
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(policyAt)}},
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-binding", Labels: labels, CreationTimestamp: metav1.NewTime(bindingAt)},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: actions}},
	}
}

// TestUnitAdmissionPolicyInForce: the policy counts from the later of its own and its binding's
// creation, plus policyLoadAllowance; of two bound policies the one in force the longest is
// taken; a binding that only warns puts none in force.
func TestUnitAdmissionPolicyInForce(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		objects []runtime.Object
		want    PolicyInForce
		wantErr error
	}{
		"binding later": {objects: policyObjects("p", base, base.Add(time.Hour), admissionv1.Deny),
			want: PolicyInForce{Name: "p", Since: base.Add(time.Hour + policyLoadAllowance)}},
		"policy later": {objects: policyObjects("p", base.Add(time.Hour), base, admissionv1.Deny, admissionv1.Audit),
			want: PolicyInForce{Name: "p", Since: base.Add(time.Hour + policyLoadAllowance)}},
		"the older of two": {objects: append(policyObjects("new", base.Add(time.Hour), base.Add(time.Hour), admissionv1.Deny),
			policyObjects("old", base, base, admissionv1.Deny)...),
			want: PolicyInForce{Name: "old", Since: base.Add(policyLoadAllowance)}},
		"warn only": {objects: policyObjects("p", base, base, admissionv1.Warn), wantErr: ErrNoAdmissionPolicy},
		"none":      {wantErr: ErrNoAdmissionPolicy},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{})
			for _, o := range tc.objects {
				if err := f.kube.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			got, err := AdmissionPolicyInForce(context.Background(), f.kube, "")
			if !errors.Is(err, tc.wantErr) || got.Name != tc.want.Name || !got.Since.Equal(tc.want.Since) {
				t.Errorf("AdmissionPolicyInForce = %+v, %v; want %+v, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestUnitAdmissionPolicyLookupFails: a lookup that fails in passing (the API server
// restarting) keeps the last answer and changes nothing; a refusal (the operator may not list
// the policies) makes the state unknown, which under RequireAdmissionPolicy holds a rollout of
// an object naming a Secret (Ready False AdmissionPolicyUnknown, saying what to grant; no up)
// and not one that names none.
func TestUnitAdmissionPolicyLookupFails(t *testing.T) {
	f := newUnit(t, Options{RequireAdmissionPolicy: true})
	for _, o := range policyObjects("p", time.Now().Add(-time.Hour), time.Now().Add(-time.Hour), admissionv1.Deny) {
		if err := f.kube.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var fail error
	f.kube.PrependReactor("list", "validatingadmissionpolicies", func(ktesting.Action) (bool, runtime.Object, error) {
		return fail != nil, nil, fail
	})
	ctx := context.Background()
	if st, _ := f.w.policies.state(ctx, true); !st.inForce || st.policy.Name != "p" {
		t.Fatalf("state = %+v, want p in force", st)
	}
	fail = errors.New("connection refused")
	if st, changed := f.w.policies.state(ctx, true); !st.inForce || changed {
		t.Errorf("after a passing failure, state = %+v (changed %v), want p still in force", st, changed)
	}
	if v := gauge(t, f.registry, "pulumi_operator_admission_policy_in_force"); v != 1 {
		t.Errorf("pulumi_operator_admission_policy_in_force = %v after a passing failure, want 1", v)
	}
	fail = apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, "", errors.New("rbac"))
	if st, changed := f.w.policies.state(ctx, true); st.known || st.inForce || !changed {
		t.Errorf("after a refusal, state = %+v (changed %v), want unknown, changed", st, changed)
	}
	if v := gauge(t, f.registry, "pulumi_operator_admission_policy_in_force"); v != 0 {
		t.Errorf("pulumi_operator_admission_policy_in_force = %v once the policies cannot be seen, want 0", v)
	}

	f.create(kch("secret", map[string]any{"replicaCount": int64(1), "port": int64(80),
		"envFrom": []any{map[string]any{"secretRef": map[string]any{"name": "db"}}}}))
	if requeues := f.process("secret"); requeues != 1 {
		t.Errorf("a held rollout is retried %d times, want 1 (with backoff)", requeues)
	}
	o := f.storedCR("secret")
	wantCondition(t, o, api.ConditionReferencesChecked, metav1.ConditionUnknown, api.ReasonAdmissionPolicyUnknown)
	wantCondition(t, o, api.ConditionReady, metav1.ConditionFalse, api.ReasonAdmissionPolicyUnknown)
	if c := cond(o, api.ConditionReady); !strings.Contains(c.Message, "--require-admission-policy") || !strings.Contains(c.Message, "Grant it list") {
		t.Errorf("Ready message %q does not say what holds the rollout and what to grant", c.Message)
	}
	if len(f.stacks.ups) != 0 {
		t.Errorf("%d ups of an object whose references nobody may have checked, want none", len(f.stacks.ups))
	}

	f.create(kch("config", map[string]any{"replicaCount": int64(1), "port": int64(80), "configMapData": map[string]any{"k": "v"}}))
	f.process("config")
	if len(f.stacks.ups) != 1 {
		t.Errorf("%d ups of an object naming no Secret, want 1", len(f.stacks.ups))
	}
}

package commands

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestAdmissionStatus: the line `version` prints and `watch` logs for each answer the API server
// can give (the real one is in config/admission_test.go; a fake client forces the refusals): a
// bound policy, none, a binding that only warns, a namespaced install's refusal, another error.
func TestAdmissionStatus(t *testing.T) {
	labels := map[string]string{watcher.AdmissionPolicyLabel: watcher.AdmissionPolicyValue}
	policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: labels}}
	binding := func(actions ...admissionv1.ValidationAction) *admissionv1.ValidatingAdmissionPolicyBinding {
		return &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: labels},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "p", ValidationActions: actions}}
	}
	fail := func(err error) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }
	}
	tests := map[string]struct {
		objects   []runtime.Object
		react     k8stesting.ReactionFunc
		want      string
		installed bool
	}{
		"bound":                {objects: []runtime.Object{policy, binding(admissionv1.Deny)}, want: "p (bound, Deny)", installed: true},
		"none":                 {want: "NOT INSTALLED: no admission policy checks who may reference Secrets"},
		"a policy unbound":     {objects: []runtime.Object{policy}, want: "NOT INSTALLED"},
		"a binding that warns": {objects: []runtime.Object{policy, binding(admissionv1.Warn)}, want: "NOT INSTALLED"},
		"namespaced install": {react: fail(apierrors.NewForbidden(schema.GroupResource{Resource: "validatingadmissionpolicies"}, "", errors.New("rbac"))),
			want: "unknown (these credentials may not list ValidatingAdmissionPolicies"},
		"API down": {react: fail(errors.New("connection refused")), want: "unknown (list ValidatingAdmissionPolicies: connection refused)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objects...)
			if tc.react != nil {
				kube.PrependReactor("list", "validatingadmissionpolicies", tc.react)
			}
			line, installed := admissionStatus(context.Background(), kube)
			if !strings.Contains(line, tc.want) || installed != tc.installed {
				t.Errorf("admissionStatus = %q, %v; want %q, %v", line, installed, tc.want, tc.installed)
			}
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("the line %q says forbidden, which log searches read as a failure", line)
			}
		})
	}
}

// TestServiceTypes: --allow-service-types takes the service types spec.serviceType may name,
// spaces around them trimmed; anything else is an error naming the flag and the value.
func TestServiceTypes(t *testing.T) {
	tests := map[string]struct {
		values  []string
		want    []api.ServiceType
		wantErr string
	}{
		"none":      {},
		"both":      {values: []string{"LoadBalancer", " NodePort"}, want: []api.ServiceType{api.ServiceTypeLoadBalancer, api.ServiceTypeNodePort}},
		"unknown":   {values: []string{"NodePort", "External"}, wantErr: `--allow-service-types: "External" is not a service type`},
		"lowercase": {values: []string{"loadbalancer"}, wantErr: `"loadbalancer"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := serviceTypes(tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("serviceTypes(%q) = %v, %v; want an error saying %q", tc.values, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("serviceTypes(%q) = %v, %v; want %v", tc.values, got, err, tc.want)
			}
		})
	}
}

// TestParseStateBudget: --state-budget takes a Kubernetes quantity of whole bytes, 0 for none;
// anything else is an error naming the flag and saying what a budget looks like.
func TestParseStateBudget(t *testing.T) {
	tests := map[string]struct {
		value   string
		want    int64
		wantErr string
	}{
		"default":    {value: DefaultStateBudget, want: 16 << 20},
		"decimal":    {value: "4M", want: 4_000_000},
		"bytes":      {value: " 65536 ", want: 65536},
		"none":       {value: "0", want: 0},
		"word":       {value: "big", wantErr: `--state-budget: "big" is not a quantity of bytes such as 16Mi`},
		"negative":   {value: "-1Mi", wantErr: `--state-budget: "-1Mi" is not a whole number of bytes of 0 or more`},
		"fractional": {value: "0.5", wantErr: `--state-budget: "0.5" is not a whole number of bytes`},
		"empty":      {value: "", wantErr: `--state-budget: "" is not a quantity`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseStateBudget(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseStateBudget(%q) = %d, %v; want an error saying %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseStateBudget(%q) = %d, %v; want %d", tc.value, got, err, tc.want)
			}
		})
	}
}

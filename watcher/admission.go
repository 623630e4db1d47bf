package watcher

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// AdmissionPolicyLabel marks the ValidatingAdmissionPolicy, and its binding, that admits a
// KindCustomHttp only when its author may get every Secret and ConfigMap its spec.envFrom
// names (config/admission/policy.yaml, the chart's templates/admission.yaml), with the value
// AdmissionPolicyValue. The operator finds them by it, whatever the release named them.
const (
	AdmissionPolicyLabel = "groupsp.measutosh.dev/policy"
	AdmissionPolicyValue = "kindcustomhttp-references"
)

// ErrNoAdmissionPolicy means no ValidatingAdmissionPolicy labelled AdmissionPolicyLabel is
// installed and bound: anyone who may write a KindCustomHttp can then hand its pods any Secret
// of the namespace, through the operator.
var ErrNoAdmissionPolicy = errors.New("no admission policy checks who may reference Secrets in spec.envFrom " +
	"(install config/admission, or the chart with admission.enabled; README \"Security\")")

// AdmissionPolicy returns the name of the installed ValidatingAdmissionPolicy labelled
// AdmissionPolicyLabel=AdmissionPolicyValue that a binding with the same label puts to use
// (validationActions Deny). Errors: ErrNoAdmissionPolicy when there is none, or the API error
// of the two lists (forbidden where the operator is granted one namespace only).
func AdmissionPolicy(ctx context.Context, kube kubeclient.Interface) (string, error) {
	sel := metav1.ListOptions{LabelSelector: AdmissionPolicyLabel + "=" + AdmissionPolicyValue}
	policies, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)
	if err != nil {
		return "", fmt.Errorf("list ValidatingAdmissionPolicies: %w", err)
	}
	bindings, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return "", fmt.Errorf("list ValidatingAdmissionPolicyBindings: %w", err)
	}
	for _, p := range policies.Items {
		for _, b := range bindings.Items {
			if b.Spec.PolicyName != p.Name {
				continue
			}
			for _, a := range b.Spec.ValidationActions {
				if a == "Deny" {
					return p.Name, nil
				}
			}
		}
	}
	return "", ErrNoAdmissionPolicy
}

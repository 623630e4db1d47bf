package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// admissionCheckTimeout bounds the look for the admission policy: two lists of a few
// cluster-scoped objects. A slower API server is reported as unknown, never waited for.
const admissionCheckTimeout = 10 * time.Second

// admissionStatus is the line `version` prints and `watch` logs about the admission policy
// (watcher.AdmissionPolicy): "<name> (bound, Deny)", "NOT INSTALLED: <what to do>" or
// "unknown (<why>)", with installed true only for the first.
func admissionStatus(ctx context.Context, kube kubeclient.Interface) (line string, installed bool) {
	ctx, cancel := context.WithTimeout(ctx, admissionCheckTimeout)
	defer cancel()
	name, err := watcher.AdmissionPolicy(ctx, kube)
	switch {
	case err == nil:
		return name + " (bound, Deny)", true
	case errors.Is(err, watcher.ErrNoAdmissionPolicy):
		return "NOT INSTALLED: " + err.Error(), false
	case apierrors.IsForbidden(err):
		// A namespaced install: its role is bound in one namespace and cannot list
		// cluster-scoped objects. Said without the API's wording, which logs read as a failure.
		return "unknown (these credentials may not list ValidatingAdmissionPolicies, as in a namespaced install; look with " +
			"`kubectl get validatingadmissionpolicies -l " + watcher.AdmissionPolicyLabel + "=" + watcher.AdmissionPolicyValue + "`)", false
	default:
		return "unknown (" + err.Error() + ")", false
	}
}

// checkAdmission logs at start whether the admission policy is in force: a warning, which a
// user sees in the operator's log, when it is absent or cannot be looked up; with required
// (--require-admission-policy) it says that objects naming a Secret wait for it. The watcher
// looks again while it runs, and reports each object concerned (condition ReferencesChecked).
func checkAdmission(ctx context.Context, kube kubeclient.Interface, required bool) {
	line, ok := admissionStatus(ctx, kube)
	switch {
	case ok:
		slog.Info("admission policy in force", "policy", line)
	case required:
		slog.Warn("admission policy not in force: no object whose spec.envFrom names a Secret rolls out until it is (--require-admission-policy)", "policy", line)
	default:
		slog.Warn("admission policy not in force: whoever may write a KindCustomHttp can hand its pods any Secret of its namespace", "policy", line)
	}
}

// serviceTypes checks the values of --allow-service-types: each a service type spec.serviceType
// may name (ClusterIP and Headless are allowed anyway). An unknown one is an error naming the
// flag.
func serviceTypes(values []string) ([]api.ServiceType, error) {
	known := []api.ServiceType{api.ServiceTypeNodePort, api.ServiceTypeLoadBalancer, api.ServiceTypeClusterIP, api.ServiceTypeHeadless}
	var out []api.ServiceType
	for _, v := range values {
		t := api.ServiceType(strings.TrimSpace(v))
		if !slices.Contains(known, t) {
			return nil, fmt.Errorf("--allow-service-types: %q is not a service type spec.serviceType may name (NodePort, LoadBalancer; ClusterIP and Headless are always allowed)", v)
		}
		out = append(out, t)
	}
	return out, nil
}

// DefaultStateBudget is --state-budget's default: 16 MiB per object. The largest state a spec
// can make (the CRD's 1 MiB of configMapData, which the state holds three times, plus
// infra.StateOverheadBytes) still fits with one history entry beside it, the backend's copy of
// the previous state and the entry an up writes before it prunes (infra.HistoryWithin); a
// state of a few KiB of configMapData keeps --keep-history's 10. The chart's 1 GiB state
// volume holds 64 objects at the budget.
const DefaultStateBudget = "16Mi"

// parseStateBudget reads --state-budget, a Kubernetes quantity ("16Mi", "4000000", "0"), as
// bytes. Errors name the flag: not a quantity, or negative.
func parseStateBudget(v string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("--state-budget: %q is not a quantity of bytes such as 16Mi or 0 (%v)", v, err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return 0, fmt.Errorf("--state-budget: %q is not a whole number of bytes of 0 or more, such as 16Mi", v)
	}
	return n, nil
}

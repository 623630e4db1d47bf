package kubeclient

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// client-go's clientsets, the real and the fake one, are Interfaces: tests may pass either.
var (
	_ Interface = (*kubernetes.Clientset)(nil)
	_ Interface = (*fake.Clientset)(nil)
	_ Interface = (*Clientset)(nil)
)

// TestNewForConfigErrors: a configuration that cannot make a client is refused with what to fix,
// before anything is sent.
func TestNewForConfigErrors(t *testing.T) {
	missingCA := filepath.Join(t.TempDir(), "no-such-ca.crt")
	for _, tc := range []struct {
		name   string
		config rest.Config
		want   string
	}{
		{"QPS without a burst", rest.Config{Host: "https://127.0.0.1:1", QPS: 5}, "a QPS of 5 needs a burst greater than 0"},
		{"CA file missing", rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: missingCA}},
			"no-such-ca.crt"},
		{"host that does not parse", rest.Config{Host: "https://[::1"}, "kubernetes client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := NewForConfig(&tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.want) || cs != nil {
				t.Fatalf("NewForConfig = %v, %v; want no client and an error containing %q", cs, err, tc.want)
			}
		})
	}
}

// TestNewForConfigDoesNotChangeConfig: the caller's configuration is copied, not filled in.
func TestNewForConfigDoesNotChangeConfig(t *testing.T) {
	rc := rest.Config{Host: "https://127.0.0.1:1", QPS: 5, Burst: 10}
	if _, err := NewForConfig(&rc); err != nil {
		t.Fatal(err)
	}
	if rc.UserAgent != "" || rc.RateLimiter != nil {
		t.Fatalf("NewForConfig changed its argument: user agent %q, rate limiter %v", rc.UserAgent, rc.RateLimiter)
	}
}

// TestClientsetOnCluster: every group of a Clientset reaches the local cluster's apiserver.
func TestClientsetOnCluster(t *testing.T) {
	c := testenv.Connect(t)
	cs, err := NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list := metav1.ListOptions{Limit: 1}
	for _, tc := range []struct {
		group string
		call  func() error
	}{
		{"core/v1", func() error { _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); return err }},
		{"apps/v1", func() error { _, err := cs.AppsV1().Deployments("default").List(ctx, list); return err }},
		{"coordination.k8s.io/v1", func() error { _, err := cs.CoordinationV1().Leases("default").List(ctx, list); return err }},
		{"authentication.k8s.io/v1", func() error {
			_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			return err
		}},
		{"authorization.k8s.io/v1", func() error {
			_, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
				&authzv1.SelfSubjectRulesReview{Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: "default"}},
				metav1.CreateOptions{})
			return err
		}},
		{"admissionregistration.k8s.io/v1", func() error {
			_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, list)
			return err
		}},
	} {
		t.Run(tc.group, func(t *testing.T) {
			if err := tc.call(); err != nil {
				t.Fatalf("%s: %v", tc.group, err)
			}
		})
	}
}

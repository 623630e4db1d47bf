// Package kubeclient is the operator's typed Kubernetes client: the API groups the operator
// calls and no other. Every package that reads or writes built-in objects (Deployments,
// Secrets, Leases, Events, reviews) takes an Interface; the KindCustomHttp objects go through
// client-go's dynamic client instead.
//
// It is hand-written because client-go's kubernetes.Clientset (kubernetes.NewForConfig) builds
// a client for every API group the apiserver serves, and the Go linker keeps all of their code
// once one is built: a large part of the operator's binary for groups it never calls
// (docs/design/engine-host.md, "The image", has the size). The groups below are client-go's own
// typed clients; *kubernetes.Clientset and client-go's fake clientset satisfy Interface too, so
// tests pass either.
package kubeclient

import (
	"fmt"

	admissionregistrationv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of client-go's kubernetes.Interface the operator uses, method for
// method:
//   - CoreV1: Secrets and ConfigMaps of envFrom, Pods of a rollout, Services and ConfigMaps of
//     the owned-object informers, Events, the leader election's lock;
//   - AppsV1: Deployments (informer, rollout, ownership checks);
//   - CoordinationV1: the leader election's Lease;
//   - AuthenticationV1, AuthorizationV1: the token and access reviews of --metrics-secure;
//   - AdmissionregistrationV1: the check that the admission policy is installed.
//
// A package that needs another group adds it here and to Clientset.
type Interface interface {
	CoreV1() corev1.CoreV1Interface
	AppsV1() appsv1.AppsV1Interface
	CoordinationV1() coordinationv1.CoordinationV1Interface
	AuthenticationV1() authenticationv1.AuthenticationV1Interface
	AuthorizationV1() authorizationv1.AuthorizationV1Interface
	AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface
}

// Clientset is Interface over a rest.Config: one client-go client per group, sharing one HTTP
// client (connection pool, rate limiter) as kubernetes.Clientset's groups do.
type Clientset struct {
	coreV1                  *corev1.CoreV1Client
	appsV1                  *appsv1.AppsV1Client
	coordinationV1          *coordinationv1.CoordinationV1Client
	authenticationV1        *authenticationv1.AuthenticationV1Client
	authorizationV1         *authorizationv1.AuthorizationV1Client
	admissionregistrationV1 *admissionregistrationv1.AdmissionregistrationV1Client
}

// NewForConfig returns a Clientset for rc, as kubernetes.NewForConfig does for its groups: the
// default user agent when rc has none, one HTTP client and one rate limiter (rc.QPS, rc.Burst)
// shared by all groups. Errors: rc's TLS or proxy settings that do not make an HTTP client, a
// QPS without a burst, a host that does not parse; nothing is sent to the apiserver.
func NewForConfig(config *rest.Config) (*Clientset, error) {
	rc := *config
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(&rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if rc.RateLimiter == nil && rc.QPS > 0 {
		if rc.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: a QPS of %g needs a burst greater than 0", rc.QPS)
		}
		rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	}
	var cs Clientset
	for _, build := range []func() error{
		func() (err error) { cs.coreV1, err = corev1.NewForConfigAndClient(&rc, hc); return },
		func() (err error) { cs.appsV1, err = appsv1.NewForConfigAndClient(&rc, hc); return },
		func() (err error) { cs.coordinationV1, err = coordinationv1.NewForConfigAndClient(&rc, hc); return },
		func() (err error) {
			cs.authenticationV1, err = authenticationv1.NewForConfigAndClient(&rc, hc)
			return
		},
		func() (err error) {
			cs.authorizationV1, err = authorizationv1.NewForConfigAndClient(&rc, hc)
			return
		},
		func() (err error) {
			cs.admissionregistrationV1, err = admissionregistrationv1.NewForConfigAndClient(&rc, hc)
			return
		},
	} {
		if err := build(); err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
	}
	return &cs, nil
}

// CoreV1 returns the core/v1 client.
func (c *Clientset) CoreV1() corev1.CoreV1Interface { return c.coreV1 }

// AppsV1 returns the apps/v1 client.
func (c *Clientset) AppsV1() appsv1.AppsV1Interface { return c.appsV1 }

// CoordinationV1 returns the coordination.k8s.io/v1 client.
func (c *Clientset) CoordinationV1() coordinationv1.CoordinationV1Interface {
	return c.coordinationV1
}

// AuthenticationV1 returns the authentication.k8s.io/v1 client.
func (c *Clientset) AuthenticationV1() authenticationv1.AuthenticationV1Interface {
	return c.authenticationV1
}

// AuthorizationV1 returns the authorization.k8s.io/v1 client.
func (c *Clientset) AuthorizationV1() authorizationv1.AuthorizationV1Interface {
	return c.authorizationV1
}

// AdmissionregistrationV1 returns the admissionregistration.k8s.io/v1 client.
func (c *Clientset) AdmissionregistrationV1() admissionregistrationv1.AdmissionregistrationV1Interface {
	return c.admissionregistrationV1
}

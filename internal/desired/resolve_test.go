package desired

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// object is a valid KindCustomHttp of namespace ns with the given envFrom sources.
func object(env ...api.EnvFromSource) *api.KindCustomHttp {
	replicas, port := int32(2), int32(8080)
	return &api.KindCustomHttp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "uid-1"},
		Spec:       api.KindCustomHttpSpec{ReplicaCount: &replicas, Port: &port, EnvFrom: env},
	}
}

// TestResolve: the one resolver gives api.Resolve's Desired with Digest's digest, asks for the
// cluster only when there are envFrom sources, and keeps the kinds of error apart: an invalid
// spec (the spec must change), a missing source, no cluster.
func TestResolve(t *testing.T) {
	cmRef := api.EnvFromSource{ConfigMapRef: &api.LocalObject{Name: "env-a"}}
	kube := fake.NewClientset(configMap("env-a", map[string]string{"K": "v"}, nil))
	calls := 0
	cluster := func() (kubeclient.Interface, error) { calls++; return kube, nil }

	r, err := Resolve(context.Background(), object(), cluster, Options{Key: testKey})
	if err != nil || r.Desired.Name != "web" || r.Desired.ReplicaCount != 2 || r.Desired.EnvDigest != "" || calls != 0 {
		t.Fatalf("no envFrom: %+v, %v, %d cluster calls; want the Desired, no digest, no cluster", r, err, calls)
	}
	if r, err := Resolve(context.Background(), object(), nil, Options{Key: testKey}); err != nil || r.Desired.Image != api.DefaultImage {
		t.Fatalf("no envFrom, no cluster: %+v, %v; want the defaulted Desired", r, err)
	}

	r, err = Resolve(context.Background(), object(cmRef), cluster, Options{Key: testKey})
	if err != nil || calls != 1 {
		t.Fatalf("envFrom: %v, %d cluster calls; want one", err, calls)
	}
	d, _ := api.Resolve(object(cmRef))
	want, err := EnvFromDigest(context.Background(), kube, d, Options{Key: testKey})
	if err != nil || r.Desired.EnvDigest == "" || r.Desired.EnvDigest != want.Digest {
		t.Fatalf("envFrom digest %q, want Digest's %q (%v)", r.Desired.EnvDigest, want.Digest, err)
	}

	bad := object()
	bad.Spec.ReplicaCount = nil
	var inv *api.InvalidSpecError
	if _, err := Resolve(context.Background(), bad, cluster, Options{Key: testKey}); !errors.As(err, &inv) || calls != 1 {
		t.Fatalf("invalid spec: %v, %d cluster calls; want an *api.InvalidSpecError and no cluster call", err, calls)
	}
	missing := object(api.EnvFromSource{ConfigMapRef: &api.LocalObject{Name: "absent"}})
	if _, err := Resolve(context.Background(), missing, cluster, Options{Key: testKey}); !errors.Is(err, ErrMissing) || errors.As(err, &inv) {
		t.Fatalf("missing source: %v; want ErrMissing, not an invalid spec", err)
	}
	if _, err := Resolve(context.Background(), object(cmRef), nil, Options{Key: testKey}); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("envFrom without a cluster: %v; want ErrNoCluster", err)
	}
	down := errors.New("connection refused")
	if _, err := Resolve(context.Background(), object(cmRef), func() (kubeclient.Interface, error) { return nil, down }, Options{Key: testKey}); !errors.Is(err, ErrNoCluster) || !errors.Is(err, down) {
		t.Fatalf("envFrom with a cluster that fails: %v; want ErrNoCluster wrapping its error", err)
	}
}

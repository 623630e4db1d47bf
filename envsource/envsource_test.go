package envsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

const ns = "team-a"

func configMap(name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data, BinaryData: binary}
}

func secret(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

func desired(refs ...api.EnvRef) api.Desired {
	return api.Desired{Namespace: ns, Name: "web", EnvFrom: refs}
}

var (
	cmA  = api.EnvRef{Kind: api.EnvKindConfigMap, Name: "env-a"}
	secB = api.EnvRef{Kind: api.EnvKindSecret, Name: "creds", Prefix: "DB_"}
)

// The digest is the SHA-256 of the length-prefixed kind, name, prefix, then each key and value
// in key order. Pinned: a different digest for unchanged sources would roll every pod that
// uses envFrom on the operator's upgrade.
func TestDigestFormat(t *testing.T) {
	kube := fake.NewClientset(
		configMap("env-a", map[string]string{"MODE": "one", "A": "x"}, nil),
		secret("creds", map[string][]byte{"PASSWORD": []byte("pw")}))
	got, err := Digest(context.Background(), kube, desired(cmA, secB))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("9:ConfigMap5:env-a0:1:A1:x4:MODE3:one" + "6:Secret5:creds3:DB_8:PASSWORD2:pw"))
	if want := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Digest = %s, want %s", got, want)
	}
}

// Each part of a source changes the digest; a ConfigMap's Data and BinaryData count alike.
func TestDigestChanges(t *testing.T) {
	base := []runtime.Object{configMap("env-a", map[string]string{"MODE": "one"}, nil),
		secret("creds", map[string][]byte{"PASSWORD": []byte("pw")})}
	tests := map[string]struct {
		objects []runtime.Object
		refs    []api.EnvRef
		same    bool
	}{
		"unchanged": {objects: base, refs: []api.EnvRef{cmA, secB}, same: true},
		"binary data instead of data": {objects: []runtime.Object{configMap("env-a", nil, map[string][]byte{"MODE": []byte("one")}), base[1]},
			refs: []api.EnvRef{cmA, secB}, same: true},
		"ConfigMap value": {objects: []runtime.Object{configMap("env-a", map[string]string{"MODE": "two"}, nil), base[1]},
			refs: []api.EnvRef{cmA, secB}},
		"ConfigMap key": {objects: []runtime.Object{configMap("env-a", map[string]string{"MODE2": "one"}, nil), base[1]},
			refs: []api.EnvRef{cmA, secB}},
		"Secret value": {objects: []runtime.Object{base[0], secret("creds", map[string][]byte{"PASSWORD": []byte("pw2")})},
			refs: []api.EnvRef{cmA, secB}},
		"prefix":          {objects: base, refs: []api.EnvRef{cmA, {Kind: api.EnvKindSecret, Name: "creds"}}},
		"order of source": {objects: base, refs: []api.EnvRef{secB, cmA}},
	}
	want, err := Digest(context.Background(), fake.NewClientset(base...), desired(cmA, secB))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Digest(context.Background(), fake.NewClientset(tc.objects...), desired(tc.refs...))
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tc.same {
				t.Fatalf("digest %s, base %s: same = %v, want %v", got, want, got == want, tc.same)
			}
			if len(got) != 64 {
				t.Fatalf("digest %q: want 64 hex digits", got)
			}
		})
	}
}

// Without envFrom there is no digest and nothing is read.
func TestDigestWithoutEnvFrom(t *testing.T) {
	kube := fake.NewClientset()
	got, err := Digest(context.Background(), kube, desired())
	if err != nil || got != "" {
		t.Fatalf("Digest = %q, %v; want \"\", nil", got, err)
	}
	if a := kube.Actions(); len(a) != 0 {
		t.Fatalf("Digest without envFrom called the API: %v", a)
	}
}

// A missing source wraps ErrMissing and says what to do; any other API error is passed on,
// not ErrMissing, naming the source.
func TestDigestErrors(t *testing.T) {
	forbidden := func(resource string) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "x", errors.New("rbac"))
		}
	}
	tests := map[string]struct {
		objects   []runtime.Object
		react     map[string]k8stesting.ReactionFunc // resource -> reaction to get
		missing   bool
		forbidden bool
		want      []string
	}{
		"missing ConfigMap": {missing: true, want: []string{"ConfigMap team-a/env-a", "does not exist", "create it or remove it from spec.envFrom"}},
		"missing Secret": {objects: []runtime.Object{configMap("env-a", nil, nil)}, missing: true,
			want: []string{"Secret team-a/creds", "does not exist"}},
		"forbidden ConfigMap": {react: map[string]k8stesting.ReactionFunc{"configmaps": forbidden("configmaps")}, forbidden: true,
			want: []string{"read ConfigMap team-a/env-a named in spec.envFrom"}},
		"forbidden Secret": {objects: []runtime.Object{configMap("env-a", nil, nil)},
			react: map[string]k8stesting.ReactionFunc{"secrets": forbidden("secrets")}, forbidden: true,
			want: []string{"read Secret team-a/creds named in spec.envFrom"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objects...)
			for resource, r := range tc.react {
				kube.PrependReactor("get", resource, r)
			}
			got, err := Digest(context.Background(), kube, desired(cmA, secB))
			if err == nil || got != "" {
				t.Fatalf("Digest = %q, %v; want an error", got, err)
			}
			if errors.Is(err, ErrMissing) != tc.missing || apierrors.IsForbidden(err) != tc.forbidden {
				t.Fatalf("error %v: ErrMissing %v (want %v), forbidden %v (want %v)",
					err, errors.Is(err, ErrMissing), tc.missing, apierrors.IsForbidden(err), tc.forbidden)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

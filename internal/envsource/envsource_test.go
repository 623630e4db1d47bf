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
	res, err := Digest(context.Background(), kube, desired(cmA, secB), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Digest
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
	wantRes, err := Digest(context.Background(), fake.NewClientset(base...), desired(cmA, secB), Options{})
	want := wantRes.Digest
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := Digest(context.Background(), fake.NewClientset(tc.objects...), desired(tc.refs...), Options{})
			got := res.Digest
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
	res, err := Digest(context.Background(), kube, desired(), Options{})
	if got := res.Digest; err != nil || got != "" {
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
		// skipForbidden is Options.SkipForbidden: it covers Secrets, never a ConfigMap.
		skipForbidden bool
		want          []string
	}{
		"missing ConfigMap": {missing: true, want: []string{"ConfigMap team-a/env-a", "does not exist", "create it or remove it from spec.envFrom"}},
		"missing Secret": {objects: []runtime.Object{configMap("env-a", nil, nil)}, missing: true,
			want: []string{"Secret team-a/creds", "does not exist"}},
		"forbidden ConfigMap": {react: map[string]k8stesting.ReactionFunc{"configmaps": forbidden("configmaps")}, forbidden: true,
			want: []string{"read ConfigMap team-a/env-a named in spec.envFrom"}},
		"forbidden ConfigMap, SkipForbidden": {react: map[string]k8stesting.ReactionFunc{"configmaps": forbidden("configmaps")},
			forbidden: true, skipForbidden: true, want: []string{"read ConfigMap team-a/env-a named in spec.envFrom"}},
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
			res, err := Digest(context.Background(), kube, desired(cmA, secB), Options{SkipForbidden: tc.skipForbidden})
			if got := res.Digest; err == nil || got != "" {
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

// A Secret that is not read (Options.ReadSecret false for its namespace, or a 403 with
// SkipForbidden) is never fetched, counts by kind, name and prefix alone, and is listed in
// Unread; both ways give the same digest, which differs from the one with its data (a later
// grant rolls the pods once) and does not move when its data changes. ConfigMaps are read as
// before.
func TestDigestUnreadSecrets(t *testing.T) {
	objects := func(pw string) []runtime.Object {
		return []runtime.Object{configMap("env-a", map[string]string{"MODE": "one"}, nil),
			secret("creds", map[string][]byte{"PASSWORD": []byte(pw)})}
	}
	ctx := context.Background()
	read, err := Digest(ctx, fake.NewClientset(objects("pw")...), desired(cmA, secB), Options{})
	if err != nil || len(read.Unread) != 0 {
		t.Fatalf("Digest reading every source = %+v, %v", read, err)
	}
	notHere := Options{ReadSecret: func(namespace string) bool { return namespace != ns }}
	var digests []string
	for _, pw := range []string{"pw", "changed"} {
		kube := fake.NewClientset(objects(pw)...)
		got, err := Digest(ctx, kube, desired(cmA, secB), notHere)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"Secret team-a/creds"}; strings.Join(got.Unread, ",") != strings.Join(want, ",") {
			t.Errorf("Unread = %v, want %v", got.Unread, want)
		}
		for _, a := range kube.Actions() {
			if a.GetResource().Resource == "secrets" {
				t.Errorf("a Secret the options say not to read was fetched: %v", a)
			}
		}
		digests = append(digests, got.Digest)
	}
	if digests[0] != digests[1] {
		t.Errorf("the digest of an unread Secret moved with its data: %s, %s", digests[0], digests[1])
	}
	if digests[0] == read.Digest || len(digests[0]) != 64 {
		t.Errorf("unread digest %q: want 64 hex digits, unlike the read one %q", digests[0], read.Digest)
	}

	kube := fake.NewClientset(objects("pw")...)
	kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "creds", errors.New("rbac"))
	})
	got, err := Digest(ctx, kube, desired(cmA, secB), Options{SkipForbidden: true})
	if err != nil || got.Digest != digests[0] || len(got.Unread) != 1 {
		t.Errorf("Digest with a forbidden Secret and SkipForbidden = %+v, %v; want digest %s, one unread", got, err, digests[0])
	}
}

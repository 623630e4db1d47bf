package desired

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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

// testKey is the digest key of these tests (Options.Key).
var testKey = []byte("desired tests' key")

// stream is what the digest of sources cmA and secB, as TestDigestFormat's objects hold them,
// is taken of: the length-prefixed kind, name, prefix, then each key and value in key order.
const stream = "9:ConfigMap5:env-a0:1:A1:x4:MODE3:one" + "6:Secret5:creds3:DB_8:PASSWORD2:pw"

// The digest is the HMAC-SHA256 under the key of stream. Pinned: a different digest for
// unchanged sources would roll every pod that uses envFrom on the operator's upgrade. It is no
// longer the stream's plain SHA-256, which whoever may view the Deployment could recompute for
// a guess of the Secret's data.
func TestDigestFormat(t *testing.T) {
	kube := fake.NewClientset(
		configMap("env-a", map[string]string{"MODE": "one", "A": "x"}, nil),
		secret("creds", map[string][]byte{"PASSWORD": []byte("pw")}))
	res, err := EnvFromDigest(context.Background(), kube, desired(cmA, secB), Options{Key: testKey})
	if err != nil {
		t.Fatal(err)
	}
	got := res.Digest
	mac := hmac.New(sha256.New, testKey)
	mac.Write([]byte(stream))
	if want := hex.EncodeToString(mac.Sum(nil)); got != want {
		t.Fatalf("Digest = %s, want %s", got, want)
	}
	if sum := sha256.Sum256([]byte(stream)); got == hex.EncodeToString(sum[:]) {
		t.Fatalf("Digest = %s, the unkeyed SHA-256 of the data", got)
	}
}

// TestDigestKeyed: two runs with keys loaded from the same passphrase give the same digest of
// the same data (the operator's replicas, its restarts, the laptop commands); another
// installation's key gives another; without a key nothing is read and the error is ErrNoKey.
func TestDigestKeyed(t *testing.T) {
	objects := []runtime.Object{configMap("env-a", map[string]string{"MODE": "one", "A": "x"}, nil),
		secret("creds", map[string][]byte{"PASSWORD": []byte("pw")})}
	digest := func(phrase string) string {
		t.Helper()
		key, err := LoadKey("", func(k string) (string, bool) { return phrase, k == "PULUMI_CONFIG_PASSPHRASE" })
		if err != nil {
			t.Fatal(err)
		}
		res, err := EnvFromDigest(context.Background(), fake.NewClientset(objects...), desired(cmA, secB), Options{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return res.Digest
	}
	first, second, other := digest("installation one"), digest("installation one"), digest("installation two")
	if first != second {
		t.Errorf("same data, same key: digests %s and %s", first, second)
	}
	if first == other {
		t.Errorf("another key gives the same digest %s", first)
	}
	if sum := sha256.Sum256([]byte(stream)); first == hex.EncodeToString(sum[:]) {
		t.Errorf("digest %s is the unkeyed SHA-256 of the data", first)
	}
	kube := fake.NewClientset(objects...)
	if res, err := EnvFromDigest(context.Background(), kube, desired(cmA, secB), Options{}); !errors.Is(err, ErrNoKey) || res.Digest != "" {
		t.Errorf("Digest without a key = %+v, %v; want ErrNoKey", res, err)
	}
	if a := kube.Actions(); len(a) != 0 {
		t.Errorf("Digest without a key read %v", a)
	}
}

// TestLoadKey: the key file wins over the passphrase; the passphrase counts as the CLI reads it
// (the variable, even set empty, before the file); every key is 32 bytes and none is the secret
// itself; nothing, an empty secret or an unreadable file is an error.
func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile, phraseFile, empty := write("key", "key one\n"), write("phrase", " phrase one\n"), write("empty", " \n")
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	derived := func(secret string) string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(keyLabel))
		return hex.EncodeToString(mac.Sum(nil))
	}
	for name, tc := range map[string]struct {
		keyFile string
		env     map[string]string
		want    string // the secret the key is derived from; "" for an error
		err     error  // errors.Is the error, when not nil
	}{
		"key file over passphrase":   {keyFile: keyFile, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "phrase"}, want: "key one"},
		"passphrase":                 {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "phrase"}, want: "phrase"},
		"passphrase file":            {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": phraseFile}, want: "phrase one"},
		"variable before file":       {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "phrase", "PULUMI_CONFIG_PASSPHRASE_FILE": phraseFile}, want: "phrase"},
		"nothing":                    {env: map[string]string{}, err: ErrNoKey},
		"empty passphrase":           {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "", "PULUMI_CONFIG_PASSPHRASE_FILE": phraseFile}, err: ErrNoKey},
		"empty key file":             {keyFile: empty, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "phrase"}, err: ErrNoKey},
		"empty passphrase file":      {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": empty}, err: ErrNoKey},
		"key file unreadable":        {keyFile: filepath.Join(dir, "absent"), env: map[string]string{}, err: fs.ErrNotExist},
		"passphrase file unreadable": {env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": filepath.Join(dir, "absent")}, err: fs.ErrNotExist},
	} {
		t.Run(name, func(t *testing.T) {
			key, err := LoadKey(tc.keyFile, env(tc.env))
			if tc.want == "" {
				if err == nil || !errors.Is(err, tc.err) {
					t.Fatalf("LoadKey = %x, %v; want an error that is %v", key, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(key); got != derived(tc.want) || len(key) != 32 {
				t.Errorf("LoadKey = %s, want the key derived from %q", got, tc.want)
			}
		})
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
	wantRes, err := EnvFromDigest(context.Background(), fake.NewClientset(base...), desired(cmA, secB), Options{Key: testKey})
	want := wantRes.Digest
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := EnvFromDigest(context.Background(), fake.NewClientset(tc.objects...), desired(tc.refs...), Options{Key: testKey})
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
	res, err := EnvFromDigest(context.Background(), kube, desired(), Options{Key: testKey})
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
			res, err := EnvFromDigest(context.Background(), kube, desired(cmA, secB), Options{Key: testKey, SkipForbidden: tc.skipForbidden})
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
	read, err := EnvFromDigest(ctx, fake.NewClientset(objects("pw")...), desired(cmA, secB), Options{Key: testKey})
	if err != nil || len(read.Unread) != 0 {
		t.Fatalf("Digest reading every source = %+v, %v", read, err)
	}
	notHere := Options{Key: testKey, ReadSecret: func(namespace string) bool { return namespace != ns }}
	var digests []string
	for _, pw := range []string{"pw", "changed"} {
		kube := fake.NewClientset(objects(pw)...)
		got, err := EnvFromDigest(ctx, kube, desired(cmA, secB), notHere)
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
	got, err := EnvFromDigest(ctx, kube, desired(cmA, secB), Options{Key: testKey, SkipForbidden: true})
	if err != nil || got.Digest != digests[0] || len(got.Unread) != 1 {
		t.Errorf("Digest with a forbidden Secret and SkipForbidden = %+v, %v; want digest %s, one unread", got, err, digests[0])
	}
}

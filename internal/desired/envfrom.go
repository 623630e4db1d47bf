package desired

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// ErrMissing means a ConfigMap or Secret named in spec.envFrom does not exist (yet). The
// watcher retries it with backoff (reason EnvSourceMissing), and a change of that object
// enqueues the KindCustomHttp at once.
var ErrMissing = errors.New("envFrom source not found")

// Options say which envFrom sources Digest reads.
type Options struct {
	// ReadSecret reports whether Secrets of a namespace are read at all. nil reads every
	// Secret. A Secret that is not read enters the digest by kind, name and prefix only, and
	// Digest lists it in Result.Unread: its data reaches the pods (the kubelet reads it), but a
	// change of it does not roll them. This is how the operator runs without permission to read
	// Secrets (README "Security").
	ReadSecret func(namespace string) bool
	// SkipForbidden treats a Secret the API server refuses to give (403) as not read, instead
	// of failing: what the laptop commands do, so that a user who may not read a Secret gets the
	// digest the operator gets without that permission.
	SkipForbidden bool
	// Key is the HMAC key of the digest (LoadKey). Digest refuses sources without one
	// (ErrNoKey).
	Key []byte
}

// Result is what Digest found.
type Result struct {
	// Digest is the HMAC-SHA256 under Options.Key (64 lowercase hex digits) of the kinds,
	// names, prefixes, keys and data of the sources; "" when there are none.
	Digest string
	// Unread lists the Secrets whose data is not in Digest ("Secret <namespace>/<name>"), in
	// spec order; nil when every source was read.
	Unread []string
}

// unreadMarker stands in for the data of a Secret that is not read, so that reading it later
// (a permission granted) changes the digest and rolls the pods once.
const unreadMarker = "\x00unread"

// Digest reads the ConfigMaps and Secrets named in d.EnvFrom, in d.Namespace, and returns the
// HMAC-SHA256 under opts.Key of their kinds, names, prefixes, keys and data, so that a change
// of any of them changes the digest. A ConfigMap's Data and BinaryData count alike. It reads
// nothing when d has no envFrom. Secrets are read as opts says; one not read counts by its
// name only.
//
// The digest was once an unkeyed SHA-256: the first up of an object with envFrom sources after
// the operator's upgrade changes its pod template and rolls its pods once; the key is the same
// at each later reconcile, so nothing rolls again while the sources keep their data.
//
// Errors: ErrNoKey when d has envFrom sources and opts has no key; errors wrapping ErrMissing
// for an object that does not exist (the message says to create it or remove it from
// spec.envFrom), and otherwise the API error (forbidden, unreachable).
func EnvFromDigest(ctx context.Context, kube kubeclient.Interface, d api.Desired, opts Options) (Result, error) {
	if len(d.EnvFrom) == 0 {
		return Result{}, nil
	}
	if len(opts.Key) == 0 {
		return Result{}, ErrNoKey
	}
	var res Result
	h := hmac.New(sha256.New, opts.Key)
	write := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) } // length-prefixed: no ambiguity
	for _, ref := range d.EnvFrom {
		write(ref.Kind)
		write(ref.Name)
		write(ref.Prefix)
		if ref.Kind == api.EnvKindSecret && opts.ReadSecret != nil && !opts.ReadSecret(d.Namespace) {
			write(unreadMarker)
			res.Unread = append(res.Unread, ref.Kind+" "+d.Namespace+"/"+ref.Name)
			continue
		}
		data, err := read(ctx, kube, d.Namespace, ref)
		if err != nil {
			if ref.Kind == api.EnvKindSecret && opts.SkipForbidden && apierrors.IsForbidden(err) {
				write(unreadMarker)
				res.Unread = append(res.Unread, ref.Kind+" "+d.Namespace+"/"+ref.Name)
				continue
			}
			return Result{}, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			write(k)
			write(string(data[k]))
		}
	}
	res.Digest = hex.EncodeToString(h.Sum(nil))
	return res, nil
}

// read returns the data of the Secret or ConfigMap ref names in namespace ns.
func read(ctx context.Context, kube kubeclient.Interface, ns string, ref api.EnvRef) (map[string][]byte, error) {
	if ref.Kind == api.EnvKindSecret {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, readError(ref, ns, err)
		}
		return s.Data, nil
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, readError(ref, ns, err)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return data, nil
}

// readError says which envFrom source could not be read, and wraps ErrMissing when it does
// not exist.
func readError(ref api.EnvRef, ns string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s %s/%s named in spec.envFrom does not exist: create it or remove it from spec.envFrom",
			ErrMissing, ref.Kind, ns, ref.Name)
	}
	return fmt.Errorf("read %s %s/%s named in spec.envFrom: %w", ref.Kind, ns, ref.Name, err)
}

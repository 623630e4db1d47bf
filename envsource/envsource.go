// Package envsource computes the digest of a KindCustomHttp's spec.envFrom sources: the
// ConfigMaps and Secrets whose keys become the container's environment variables. The digest
// goes on the pod template (infra.EnvDigestAnnotation), so a change of their data rolls the
// pods although the spec is unchanged.
//
// The watcher (on every reconcile) and the commands (up, preview, ... run outside the
// cluster) both call Digest, so that they hand the program the same Desired and plan the same
// changes. The data itself goes nowhere: neither the Pulumi state nor logs see it, only its
// SHA-256.
package envsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// ErrMissing means a ConfigMap or Secret named in spec.envFrom does not exist (yet). The
// watcher retries it with backoff (reason EnvSourceMissing), and a change of that object
// enqueues the KindCustomHttp at once.
var ErrMissing = errors.New("envFrom source not found")

// Digest reads the ConfigMaps and Secrets named in d.EnvFrom, in d.Namespace, and returns the
// SHA-256 (64 lowercase hex digits) of their kinds, names, prefixes, keys and data, so that a
// change of any of them changes the digest. A ConfigMap's Data and BinaryData count alike.
// It returns "" and reads nothing when d has no envFrom.
//
// Errors wrap ErrMissing for an object that does not exist (the message says to create it or
// remove it from spec.envFrom), and otherwise the API error (forbidden, unreachable).
func Digest(ctx context.Context, kube kubernetes.Interface, d api.Desired) (string, error) {
	if len(d.EnvFrom) == 0 {
		return "", nil
	}
	h := sha256.New()
	write := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) } // length-prefixed: no ambiguity
	for _, ref := range d.EnvFrom {
		write(ref.Kind)
		write(ref.Name)
		write(ref.Prefix)
		data, err := read(ctx, kube, d.Namespace, ref)
		if err != nil {
			return "", err
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
	return hex.EncodeToString(h.Sum(nil)), nil
}

// read returns the data of the Secret or ConfigMap ref names in namespace ns.
func read(ctx context.Context, kube kubernetes.Interface, ns string, ref api.EnvRef) (map[string][]byte, error) {
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

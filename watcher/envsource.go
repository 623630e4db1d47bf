package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// ErrEnvSourceMissing means a ConfigMap or Secret named in spec.envFrom does not exist (yet).
// It is retried with backoff, and a change of that object enqueues the KindCustomHttp at once.
var ErrEnvSourceMissing = errors.New("envFrom source not found")

// EnvDigest reads the ConfigMaps and Secrets named in d.EnvFrom and returns the SHA-256 (hex)
// of their names and data, so that a change of the data changes the pod template. The data
// itself goes nowhere: neither the Pulumi state nor logs see it. "" when d has no envFrom.
// Errors wrap ErrEnvSourceMissing for an object that does not exist.
func EnvDigest(ctx context.Context, kube kubernetes.Interface, d api.Desired) (string, error) {
	if len(d.EnvFrom) == 0 {
		return "", nil
	}
	h := sha256.New()
	write := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) } // length-prefixed: no ambiguity
	for _, ref := range d.EnvFrom {
		write(ref.Kind)
		write(ref.Name)
		write(ref.Prefix)
		var data map[string][]byte
		switch ref.Kind {
		case api.EnvKindSecret:
			s, err := kube.CoreV1().Secrets(d.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return "", envSourceError(ref, d.Namespace, err)
			}
			data = s.Data
		default:
			cm, err := kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return "", envSourceError(ref, d.Namespace, err)
			}
			data = make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
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

func envSourceError(ref api.EnvRef, ns string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s %s/%s named in spec.envFrom does not exist: create it or remove it from spec.envFrom",
			ErrEnvSourceMissing, ref.Kind, ns, ref.Name)
	}
	return fmt.Errorf("read %s %s/%s named in spec.envFrom: %w", ref.Kind, ns, ref.Name, err)
}

// envFromIndex indexes KindCustomHttps by the envFrom sources they name ("Kind/ns/name").
const envFromIndex = "envFrom"

func envFromKeys(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "spec", "envFrom")
	var keys []string
	for _, e := range list {
		m, _ := e.(map[string]any)
		for field, kind := range map[string]string{"configMapRef": api.EnvKindConfigMap, "secretRef": api.EnvKindSecret} {
			if name, _, _ := unstructured.NestedString(m, field, "name"); name != "" {
				keys = append(keys, kind+"/"+u.GetNamespace()+"/"+name)
			}
		}
	}
	return keys, nil
}

// watchEnvSources starts metadata-only informers on ConfigMaps and Secrets (names and
// versions, never data, so the cache stays small and holds no secret) and enqueues every
// KindCustomHttp whose envFrom names a changed object.
func (w *Watcher) watchEnvSources(ctx context.Context, client metadata.Interface, resync time.Duration) []cache.InformerSynced {
	f := metadatainformer.NewFilteredSharedInformerFactory(client, resync, w.opts.Namespace, nil)
	var synced []cache.InformerSynced
	for kind, gvr := range map[string]schema.GroupVersionResource{
		api.EnvKindConfigMap: {Version: "v1", Resource: "configmaps"},
		api.EnvKindSecret:    {Version: "v1", Resource: "secrets"},
	} {
		inf := f.ForResource(gvr).Informer()
		enqueue := func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			m, ok := obj.(metav1.Object)
			if !ok {
				return
			}
			owners, _ := w.informer.GetIndexer().ByIndex(envFromIndex, kind+"/"+m.GetNamespace()+"/"+m.GetName())
			for _, o := range owners {
				w.enqueue(o)
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue,
		})
		synced = append(synced, inf.HasSynced)
	}
	f.Start(ctx.Done())
	return synced
}

package watcher

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

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

// watchEnvSources starts metadata-only informers on ConfigMaps, and on the Secrets of
// Options.SecretNamespaces, and enqueues every KindCustomHttp whose envFrom names a changed
// object. Their caches hold each object's namespace, name and resourceVersion only
// (envSourceStub), never data.
func (w *Watcher) watchEnvSources(ctx context.Context, client metadata.Interface, resync time.Duration) []cache.InformerSynced {
	var synced []cache.InformerSynced
	watch := func(kind string, gvr schema.GroupVersionResource, namespace string) {
		inf := metadatainformer.NewFilteredMetadataInformer(client, gvr, namespace, resync, cache.Indexers{}, nil).Informer()
		_ = inf.SetTransform(envSourceStub)
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
		go inf.Run(ctx.Done())
	}
	watch(api.EnvKindConfigMap, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, w.opts.Namespace)
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	for _, ns := range secretNamespaces(w.opts.Namespace, w.opts.SecretNamespaces) {
		watch(api.EnvKindSecret, secrets, ns)
	}
	return synced
}

// secretNamespaces are the namespaces to watch Secrets in, "" meaning all: those of secrets
// (Options.SecretNamespaces, "*" for all) within scope (Options.Namespace, "" for all).
func secretNamespaces(scope string, secrets []string) []string {
	if slices.Contains(secrets, "*") {
		return []string{scope}
	}
	var out []string
	for _, ns := range secrets {
		if ns != "" && (scope == "" || ns == scope) && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// envSourceStub is the envFrom informers' transform: each ConfigMap or Secret is cut to its
// namespace, name and resourceVersion, all that enqueueing its referrers needs. These informers
// see every ConfigMap in scope, anybody's: a tenant's labels, owner references and finalizers
// are not bounded in size by the API server (only the whole object is, at about 1.5 MiB), so
// keeping any of them would let a flood of ConfigMaps with large metadata grow the operator
// (test/tenants TestFloodOfLabelledLookAlikes). Objects that are not *metav1.PartialObjectMetadata
// pass unchanged.
func envSourceStub(obj any) (any, error) {
	o, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, ResourceVersion: o.ResourceVersion,
	}}, nil
}

// stripMetadata is an informer transform (cache.TransformFunc) that drops managedFields from
// every object, and the kubectl.kubernetes.io/last-applied-configuration annotation, which
// holds a whole copy of the object as it was applied: for a Secret that is its data, for the
// others memory the operator never reads. Objects that are not metav1.Objects pass
// unchanged. The informers hold the result, so it never modifies what it does not own: the
// object is the decoded one the reflector passes, not yet in any cache.
func stripMetadata() cache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return obj, nil
		}
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a != nil {
			if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
				delete(a, corev1.LastAppliedConfigAnnotation)
				m.SetAnnotations(a)
			}
		}
		return obj, nil
	}
}

package watcher

import (
	"context"
	"time"

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

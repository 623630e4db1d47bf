package commands

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// loadObjects reads the -f files, the --from-cluster object or, with --all, every object of the
// cluster through client.
func loadObjects(ctx context.Context, of *objectFlags, client dynamic.Interface) ([]api.Document, error) {
	files := of.files.Value()
	switch {
	case of.all && (of.fromCluster != "" || len(files) > 0):
		return nil, errors.New("give -f, --from-cluster or --all, one of them")
	case of.all:
		return clusterObjects(ctx, of, client)
	case of.fromCluster != "" && len(files) > 0:
		return nil, errors.New("give -f or --from-cluster, not both")
	case of.fromCluster == "":
		return api.LoadDocuments(files, api.LoadOptions{Namespace: of.namespace, IgnoreOtherKinds: of.ignoreOtherKinds})
	}
	ns, name, ok := strings.Cut(of.fromCluster, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--from-cluster %q: want NAMESPACE/NAME", of.fromCluster)
	}
	u, err := client.Resource(api.GroupVersionResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read KindCustomHttp %s from the cluster: %w", of.fromCluster, err)
	}
	obj, err := api.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	return []api.Document{{File: "cluster", Index: 1, Line: 1, Object: obj}}, nil
}

// clusterObjects lists every KindCustomHttp of the cluster (of of.namespace when it was given),
// in namespace/name order, leaving out those being deleted: their stacks are being destroyed.
// An object whose spec does not convert fails the whole list, naming it, as `preview -f` fails
// on such a document: a preview that left it out would report fewer changes than there are.
func clusterObjects(ctx context.Context, of *objectFlags, client dynamic.Interface) ([]api.Document, error) {
	ns := ""
	if of.namespaceGiven {
		ns = of.namespace
	}
	list, err := client.Resource(api.GroupVersionResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the cluster's KindCustomHttp objects: %w", err)
	}
	var docs []api.Document
	for i := range list.Items {
		u := &list.Items[i]
		if u.GetDeletionTimestamp() != nil {
			continue
		}
		obj, err := api.FromUnstructured(u)
		if err != nil {
			return nil, fmt.Errorf("KindCustomHttp %s/%s in the cluster: %w", u.GetNamespace(), u.GetName(), err)
		}
		docs = append(docs, api.Document{File: "cluster " + u.GetNamespace() + "/" + u.GetName(), Index: 1, Line: 1, Object: obj})
	}
	slices.SortFunc(docs, func(a, b api.Document) int { return strings.Compare(a.File, b.File) })
	return docs, nil
}

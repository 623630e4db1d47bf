package watcher

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"reflect"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// What the owned-object caches hold, and why it is bounded by what the operator owns.
//
// The informers select Deployments, Services and ConfigMaps by the managed-by label, which anybody
// who may create such an object in any namespace can set. A cache that held whatever carries the
// label would grow with every look-alike (a ConfigMap holds up to 1 MiB of data, any object up to
// 256 KiB of annotations), and a flood of them would grow the operator past its memory limit on
// every restart. So each object is passed through ownedTransform as it enters the cache (the
// informers list by watch-list, one object at a time, so an object is decoded and cut before the
// next one arrives):
//
//   - An object that is not named as the program names an object of a live KindCustomHttp (the
//     Deployment and Service <name>, the ConfigMap <name>-configmap, in the KindCustomHttp's
//     namespace, with its instance label) is cut to a stub: its name, namespace, UID,
//     resourceVersion, generation, deletion timestamp, the two labels and its first owner
//     references. The operator needs no
//     more of it; a flood of look-alikes costs a fixed few hundred bytes each.
//   - A ConfigMap of a live KindCustomHttp keeps its metadata, and its data is replaced by a
//     digest (dataDigestAnnotation): the drift check compares that with the declared data's, and
//     reads the object from the API server only when they differ.
//
// A stub of an object that becomes a live KindCustomHttp's (its KindCustomHttp created after it)
// is read from the API server until its next change replaces it in the cache.

// stubAnnotation marks a cached stub (never written to the cluster: it exists in the cache only).
const stubAnnotation = "pulumi-operator.internal/stub"

// dataDigestAnnotation holds, on a cached ConfigMap, the digest of the data it had (dataDigest);
// the data itself is not kept. Cache only, like stubAnnotation.
const dataDigestAnnotation = "pulumi-operator.internal/data-sha256"

// ownedTransform is the owned-object informers' transform (see above); live reports whether the
// KindCustomHttp namespace/name exists.
func ownedTransform(live func(namespace, name string) bool) cache.TransformFunc {
	strip := stripMetadata()
	return func(obj any) (any, error) {
		obj, _ = strip(obj)
		m, ok := obj.(metav1.Object)
		if !ok {
			return obj, nil
		}
		instance := m.GetLabels()[infra.LabelInstance]
		want := instance
		if isConfigMap(obj) {
			want = instance + api.ConfigMapSuffix
		}
		if instance == "" || m.GetName() != want || live == nil || !live(m.GetNamespace(), instance) {
			return stubOf(obj), nil
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			a := cm.Annotations
			if a == nil {
				a = map[string]string{}
			}
			a[dataDigestAnnotation] = dataDigest(cm.Data, cm.BinaryData)
			cm.Annotations, cm.Data, cm.BinaryData = a, nil, nil
		}
		return obj, nil
	}
}

// stubOf is obj (a Deployment, Service or ConfigMap) cut to a stub; anything else unchanged.
func stubOf(obj any) any {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj
	}
	meta := metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		Generation: m.GetGeneration(), DeletionTimestamp: m.GetDeletionTimestamp(),
		Labels:      map[string]string{infra.LabelManagedBy: m.GetLabels()[infra.LabelManagedBy], infra.LabelInstance: m.GetLabels()[infra.LabelInstance]},
		Annotations: map[string]string{stubAnnotation: "true"},
		// The owner references say whose an object is (on-missing-stack=orphan|delete acts only on
		// a KindCustomHttp's own); a few are kept, a longer list cut (such an object is then
		// nobody's here: left alone).
		OwnerReferences: slices.Clone(m.GetOwnerReferences()[:min(len(m.GetOwnerReferences()), maxStubOwners)]),
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &appsv1.Deployment{ObjectMeta: meta}
	case *corev1.Service:
		return &corev1.Service{ObjectMeta: meta}
	case *corev1.ConfigMap:
		return &corev1.ConfigMap{ObjectMeta: meta}
	case *metav1.PartialObjectMetadata:
		return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: meta}
	}
	return obj
}

// maxStubOwners bounds the owner references a stub keeps.
const maxStubOwners = 4

// isConfigMap reports whether obj is a ConfigMap, typed or as metadata only.
func isConfigMap(obj any) bool {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return true
	case *metav1.PartialObjectMetadata:
		return o.Kind == "ConfigMap" || o.Kind == ""
	}
	return false
}

// isStub reports whether m is a cached stub (ownedTransform).
func isStub(m metav1.Object) bool {
	if m == nil || reflect.ValueOf(m).IsNil() { // a nil *Deployment in the interface: absent
		return false
	}
	return m.GetAnnotations()[stubAnnotation] != ""
}

// dataDigest is the SHA-256 of a ConfigMap's data and binary data, each key and value length-
// prefixed in key order, hex.
func dataDigest(data map[string]string, binaryData map[string][]byte) string {
	h := sha256.New()
	write := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		write([]byte(k))
		write([]byte(data[k]))
	}
	h.Write([]byte{0})
	for _, k := range slices.Sorted(maps.Keys(binaryData)) {
		write([]byte(k))
		write(binaryData[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// comparableConfigMap is cm, a cached ConfigMap, as the drift check compares it with d's declared data
// want: when the digest it carries is want's, a copy holding want (the same data); else cm as it
// is (its data absent, so the check finds a difference and reads the object live). A ConfigMap
// without a digest (not from the cache) is returned as is.
func comparableConfigMap(cm *corev1.ConfigMap, want map[string]string) *corev1.ConfigMap {
	if cm == nil {
		return nil
	}
	d, ok := cm.Annotations[dataDigestAnnotation]
	if !ok || d != dataDigest(want, nil) {
		return cm
	}
	c := cm.DeepCopy()
	c.Data = want
	return c
}

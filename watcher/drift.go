package watcher

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// drift lists how the live objects differ from d, in the fields the program sets and people
// change by hand (replicas, image, ports, service type, ConfigMap data, existence). The cache
// may lag behind an up that just ran, so a difference seen there is confirmed with a live read
// before it counts: no false repair, and no API call while nothing differs. digest is d's
// (Watcher.digest): with it and the cached objects' versions as at the last check that found
// them in sync, nothing is compared again (compare is the dearest part of an idle reconcile,
// BenchmarkIdleReconcile).
func (o *ownedObjects) drift(ctx context.Context, digest string, d api.Desired) []string {
	key := cache.ObjectName{Namespace: d.Namespace, Name: d.Name}
	dep, _ := o.deployments.Deployments(d.Namespace).Get(d.Name)
	svc, _ := o.services.Services(d.Namespace).Get(d.Name)
	cmMeta := o.configMap(d.Namespace, d.ConfigMapName())
	at, ok := versions(digest, dep, svc, cmMeta)
	if last, found := o.inSync.Load(key); ok && found && last.(syncedAt) == at {
		return nil
	}
	// The cache holds a ConfigMap's metadata only (or its data as a digest), and look-alikes as
	// stubs (ownedcache.go): a stub, or a ConfigMap whose data the cache does not have, is never
	// compared there; the live read below decides.
	cm, typed := cmMeta.(*corev1.ConfigMap)
	// What the program declares, built once for both comparisons below (infra.Build reflects
	// over the SDK's arguments, the costliest step of a check that reads no object).
	want := infra.Build(d)
	if typed && !isStub(dep) && !isStub(svc) && !isStub(cm) &&
		len(compare(d, want, dep, svc, comparableConfigMap(cm, want.ConfigMap.Data))) == 0 {
		if ok {
			o.inSync.Store(key, at)
		}
		return nil
	}
	o.inSync.Delete(key)
	dep, svc, cm = nil, nil, nil
	if x, err := o.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil {
		dep = x
	} else if !apierrors.IsNotFound(err) {
		return nil // cannot tell now; the next event or resync looks again
	}
	if x, err := o.kube.CoreV1().Services(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil {
		svc = x
	} else if !apierrors.IsNotFound(err) {
		return nil
	}
	if x, err := o.kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, d.ConfigMapName(), metav1.GetOptions{}); err == nil {
		cm = x
	} else if !apierrors.IsNotFound(err) {
		return nil
	}
	diffs := compare(d, want, dep, svc, cm)
	if len(diffs) == 0 {
		// In sync as read live: remembered by the live versions, which the cache shows once it
		// has caught up, so that the next checks need no read (a cache that only holds a
		// ConfigMap's metadata needs one per change of it).
		if at, ok := versions(digest, dep, svc, cm); ok {
			o.inSync.Store(key, at)
		}
	}
	return diffs
}

// compare is drift's pure part; nil objects are missing ones. It compares each live object with
// want, what the program declares for d (infra.Build(d), which tests hold equal to Declare field
// for field): the Deployment's and the Service's labels and spec, the ConfigMap's labels and data.
// Every field Declare sets counts, and only those (declaredDiff): what the apiserver defaults or
// assigns (probe timeouts, a NodePort, the ClusterIP) and what others add beside the declared
// fields (an annotation of `kubectl rollout restart`, a label) are not drift, because an up
// would not change them either. The ConfigMap's data is the exception: it must hold exactly
// the declared keys (undeclaredKey). The metadata beyond labels is left out: the provider keeps
// its own annotations out of what it applies.
func compare(d api.Desired, want infra.Objects, dep *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap) []string {
	var diffs []string
	check := func(what string, live bool, pairs ...any) {
		if !live {
			diffs = append(diffs, what+" deleted")
			return
		}
		for i := 0; i < len(pairs); i += 3 {
			path := pairs[i].(string)
			opaque := strings.HasPrefix(what, "ConfigMap ") && path == "data"
			if diff, ok := declaredDiff(path, reflect.ValueOf(pairs[i+1]), reflect.ValueOf(pairs[i+2]), opaque); !ok {
				diffs = append(diffs, what+" "+diff)
				return
			}
		}
	}
	if dep != nil {
		check("Deployment "+d.Name, true, "metadata.labels", want.Deployment.Labels, dep.Labels, "spec", want.Deployment.Spec, dep.Spec)
	} else {
		check("Deployment "+d.Name, false)
	}
	if svc != nil {
		check("Service "+d.Name, true, "metadata.labels", want.Service.Labels, svc.Labels, "spec", want.Service.Spec, svc.Spec)
	} else {
		check("Service "+d.Name, false)
	}
	if cm != nil {
		before := len(diffs)
		check("ConfigMap "+d.ConfigMapName(), true, "metadata.labels", want.ConfigMap.Labels, cm.Labels, "data", want.ConfigMap.Data, cm.Data)
		if diff, ok := undeclaredKey("data", want.ConfigMap.Data, cm.Data); !ok && len(diffs) == before {
			diffs = append(diffs, "ConfigMap "+d.ConfigMapName()+" "+diff)
		}
	} else {
		check("ConfigMap "+d.ConfigMapName(), false)
	}
	return diffs
}

// undeclaredKey reports whether live has no key that want lacks, naming the first such key
// otherwise ("data[extra.txt] is not declared"). The ConfigMap's data is the whole of
// spec.configMapData, not a set of fields among others': a key an earlier spec had, left by an up
// that was killed before it removed it, or added by hand, reaches the pods as a file.
func undeclaredKey(path string, want, live map[string]string) (string, bool) {
	keys := make([]string, 0, len(live))
	for k := range live {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "", true
	}
	slices.Sort(keys)
	return fmt.Sprintf("%s[%s] is not declared", path, keys[0]), false
}

// declaredDiff reports whether live has every field that want (a declared value) sets, with the
// same value: a zero scalar, a nil pointer and an empty string, slice or map in want are not
// set, but a value behind a set pointer is (replicas 0, a false flag); a set slice must be no
// longer than live's and match it element by element, a set map must have each of its keys in
// live. When a field differs it returns where, as a JSON path under path, with both values
// ("spec.replicas is 5, want 2"), each clipped (quote); opaque says the values are not to be
// quoted at all, only their sizes ("data[k] differs: 9 bytes, want 3 bytes"), which is how a
// ConfigMap's data is reported. The message and its path are built only then, as it runs for
// every object on each resync.
//
// Hand-written because apimachinery's equality.Semantic.DeepDerivative, which has these rules
// otherwise, compares zero numbers too: a probe's timeoutSeconds, which Declare leaves unset
// and the apiserver sets to 1, would be drift on every object.
func declaredDiff(path string, want, live reflect.Value, opaque bool) (string, bool) {
	m := derive(want, live, false)
	if m == nil {
		return "", true
	}
	return m.String(path, opaque), false
}

// quoteLimit is how many bytes of a value a drift message quotes (quote). Drift messages go
// into Events, whose message the apiserver keeps in etcd and shows to whoever may list Events
// in the namespace, and into the operator's log; a value may be a whole ConfigMap file of up to
// the object size limit. The bound keeps an image reference or a label whole in the common case.
const quoteLimit = 64

// quote is v as a drift message shows it: fmt's %v, cut to at most quoteLimit bytes (at a rune
// boundary) with "… (N bytes)" after it when it is longer, N its whole length.
func quote(v any) string {
	s := fmt.Sprint(v)
	if len(s) <= quoteLimit {
		return s
	}
	cut := quoteLimit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// size is the length in bytes of v as fmt's %v writes it: what an opaque drift message says
// of a value instead of quoting it.
func size(v any) int {
	if s, ok := v.(string); ok {
		return len(s)
	}
	return len(fmt.Sprint(v))
}

// mismatch is where derive found a declared field that differs: the path below the compared
// value, outermost last (prepended as derive returns), and what differs.
type mismatch struct {
	rev        []string // path elements, innermost first: ".name", "[0]", "[key]"
	what       string   // "is", "missing", "unset", "items"
	live, want any
}

func (m *mismatch) at(elem string) *mismatch { m.rev = append(m.rev, elem); return m }

// String is the message for a mismatch under path, its values clipped (quote), or, opaque,
// given only by their sizes in bytes.
func (m *mismatch) String(path string, opaque bool) string {
	var b strings.Builder
	b.WriteString(path)
	for i := len(m.rev) - 1; i >= 0; i-- {
		b.WriteString(m.rev[i])
	}
	switch {
	case m.what == "missing":
		return b.String() + " is missing"
	case m.what == "items":
		return fmt.Sprintf("%s has %v items, want %v", b.String(), m.live, m.want)
	case m.what == "unset" && opaque:
		return fmt.Sprintf("%s is unset, want %d bytes", b.String(), size(m.want))
	case m.what == "unset":
		return fmt.Sprintf("%s is unset, want %s", b.String(), quote(m.want))
	case opaque:
		return fmt.Sprintf("%s differs: %d bytes, want %d bytes", b.String(), size(m.live), size(m.want))
	}
	return fmt.Sprintf("%s is %s, want %s", b.String(), quote(m.live), quote(m.want))
}

// derive is declaredDiff's walk; explicit marks a value reached through a set pointer, which
// counts even when zero.
func derive(want, live reflect.Value, explicit bool) *mismatch {
	switch want.Kind() {
	case reflect.Pointer, reflect.Interface:
		if want.IsNil() {
			return nil
		}
		if live.IsNil() {
			return &mismatch{what: "unset", want: want.Elem().Interface()}
		}
		return derive(want.Elem(), live.Elem(), true)
	case reflect.Struct:
		t := want.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if m := derive(want.Field(i), live.Field(i), false); m != nil {
				if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" { // an inline struct's fields are its parent's
					m.at("." + name)
				}
				return m
			}
		}
		return nil
	case reflect.Slice:
		if want.Len() == 0 {
			return nil
		}
		if want.Len() > live.Len() {
			return &mismatch{what: "items", live: live.Len(), want: want.Len()}
		}
		for i := range want.Len() {
			if m := derive(want.Index(i), live.Index(i), false); m != nil {
				return m.at(fmt.Sprintf("[%d]", i))
			}
		}
		return nil
	case reflect.Map:
		for it := want.MapRange(); it.Next(); {
			lv := live.MapIndex(it.Key())
			if !lv.IsValid() {
				return (&mismatch{what: "missing"}).at(fmt.Sprintf("[%v]", it.Key().Interface()))
			}
			if m := derive(it.Value(), lv, false); m != nil {
				return m.at(fmt.Sprintf("[%v]", it.Key().Interface()))
			}
		}
		return nil
	default:
		if (!explicit && want.IsZero()) || want.Equal(live) {
			return nil
		}
		return &mismatch{what: "is", live: live.Interface(), want: want.Interface()}
	}
}

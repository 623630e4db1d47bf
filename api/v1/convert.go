package v1

import (
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"
)

func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// FromUnstructured converts an object from the dynamic client or a YAML file into a
// KindCustomHttp. It fails, naming the field, when the apiVersion or kind is not
// groupsp.measutosh.dev/v1 KindCustomHttp, when a field has the wrong type, or when a field is
// unknown (a typo such as "replicas" would otherwise be silently dropped). It does not
// validate values: see Validate.
func FromUnstructured(u *unstructured.Unstructured) (*KindCustomHttp, error) {
	if u == nil || u.Object == nil {
		return nil, fmt.Errorf("convert KindCustomHttp: empty object")
	}
	if gvk := u.GroupVersionKind(); gvk != GroupVersionKind {
		return nil, fmt.Errorf("convert KindCustomHttp: apiVersion %q kind %q is not %s %s",
			u.GetAPIVersion(), u.GetKind(), GroupVersion.String(), Kind)
	}
	// Through JSON with sigs.k8s.io/json, the decoder the apiserver itself uses: its errors
	// name the field path (spec.port) and its strict mode reports unknown fields, where
	// runtime.DefaultUnstructuredConverter only says "unrecognized type".
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("convert KindCustomHttp %s: %w", describe(u), err)
	}
	obj := &KindCustomHttp{}
	strict, err := kjson.UnmarshalStrict(b, obj)
	if err != nil {
		return nil, fmt.Errorf("convert KindCustomHttp %s: %w", describe(u), err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("convert KindCustomHttp %s: %w", describe(u), errors.Join(strict...))
	}
	return obj, nil
}

package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

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
	obj := &KindCustomHttp{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, obj, true); err != nil {
		return nil, fmt.Errorf("convert KindCustomHttp %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return obj, nil
}

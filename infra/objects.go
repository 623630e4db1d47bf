package infra

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	k8sappsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Build returns the objects Declare declares for d as client-go types, with every field Declare
// sets and no other: the program's inputs, before the apiserver defaults anything. It is what
// the controller compares the live objects with to find drift (hand-made changes), for every
// declared field, without Pulumi.
//
// It reads the one description Declare registers (describe): each SDK argument, a plain value,
// is taken by its `pulumi` tag, which is the Kubernetes API's JSON name, and the result decoded
// into the client-go type. TestBuildIsDeclare and FuzzProgram hold it equal to what Declare
// sends the engine (Expected). It panics only if describe ever declares a value that is not
// plain (an output of another resource), which those tests would show at once.
func Build(d api.Desired) Objects {
	args := describe(d)
	objs := Objects{ConfigMap: &k8scorev1.ConfigMap{}, Deployment: &k8sappsv1.Deployment{}, Service: &k8scorev1.Service{}}
	decode(args.ConfigMap, objs.ConfigMap)
	decode(args.Deployment, objs.Deployment)
	decode(args.Service, objs.Service)
	return objs
}

// decode fills into, a client-go object, from args, SDK arguments of plain values, by
// apimachinery's converter from the JSON-shaped value plain makes: no JSON text in between.
func decode(args, into any) {
	var err error
	if m, ok := plain(reflect.ValueOf(args)).(map[string]any); ok {
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
	} else {
		err = fmt.Errorf("%T is no Args struct", args)
	}
	if err != nil {
		panic(fmt.Sprintf("infra: the description does not decode into %T: %v", into, err))
	}
}

// plain is v, an SDK argument (an Args struct of inputs, a map, an array or a scalar input such
// as pulumi.String), as the JSON value it stands for; nil for an input not set.
func plain(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return plain(v.Elem())
	case reflect.Struct:
		names, ok := fieldNames(v)
		if !ok {
			break
		}
		m := map[string]any{}
		for i, name := range names {
			if name == "" {
				continue
			}
			if x := plain(v.Field(i)); x != nil {
				m[name] = x
			}
		}
		return m
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = plain(it.Value())
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		s := make([]any, v.Len())
		for i := range s {
			s[i] = plain(v.Index(i))
		}
		return s
	case reflect.String:
		return v.String()
	case reflect.Int, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Bool:
		return v.Bool()
	case reflect.Float64:
		return v.Float()
	}
	panic(fmt.Sprintf("infra: %s is not a plain input", v.Type()))
}

// argFields holds, by Args type, fieldNames' answer, so that a Build looks no field up by name
// and parses no tag.
var argFields sync.Map // reflect.Type -> []string

// fieldNames gives, for v, an Args struct of the SDK, the JSON name of each of its fields by
// index, "" for a field to leave out; false when v is no pulumi.Input. An Args struct's fields
// are untagged; its element type (the plain struct it stands for, as the SDK marshals it) has
// the same field names with the `pulumi` tags.
func fieldNames(v reflect.Value) ([]string, bool) {
	t := v.Type()
	if names, ok := argFields.Load(t); ok {
		return names.([]string), true
	}
	in, ok := v.Interface().(pulumi.Input)
	if !ok {
		return nil, false
	}
	elem := in.ElementType()
	for elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	names := make([]string, t.NumField())
	for i := range names {
		if f, ok := elem.FieldByName(t.Field(i).Name); ok {
			names[i], _, _ = strings.Cut(f.Tag.Get("pulumi"), ",")
		}
	}
	argFields.Store(t, names)
	return names, true
}

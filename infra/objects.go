package infra

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	k8sappsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"

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

// decode fills into, a client-go object, from args, SDK arguments of plain values.
func decode(args, into any) {
	b, err := json.Marshal(plain(reflect.ValueOf(args)))
	if err == nil {
		err = json.Unmarshal(b, into)
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
		// An Args struct's fields are untagged; its element type (the plain struct it stands
		// for, as the SDK marshals it) has the same field names with the `pulumi` tags.
		in, ok := v.Interface().(pulumi.Input)
		if !ok {
			break
		}
		elem := in.ElementType()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		m := map[string]any{}
		for i := range v.NumField() {
			f, ok := elem.FieldByName(v.Type().Field(i).Name)
			tag, _, _ := strings.Cut(f.Tag.Get("pulumi"), ",")
			if !ok || tag == "" {
				continue
			}
			if x := plain(v.Field(i)); x != nil {
				m[tag] = x
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

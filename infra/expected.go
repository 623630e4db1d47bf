package infra

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	k8sappsv1 "k8s.io/api/apps/v1"
	k8scorev1 "k8s.io/api/core/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Objects are the Kubernetes objects Declare asks the provider to make for one Desired, as
// client-go types: the program's inputs, before the apiserver defaults anything (Build,
// Expected).
type Objects struct {
	ConfigMap  *k8scorev1.ConfigMap
	Deployment *k8sappsv1.Deployment
	Service    *k8scorev1.Service
}

// Expected runs Declare for d against Pulumi's mocks, in this process (nothing is sent
// anywhere, no engine or provider runs), and returns what it declared, decoded into client-go
// types. Tests use it for "live" objects that are what an up leaves, independent of Build (which
// TestBuildIsDeclare holds to Declare). It runs the Pulumi SDK's program machinery, which costs
// far more per call than Build (BenchmarkExpected, BenchmarkBuild); the controller uses Build.
// Errors: Declare's own (none for a resolved Desired), or inputs that do not decode into the
// client-go types (a bug here).
func Expected(d api.Desired) (Objects, error) {
	m := &captureMocks{inputs: map[string]map[string]any{}}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := Declare(ctx, d)
		return err
	}, pulumi.WithMocks(api.Singular, "expected", m))
	if err != nil {
		return Objects{}, fmt.Errorf("declare the objects of %s/%s: %w", d.Namespace, d.Name, err)
	}
	var objs Objects
	for typ, into := range map[string]any{
		"kubernetes:core/v1:ConfigMap":  &objs.ConfigMap,
		"kubernetes:apps/v1:Deployment": &objs.Deployment,
		"kubernetes:core/v1:Service":    &objs.Service,
	} {
		in, ok := m.inputs[typ]
		if !ok {
			return Objects{}, fmt.Errorf("declare the objects of %s/%s: no %s declared", d.Namespace, d.Name, typ)
		}
		// The inputs' names are the Kubernetes API's JSON names.
		b, err := json.Marshal(in)
		if err == nil {
			err = json.Unmarshal(b, into)
		}
		if err != nil {
			return Objects{}, fmt.Errorf("decode the declared %s of %s/%s: %w", typ, d.Namespace, d.Name, err)
		}
	}
	return objs, nil
}

// captureMocks records the inputs of every resource a program registers, by type token, and
// answers with them as outputs.
type captureMocks struct {
	mu     sync.Mutex
	inputs map[string]map[string]any
}

func (m *captureMocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inputs[args.TypeToken] = args.Inputs.Mappable()
	return args.Name, args.Inputs, nil
}

func (m *captureMocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return args.Args, nil
}

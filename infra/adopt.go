package infra

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Adopt names the objects of a Desired that exist in the cluster and that an up takes into its
// stack by Pulumi import (the resource option `import`) instead of creating them: the engine
// reads the live object into the stack's state, then updates it only where it differs from
// what Declare declares, in the same up. An object the stack already holds under the same ID
// is not imported again (the engine ignores the option then), so declaring an import is safe
// on every up of an object that asks for it (api.OnMissingStackAdopt). The import ID is the
// Kubernetes provider's, "<namespace>/<name>".
//
// One rule of Pulumi's comes with it: a resource declared with an import ID may not be
// replaced (the engine refuses the up, "previously-imported resources that still specify an
// ID may not be replaced"). The program replaces an object only on a change its API forbids in
// place (a Service's clusterIP), which no spec field of a KindCustomHttp makes.
type Adopt struct {
	ConfigMap, Deployment, Service bool
	// Only leaves every imported object as it is (the resource option ignoreChanges on every
	// input): the up imports and changes nothing, which is how a delete rebuilds a lost stack
	// before destroying it.
	Only bool
}

// Any reports whether a names at least one object.
func (a Adopt) Any() bool { return a.ConfigMap || a.Deployment || a.Service }

// ProgramAdopting is Program with the objects adopt names imported (DeclareAdopting).
func ProgramAdopting(d api.Desired, adopt Adopt) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		_, err := DeclareAdopting(ctx, d, adopt)
		return err
	}
}

// importOpts are the resource options that import the object namespace/name when want is set:
// none otherwise, so that a registration without adoption stays byte for byte what stacks
// already hold.
func importOpts(want, only bool, namespace, name string) []pulumi.ResourceOption {
	if !want {
		return nil
	}
	opts := []pulumi.ResourceOption{pulumi.Import(pulumi.ID(namespace + "/" + name))}
	if only {
		opts = append(opts, pulumi.IgnoreChanges([]string{"*"}))
	}
	return opts
}

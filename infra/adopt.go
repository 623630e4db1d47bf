package infra

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Adopt names the objects of a Desired that exist in the cluster and that an up takes into its
// stack by Pulumi import (the resource option `import`) instead of creating them: the engine
// reads the live object into the stack's state, then updates it only where it differs from
// what Declare declares, in the same up (api.OnMissingStackAdopt). The import ID is the
// Kubernetes provider's, "<namespace>/<name>".
//
// An adopting program is for a stack that does not hold the objects: the watcher and the
// commands run it only on a stack the operation creates (stack.RunOptions.Adopt). On a stack
// that holds an object under the same ID the engine would ignore the import, but Pulumi also
// refuses to replace a resource declared with an import ID ("previously-imported resources
// that still specify an ID may not be replaced"), and a spec change replaces the Service (a
// serviceType between Headless and the others changes its clusterIP).
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

package infra

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// Adopt names the objects of a Desired that exist in the cluster and that an up takes into a
// stack that lost them, by Pulumi import (the resource option `import`, with ignoreChanges on
// every input): the engine reads each live object into the stack's state and changes nothing.
// That is how a delete whose stack is missing rebuilds it before destroying it
// (api.OnMissingStackAdopt). The import ID is the Kubernetes provider's, "<namespace>/<name>".
//
// Only for a stack about to be destroyed: the provider applies objects by server-side apply
// under a field manager of its own, and an import reads an object with a new one, which owns
// none of its fields, so the imported inputs hold only the object's name. The next up of the
// program would then see every field added, and the Deployment's selector added is a
// replacement (TestImportRebuildsLostStack shows Pulumi refusing it). A living object's lost
// stack is rebuilt by its next up instead: the provider's upsert applies the same spec over the
// live objects, which changes none of them.
type Adopt struct {
	ConfigMap, Deployment, Service bool
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

// importOpts are the resource options that import the object namespace/name and change nothing
// of it when want is set; none otherwise, so that a registration without adoption stays byte for
// byte what stacks already hold.
func importOpts(want bool, namespace, name string) []pulumi.ResourceOption {
	if !want {
		return nil
	}
	return []pulumi.ResourceOption{pulumi.Import(pulumi.ID(namespace + "/" + name)), pulumi.IgnoreChanges([]string{"*"})}
}

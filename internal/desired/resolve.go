package desired

import (
	"context"
	"errors"
	"fmt"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// ErrNoCluster means an object names envFrom sources but no cluster was given to read them
// from: a manifest used without a kubeconfig.
var ErrNoCluster = errors.New("spec.envFrom needs the cluster")

// Resolved is a KindCustomHttp as the program needs it.
type Resolved struct {
	// Desired is api.Resolve's desired state with EnvDigest filled in from the cluster.
	Desired api.Desired
	// Unread lists the Secrets whose data is not in the digest (Result.Unread).
	Unread []string
}

// Resolve is the one path from a KindCustomHttp, a live object or one read from a manifest, to
// what the program applies: its validated, defaulted Desired (api.Resolve) with the digest of
// its envFrom sources (Digest, read as opts says). The controller, the laptop commands and the
// plain-CLI program all call it, so that for one object they declare the same pod template and
// plan the same changes.
//
// cluster gives the client to read the sources with; it is called only when obj names some,
// so a manifest without envFrom needs no cluster. A nil cluster, or one that fails, is an
// error wrapping ErrNoCluster for an object with envFrom.
//
// Errors: an *api.InvalidSpecError when the spec must change (nothing is read then);
// otherwise Digest's errors (ErrMissing for a source that does not exist, the API's for one
// that cannot be read), or ErrNoCluster.
func Resolve(ctx context.Context, obj *api.KindCustomHttp, cluster func() (kubeclient.Interface, error), opts Options) (Resolved, error) {
	d, err := api.Resolve(obj)
	if err != nil {
		return Resolved{}, err
	}
	if len(d.EnvFrom) == 0 {
		return Resolved{Desired: d}, nil
	}
	if cluster == nil {
		return Resolved{}, ErrNoCluster
	}
	kube, err := cluster()
	if err != nil {
		return Resolved{}, fmt.Errorf("%w: %w", ErrNoCluster, err)
	}
	res, err := EnvFromDigest(ctx, kube, d, opts)
	if err != nil {
		return Resolved{}, err
	}
	d.EnvDigest = res.Digest
	return Resolved{Desired: d, Unread: res.Unread}, nil
}

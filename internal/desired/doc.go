// Package desired resolves a KindCustomHttp into the desired state an up applies: Resolve
// validates the object (api.Resolve) and fills in the digest of its spec.envFrom sources, the
// ConfigMaps and Secrets whose keys become the container's environment variables
// (EnvFromDigest). The digest goes on the pod template (infra.EnvDigestAnnotation), so a change
// of their data rolls the pods although the spec is unchanged.
//
// The watcher (on every reconcile), the commands (up, preview, ... run outside the cluster) and
// the program mode all call Resolve, so that they hand the program the same Desired and plan
// the same changes. The data itself goes nowhere: neither the Pulumi state nor logs see it,
// only its HMAC under this installation's key (LoadKey), which the pod template shows to
// whoever may view the Deployment: an unkeyed hash would let them test guesses of a Secret's
// data.
package desired

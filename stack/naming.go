package stack

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxStackNameLength is the longest stack name Pulumi accepts (its stack names match
// [A-Za-z0-9_.-]{1,100}).
const MaxStackNameLength = 100

// nameHashLength is how many hex digits of a SHA-256 replace the tail of a stack name that
// would be too long: 16 digits (64 bits) make a collision between two CRs negligible.
const nameHashLength = 16

// Name returns the stack of the KindCustomHttp namespace/name in the cluster called cluster.
//
// The rule: "<cluster>.<namespace>.<name>". All three parts are DNS labels (lower-case
// letters, digits and '-', no '.'), so the dots separate them unambiguously and two different
// CRs never share a stack, whether they differ by namespace, by name or by cluster (several
// clusters may share one backend). The name depends only on the CR's identity, never on its
// UID or on the operator's process, so it is the same after a restart and the same for the
// commands (up, preview, ...). When the result would exceed MaxStackNameLength it is cut to
// MaxStackNameLength-17 characters and "-" plus the first 16 hex digits of the SHA-256 of the
// full name are appended. It fails when a part is not a DNS label.
func Name(cluster, namespace, name string) (string, error) {
	for _, p := range []struct{ what, v string }{{"cluster name", cluster}, {"namespace", namespace}, {"name", name}} {
		if msgs := validation.IsDNS1123Label(p.v); len(msgs) > 0 {
			return "", fmt.Errorf("derive stack name: %s %q: %s", p.what, p.v, msgs[0])
		}
	}
	full := cluster + "." + namespace + "." + name
	if len(full) <= MaxStackNameLength {
		return full, nil
	}
	sum := sha256.Sum256([]byte(full))
	return full[:MaxStackNameLength-nameHashLength-1] + "-" + hex.EncodeToString(sum[:])[:nameHashLength], nil
}

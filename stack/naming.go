package stack

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxStackNameLength is the longest stack name Pulumi accepts (its stack names match
// [A-Za-z0-9_.-]{1,100}).
const MaxStackNameLength = 100

// nameHashLength is how many hex digits of a SHA-256 replace the tail of a stack name that
// would be too long: 16 digits, 64 bits. Claiming another object's shortened name would take a
// second SHA-256 preimage of 64 bits for that object's full name (about 2^64 hashes); two names
// that a birthday search makes share a hash (about 2^32) are both the searcher's own, in
// namespaces whose objects the searcher may write anyway.
const nameHashLength = 16

// hashMarker joins a shortened stack name's prefix to its hash. No DNS label, and so no name
// Name leaves whole, holds it: the shortened names and the whole ones are disjoint sets.
const hashMarker = '_'

// legacyHashMarker is what joined the prefix and the hash before hashMarker did: '-', which a
// DNS label may hold, so that a shortened name could also be another object's whole name
// (LegacyName).
const legacyHashMarker = '-'

// Name returns the stack of the KindCustomHttp namespace/name in the cluster called cluster.
//
// The rule: "<cluster>.<namespace>.<name>". All three parts are DNS labels (lower-case
// letters, digits and '-', no '.'), so the dots separate them unambiguously and two different
// CRs never share a stack, whether they differ by namespace, by name or by cluster (several
// clusters may share one backend). The name depends only on the CR's identity, never on its
// UID or on the operator's process, so it is the same after a restart and the same for the
// commands (up, preview, ...). When the result would exceed MaxStackNameLength it is cut to
// MaxStackNameLength-17 characters and "_" plus the first 16 hex digits of the SHA-256 of the
// full name are appended: a DNS label never holds '_', so no object's whole name is another
// object's shortened one. (Names made before used '-' there: LegacyName.) It fails when a part
// is not a DNS label.
func Name(cluster, namespace, name string) (string, error) {
	full, err := fullName(cluster, namespace, name)
	if err != nil || len(full) <= MaxStackNameLength {
		return full, err
	}
	return shorten(full, hashMarker), nil
}

// LegacyName is the name that the rule before Name's gave a stack that Name shortens: the same
// prefix and hash joined by '-'. Such a name is also a whole name that Name gives another
// object when the prefix cut its name part (a CR in the same namespace whose name is the tail
// after the second dot), so that both shared one stack. "" when Name leaves the name whole:
// those never changed. Errors are Name's.
func LegacyName(cluster, namespace, name string) (string, error) {
	full, err := fullName(cluster, namespace, name)
	if err != nil || len(full) <= MaxStackNameLength {
		return "", err
	}
	return shorten(full, legacyHashMarker), nil
}

// legacyNameOf is LegacyName for a stack that Name named stackName: stackName with its
// hashMarker turned back into legacyHashMarker, "" for a name Name left whole (one without
// hashMarker).
func legacyNameOf(stackName string) string {
	i := strings.IndexByte(stackName, hashMarker)
	if i < 0 {
		return ""
	}
	return stackName[:i] + string(legacyHashMarker) + stackName[i+1:]
}

// fullName is "<cluster>.<namespace>.<name>" after checking that each part is a DNS label.
func fullName(cluster, namespace, name string) (string, error) {
	for _, p := range []struct{ what, v string }{{"cluster name", cluster}, {"namespace", namespace}, {"name", name}} {
		if msgs := validation.IsDNS1123Label(p.v); len(msgs) > 0 {
			return "", fmt.Errorf("derive stack name: %s %q: %s", p.what, p.v, msgs[0])
		}
	}
	return cluster + "." + namespace + "." + name, nil
}

// shorten cuts full to MaxStackNameLength characters: its prefix, marker and nameHashLength
// hex digits of its SHA-256.
func shorten(full string, marker byte) string {
	sum := sha256.Sum256([]byte(full))
	return full[:MaxStackNameLength-nameHashLength-1] + string(marker) + hex.EncodeToString(sum[:])[:nameHashLength]
}

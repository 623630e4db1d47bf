package watcher

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// TestUnitClipMessage: a condition message over the CRD's 32768-byte limit (which would make
// the apiserver reject the whole status write) is cut at a rune boundary and marked; shorter
// messages are kept as they are.
func TestUnitClipMessage(t *testing.T) {
	for name, tc := range map[string]struct {
		msg     string
		clipped bool
	}{
		"empty":                 {msg: "", clipped: false},
		"at the limit":          {msg: strings.Repeat("a", maxConditionMessage), clipped: false},
		"one byte over":         {msg: strings.Repeat("a", maxConditionMessage+1), clipped: true},
		"multi-byte runes over": {msg: strings.Repeat("é", maxConditionMessage), clipped: true},
	} {
		t.Run(name, func(t *testing.T) {
			got := clipMessage(tc.msg)
			if !tc.clipped {
				if got != tc.msg {
					t.Fatalf("message of %d bytes changed to %d bytes", len(tc.msg), len(got))
				}
				return
			}
			if len(got) > maxConditionMessage {
				t.Errorf("clipped message is %d bytes, over %d", len(got), maxConditionMessage)
			}
			if !utf8.ValidString(got) {
				t.Error("clipped message is not valid UTF-8 (cut inside a rune)")
			}
			if !strings.HasSuffix(got, " [...]") || !strings.HasPrefix(tc.msg, strings.TrimSuffix(got, " [...]")) {
				t.Errorf("clipped message is not a marked prefix of the original: ...%q", got[len(got)-20:])
			}
		})
	}
	var st api.KindCustomHttpStatus
	setCondition(&st, 1, api.ConditionStalled, metav1.ConditionTrue, api.ReasonInvalidSpec, strings.Repeat("x", 40000))
	if n := len(st.Conditions[0].Message); n > maxConditionMessage {
		t.Errorf("setCondition stored a %d-byte message", n)
	}
}

// TestRolloutReasonIsTheAPIs: the reason internal/rollout gives a rollout under way is the
// condition reason api/v1 documents, since setReadiness passes it through unchanged.
func TestRolloutReasonIsTheAPIs(t *testing.T) {
	if rollout.ReasonReplicasUnavailable != api.ReasonReplicasUnavailable {
		t.Fatalf("rollout says %q, api/v1 documents %q", rollout.ReasonReplicasUnavailable, api.ReasonReplicasUnavailable)
	}
}

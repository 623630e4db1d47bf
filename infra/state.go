package infra

import (
	"bytes"
	"encoding/json"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// StateOverheadBytes is what a stack's checkpoint holds besides the spec's own values: the
// stack, provider and three resource entries with their URNs, the objects' metadata as the
// API server returns it (uid, managedFields, timestamps), the Deployment's defaulted fields and
// the secrets provider's salt. A stack of an object with empty configMapData and no envFrom
// holds less than this (stack/state_budget_test.go measures it on a real stack).
const StateOverheadBytes = 48 << 10

// EstimateStateBytes is how many bytes the checkpoint of d's stack holds, reckoned from the
// spec before any up: StateOverheadBytes plus three times d as JSON. The checkpoint holds every
// value the program declares three times: the resource's inputs, its outputs, and the inputs
// again that the Kubernetes provider keeps among the outputs (`__inputs`), JSON-escaped as
// Pulumi writes it (quotes, backslashes and control characters; not <, > and &), so that 1 MiB
// of configMapData costs about 3 MiB of state. It errs high, never low, so that a budget it
// fits is not outgrown (stack/state_budget_test.go checks it against real stacks). Each
// history entry of a DIY backend holds one more checkpoint.
func EstimateStateBytes(d api.Desired) int64 {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Desired holds strings, numbers, booleans and string maps only: Encode cannot fail.
	_ = enc.Encode(d)
	return StateOverheadBytes + 3*int64(b.Len())
}

// HistoryWithin is how many updates a stack may keep in its history under a state budget of
// budget bytes when its checkpoint is about stateBytes (EstimateStateBytes). A DIY backend
// keeps, per stack, the state, the state before its last save (<stack>.json.bak) and one
// checkpoint per history entry (stack/history.go), and an up writes its own entry before the
// prune that follows it, so at the peak a stack holds n+3 checkpoints: (3+n)·stateBytes ≤
// budget, with n at least 1. 0 when even that does not fit (four checkpoints exceed the budget:
// the object is over it) or when budget is 0 (no budget: the caller's own history depth
// applies).
func HistoryWithin(budget, stateBytes int64) int {
	if budget <= 0 || stateBytes <= 0 {
		return 0
	}
	n := budget/stateBytes - 3
	if n < 1 {
		return 0
	}
	if n > 1<<20 {
		n = 1 << 20
	}
	return int(n)
}

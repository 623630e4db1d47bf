package stack

import (
	"context"
	"log/slog"
	"strings"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// engineHostCanServe reports whether the engine host can run the stacks of backend with
// secretsProvider (Config.SecretsProvider) as the CLI would: a DIY backend (not Pulumi Cloud,
// whose API makes stacks and runs updates) and the passphrase secrets provider, whose salt the
// Manager writes (salt.go) and the first up records; a KMS provider's key is made at `stack
// init` (cloud.NewCloudSecretsManager), which the host does not do. Pulumi Cloud is told apart
// by Backend.Kind; the host applies pkg/v3's own rule itself.
func engineHostCanServe(backend Backend, secretsProvider string) bool {
	return backend.Kind != BackendCloud && secretsProvider == "passphrase"
}

// initStack creates stackName with the engine host (starting one when none runs): the same
// pkg/v3 code as `pulumi stack init`, without a CLI process or a key derivation. created: the
// host made it; exists: it was there already. Both false when there is no engine host or it
// failed: the caller then goes the CLI's way (`pulumi stack init`, `stack select`), which
// reports what is wrong in the CLI's words, so that a lock or an unreachable backend keeps its
// one classification (classify). A failure other than a cancellation is logged as a warning.
func (m *Manager) initStack(ctx context.Context, stackName string) (created, exists bool) {
	if m.engineHost == nil {
		return false, false
	}
	r, err := m.hostRequest(ctx, protocol.Request{Op: protocol.OpInit, Stack: stackName})
	switch {
	case err == nil && r.Code == 0:
		return r.Created, !r.Created
	case ctx.Err() != nil:
		return false, false
	default:
		slog.Warn("the engine host could not create the stack; creating it with `pulumi stack init`", "stack", stackName,
			"error", err, "kind", r.Kind, "output", RedactText(strings.TrimSpace(r.Stdout+"\n"+r.Stderr)))
		return false, false
	}
}

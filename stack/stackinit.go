package stack

import (
	"context"
	"errors"
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

// initStack creates stackName with the engine host's code (protocol.OpInit through engine.request: the
// engine host, or without one a pinned CLI process): the same pkg/v3 code as `pulumi stack init`,
// without its key derivation (the Manager writes the salt: writeSalt). created: it made the stack;
// exists: it was there already. Both false when that code cannot serve the stack (Pulumi Cloud, a
// secrets provider other than the passphrase: engineHostCanServe), when no request can be made,
// or when it failed: the caller then goes the CLI's way (`pulumi stack init`, `stack select`),
// whose failure is diagnosed as any other. A failure other than a cancellation is logged as a
// warning.
func (m *Manager) initStack(ctx context.Context, stackName string) (created, exists bool) {
	if !engineHostCanServe(m.backend, m.cfg.SecretsProvider) {
		return false, false
	}
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpInit, Stack: stackName})
	switch {
	case err == nil && r.Code == 0:
		return r.Created, !r.Created
	case ctx.Err() != nil || errors.Is(err, errNoRequests):
		return false, false
	default:
		slog.Warn("the engine host could not create the stack; creating it with `pulumi stack init`", "stack", stackName,
			"error", err, "kind", r.Kind, "output", RedactText(strings.TrimSpace(r.Stdout+"\n"+r.Stderr)))
		return false, false
	}
}

package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// One typed path for what is not an engine run. Creating a stack, pruning its history, reading
// and removing its locks and diagnosing a failed run are protocol.Requests answered by the engine
// host's code (agent/enginehost run) in one of two ways, the same request and reply either way:
// a call to the engine host process when the Manager has one, or else one pinned CLI process per
// request, `pulumi operator-request` (protocol.RequestCommand), the same code in the same binary
// (--engine-host none, or no engine host beside the CLI). Ups are the engine host's Up call or the
// CLI's own `pulumi up` (engine.go).

// errNoRequests marks a request that nothing here can answer: on Pulumi Cloud (no DIY backend),
// or with a pulumi CLI that is not this project's build (it has no request command) and no engine
// host. The callers then do without (a CLI command of Pulumi's own, or nothing).
var errNoRequests = errors.New("no engine host, and the pulumi CLI has no operator requests")

// request sends req (any Op but protocol.OpUp) to the engine host, or without one runs it as the
// pinned CLI's protocol.RequestCommand, and returns the reply, which may be a failure's (Code
// non-zero, with its Kind). Errors: errNoRequests; no reply could be had (ctx ended, the fence
// refused, the host could not be started or died, the process printed none).
func (m *Manager) request(ctx context.Context, req protocol.Request) (protocol.Reply, error) {
	switch {
	case m.engineHost != nil:
		return m.hostRequest(ctx, req)
	case m.backend.Kind == BackendCloud || m.noOperatorRequests.Load():
		return protocol.Reply{}, errNoRequests
	}
	in, _ := json.Marshal(req) // a Request always marshals
	stdout, stderr, code, err := m.cmd.Run(ctx, m.cfg.WorkRoot, bytes.NewReader(in), nil, nil, m.runEnv(), protocol.RequestCommand, m.cfg.Project)
	var r protocol.Reply
	if derr := json.NewDecoder(strings.NewReader(stdout)).Decode(&r); derr == nil && r.Code == code {
		return r, nil
	}
	if err != nil && code > 0 && ctx.Err() == nil {
		// It ran and printed no reply: not this project's build (ours prints one whatever the
		// outcome; a process killed, by its lease among others, has no exit code).
		if !m.noOperatorRequests.Swap(true) {
			slog.Warn("this pulumi CLI is not the project's build (it has no `pulumi "+protocol.RequestCommand+"`): "+
				"new stacks are made with `pulumi stack init`, history is not pruned, a failed run is not diagnosed, and only `pulumi cancel` removes locks",
				"pulumi", m.cfg.PulumiPath, "exit", code, "stderr", RedactText(strings.TrimSpace(stderr)))
		}
		return protocol.Reply{}, errNoRequests
	}
	return protocol.Reply{}, fmt.Errorf("run `pulumi %s` (%s): no reply (exit %d): %v", protocol.RequestCommand, req.Op, code, err)
}

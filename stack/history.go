package stack

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// What a DIY backend keeps of a stack besides its state, and how the Manager bounds it:
//
//   - the history, an update record and a copy of the checkpoint per update
//     (.pulumi/history/<project>/<stack>/): no Pulumi setting bounds it, so the Manager prunes
//     it to Config.KeepHistory updates (prune), always with the engine host's code (package
//     agent/enginehost), the one place that deletes backend files: a request to the engine
//     host when the Manager has one, else the pinned CLI's `pulumi operator-request`
//     (protocol.RequestCommand, cliPerRun.request). Newest is Pulumi's own order, the update time in
//     each file's name, never a file's modification time (agent/enginehost/prune.go);
//   - the backups, one more copy of the checkpoint per update (.pulumi/backups/...): the
//     checkpoint right after the update, which the history's copy holds too, so the Manager
//     turns them off with Pulumi's own setting (backupsOff in New's environment);
//   - <stack>.json.bak beside the state, the state before its last save: one per stack, which
//     `pulumi destroy --remove` leaves behind (and the backups), so a stack is removed with
//     `pulumi stack rm --remove-backups` instead (removeStack), which deletes all of the
//     stack's files.

// backupsOff is the DIY backend's setting that stops its per-update checkpoint backups
// (pkg/v3 backend/diy state.go backupStack; sdk go/common/env DIYBackendDisableCheckpointBackups).
const backupsOff = "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS"

// prune asks the engine host's code (request: the host, or without one a pinned CLI process) to
// keep only the newest updates of stackName's history and backups that opts allows (Manager.keep: its KeepHistory,
// else Config.KeepHistory), after an operation that ran as a CLI process: best effort (the
// operation has succeeded; the next prune catches up), so failures are only logged. Nothing
// happens on Pulumi Cloud or with a depth of 0.
func (m *Manager) prune(ctx context.Context, stackName string, opts RunOptions) {
	keep, budgeted := m.keep(opts)
	if m.backend.Kind == BackendCloud || keep < 1 || (!budgeted && !m.pruneDue(stackName)) {
		return
	}
	r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpPrune, Stack: stackName, Keep: keep})
	if errors.Is(err, errNoRequests) {
		return // said once (cliPerRun.request)
	}
	if err != nil {
		slog.Warn("could not prune the stack's history", "stack", stackName, "error", err)
		return
	}
	if r.Code != 0 {
		r.PruneError = strings.TrimSpace(r.Stderr)
	}
	reportPrune(stackName, r)
}

// pruneDue reports whether an up or refresh of stackName that ran as a CLI process should prune
// its history now: every engine.pruneEvery-th time per stack (counted in this process): always
// with an engine host, else every KeepHistory-th, so that each prune's process is paid once per
// KeepHistory ups and the history holds at most twice KeepHistory updates.
func (m *Manager) pruneDue(stackName string) bool {
	every := m.eng.pruneEvery()
	if every <= 1 {
		return true
	}
	m.unprunedMu.Lock()
	defer m.unprunedMu.Unlock()
	if m.unpruned == nil {
		m.unpruned = map[string]int{}
	}
	m.unpruned[stackName]++
	if m.unpruned[stackName] < every {
		return false
	}
	delete(m.unpruned, stackName)
	return true
}

// reportPrune logs what pruning did for the reply r of stackName: a warning when it failed.
func reportPrune(stackName string, r protocol.Reply) {
	switch {
	case r.PruneError != "":
		slog.Warn("could not prune the stack's history", "stack", stackName, "error", RedactText(r.PruneError))
	case r.Pruned > 0:
		slog.Debug("pruned the stack's history and backups", "stack", stackName, "files", r.Pruned)
	}
}

// removeStack removes stackName, which must hold no resources any more, from the backend with
// every file the backend keeps of it: `pulumi stack rm --yes --remove-backups`. Errors: the
// run's *cliError (a lock, a stack still holding resources, an unreachable backend).
func (m *Manager) removeStack(ctx context.Context, stackName string) error {
	stdout, stderr, code, err := m.cmd.Run(ctx, filepath.Join(m.cfg.WorkRoot, stackName), nil, nil, nil, m.runEnv(),
		"stack", "rm", "--yes", "--remove-backups", "--stack", stackName)
	if err != nil {
		return &cliError{op: "stack rm", code: code, stdout: stdout, stderr: stderr, err: err}
	}
	return nil
}

// runEnv is what a CLI run of the Manager adds to its environment, as KEY=value: cliEnv's and
// PULUMI_HOME.
func (m *Manager) runEnv() []string {
	env := make([]string, 0, len(m.env)+2)
	for k, v := range m.cliEnv() {
		env = append(env, k+"="+v)
	}
	if m.cfg.PulumiHome != "" {
		env = append(env, "PULUMI_HOME="+m.cfg.PulumiHome)
	}
	return env
}

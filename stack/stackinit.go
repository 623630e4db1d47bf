package stack

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// StackInitHelper is the file name of the stack-init helper, pulumi-operator-stack-init
// (hack/tools/pulumi/stackinit, built by `make build` into bin/ and shipped in the image
// beside the pulumi CLI). It creates a stack in a DIY backend as `pulumi stack init` does,
// through the same pkg/v3 code, in about 0.13 s instead of the CLI's 0.4–0.5 s: no CLI start
// and no passphrase key derivation (see its package comment); the Manager writes the stack's
// salt (salt.go). A new object's up is then one CLI run, the engine's, which derives the key
// once, like any later up.
const StackInitHelper = "pulumi-operator-stack-init"

// NoStackInitHelper as Config.StackInit turns the helper off: new stacks are made by
// `pulumi stack init`.
const NoStackInitHelper = "none"

// stackInitHelper resolves Config.StackInit (see there) for cfg, whose BackendURL and
// PulumiPath are already checked: the helper's absolute path, or "" when new stacks are
// made by `pulumi stack init`. An explicit path that does not exist is an error, so that a
// typo fails at start instead of costing a CLI run per new stack unnoticed.
func stackInitHelper(cfg Config) (string, error) {
	if cfg.StackInit == NoStackInitHelper || !helperCanCreate(cfg) {
		return "", nil
	}
	if cfg.StackInit != "" {
		abs, err := filepath.Abs(cfg.StackInit)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			return "", fmt.Errorf("configure stack manager: stack-init helper: %w (build it with `make build`, or leave it unset)", err)
		}
		return abs, nil
	}
	beside, err := filepath.Abs(filepath.Join(filepath.Dir(cfg.PulumiPath), StackInitHelper))
	if err != nil {
		return "", nil
	}
	if _, err := os.Stat(beside); err != nil {
		return "", nil
	}
	return beside, nil
}

// helperCanCreate reports whether the helper can make cfg's stacks as `pulumi stack init`
// would: a DIY backend (not Pulumi Cloud, whose API makes stacks) and the passphrase secrets
// provider, whose salt the first up makes. A KMS provider's key is made at `stack init`
// (cloud.NewCloudSecretsManager), which the helper does not do. Pulumi Cloud is told apart by
// its http(s) scheme, the rule of pkg/v3 backend/diy IsDIYBackendURL (every other scheme is a
// bucket's), which the operator does not link; the helper applies that function itself.
func helperCanCreate(cfg Config) bool {
	u, err := url.Parse(cfg.BackendURL)
	return err == nil && u.Scheme != "http" && u.Scheme != "https" && cfg.SecretsProvider == "passphrase"
}

// initStack creates stackName with the engine host when one runs (initStackInHost), else with
// the stack-init helper. created: the helper made it;
// exists: it was there already. Both false when there is no helper or it failed: the caller
// then goes the CLI's way (`pulumi stack init`, `stack select`), which reports what is wrong
// in the CLI's words (a lock, an unreachable backend), so that every error a user can meet
// keeps the one classification (classify). A failure is logged as a warning with the
// helper's error.
func (m *Manager) initStack(ctx context.Context, stackName string) (created, exists bool) {
	if created, exists, ok := m.initStackInHost(ctx, stackName); ok {
		return created, exists
	}
	if m.stackInit == "" {
		return false, false
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, m.stackInit, m.cfg.Project, stackName)
	cmd.Env = without(operatorEnv(), m.drop)
	for k, v := range m.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// In the environment, not on the command line, which anyone on the host can read: a
	// PostgreSQL URL holds the database password.
	cmd.Env = append(cmd.Env, "PULUMI_BACKEND_URL="+m.cfg.BackendURL)
	if m.cfg.PulumiHome != "" {
		cmd.Env = append(cmd.Env, "PULUMI_HOME="+m.cfg.PulumiHome)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch out := strings.TrimSpace(stdout.String()); {
	case err == nil && out == "created":
		slog.Debug("stack created by the stack-init helper", "stack", stackName, "seconds", time.Since(start).Seconds())
		return true, false
	case err == nil && out == "exists":
		return false, true
	case ctx.Err() != nil:
		return false, false
	default:
		slog.Warn("the stack-init helper failed; creating the stack with `pulumi stack init`", "stack", stackName,
			"helper", m.stackInit, "error", err, "output", RedactText(strings.TrimSpace(stdout.String()+"\n"+stderr.String())))
		return false, false
	}
}

// initStackInHost is initStack's work done by the engine host, when one is running already (a
// burst's later objects; the first one's up starts it): the helper's code without a process of
// its own (~0.1 CPU s less per new object). ok is false when there is no running host or it
// failed (logged): the caller then runs the helper.
func (m *Manager) initStackInHost(ctx context.Context, stackName string) (created, exists, ok bool) {
	if m.engineHost == nil || !m.engineHost.running() {
		return false, false, false
	}
	phrase, err := m.passphrase(filepath.Join(m.cfg.WorkRoot, stackName))
	if err != nil {
		return false, false, false
	}
	r, err := m.engineHost.do(ctx, engineRequest{Op: "init", Stack: stackName}, phrase, m.engineHostEnv)
	switch out := strings.TrimSpace(r.Stdout); {
	case err == nil && r.Code == 0 && out == "created":
		return true, false, true
	case err == nil && r.Code == 0 && out == "exists":
		return false, true, true
	case ctx.Err() != nil:
		return false, false, false
	default:
		slog.Warn("the engine host could not create the stack; trying the stack-init helper", "stack", stackName,
			"error", err, "output", RedactText(strings.TrimSpace(r.Stdout+"\n"+r.Stderr)))
		return false, false, false
	}
}

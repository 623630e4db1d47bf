// Package stack runs Pulumi through the Automation API: one stack per KindCustomHttp, each
// in a workspace directory of its own, against one backend. It is the only package that
// imports Pulumi's auto package.
package stack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrename"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/pulumi-operator/pulumi-operator/infra"
)

// PinnedCLIVersion is the pulumi CLI version the project builds (hack/tools/pulumi) and tests
// against. A different CLI works if it is at least the Automation API's minimum; New logs
// nothing about it, callers may compare Manager.CLIVersion.
const PinnedCLIVersion = "3.255.0"

// Sentinel errors; test with errors.Is.
var (
	// ErrNoPassphrase means the passphrase secrets provider is in use but neither
	// PULUMI_CONFIG_PASSPHRASE nor PULUMI_CONFIG_PASSPHRASE_FILE is set. Without this check
	// the CLI would fail late with a less clear message.
	ErrNoPassphrase = errors.New("no passphrase for stack secrets: set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE (a file holding it, e.g. mounted from a Kubernetes Secret)")
	// ErrLocked means another update (a laptop up, a second operator) holds the stack's lock.
	// It is a wait, not a failure: retry later.
	ErrLocked = errors.New("stack is locked by another update")
	// ErrPluginMissing means the engine could not find a resource provider plugin (the
	// Kubernetes provider) and may not download one.
	ErrPluginMissing = errors.New("a Pulumi resource provider plugin is not installed")
	// ErrBackendUnavailable means the CLI could not open the state backend (a PostgreSQL
	// server down or refusing the password, an S3 endpoint unreachable): nothing ran, the
	// state is as it was; retry later. The error's text names the backend, without password.
	ErrBackendUnavailable = errors.New("the state backend is unavailable")
)

// Config says how to reach the pulumi CLI and the backend. The zero value is not usable: set
// at least Project, BackendURL, WorkRoot and PulumiPath.
type Config struct {
	// Project is the Pulumi project name (Pulumi.yaml "name"), e.g. "pulumi-operator".
	Project string
	// BackendURL is where state lives: file:///abs/dir, postgres://..., s3://..., or
	// https://api.pulumi.com. A file:// directory is created if missing.
	BackendURL string
	// WorkRoot is a local directory; each stack gets WorkRoot/<stack name> as its workspace
	// directory, so concurrent stacks never share workspace files.
	WorkRoot string
	// PulumiPath is the pulumi CLI binary to run.
	PulumiPath string
	// PulumiHome is the CLI's PULUMI_HOME: where it finds plugins (the Kubernetes provider)
	// and keeps its workspace settings. Empty takes DefaultPulumiHome(PulumiPath).
	PulumiHome string
	// SecretsProvider is "passphrase" (the default when empty) or a KMS URL
	// (awskms://..., gcpkms://..., ...). Only "passphrase" needs a passphrase.
	SecretsProvider string
	// Env is added to the CLI's environment (and so to the provider plugins'), e.g. KUBECONFIG.
	Env map[string]string
	// Progress, when not nil, receives the CLI's progress output of every operation.
	Progress io.Writer
	// ClusterName identifies the Kubernetes cluster in stack names (see Name): a DNS label,
	// by default derived from the kube-system namespace's UID by the caller.
	ClusterName string
}

// Manager runs Pulumi operations on the stacks of one project and backend. It is safe for
// concurrent use on different stacks; operations on one stack are serialized by Pulumi's
// lock (a second concurrent one fails with ErrLocked).
type Manager struct {
	cfg Config
	cmd auto.PulumiCommand
	env map[string]string

	mu sync.Mutex
	// settled holds the stacks known to hold no pending operation of a dead update (see
	// settlePending).
	settled map[string]bool
}

// New checks cfg and the pulumi CLI (it runs `pulumi version` once) and returns a Manager.
// It fails with ErrNoPassphrase when a passphrase is needed and not given, and when the CLI
// cannot be run or is older than the Automation API supports.
func New(cfg Config) (*Manager, error) {
	if cfg.Project == "" {
		return nil, errors.New("configure stack manager: empty Pulumi project name")
	}
	if err := tokens.ValidateProjectName(cfg.Project); err != nil {
		return nil, fmt.Errorf("configure stack manager: project name %q: %w", cfg.Project, err)
	}
	if cfg.SecretsProvider == "" {
		cfg.SecretsProvider = "passphrase"
	}
	if err := checkSecretsProvider(cfg.SecretsProvider); err != nil {
		return nil, err
	}
	if cfg.SecretsProvider == "passphrase" && !hasPassphrase(cfg.Env) {
		return nil, ErrNoPassphrase
	}
	if cfg.WorkRoot == "" {
		return nil, errors.New("configure stack manager: empty workspace root directory")
	}
	if msgs := validation.IsDNS1123Label(cfg.ClusterName); len(msgs) > 0 {
		return nil, fmt.Errorf("configure stack manager: cluster name %q: %s", cfg.ClusterName, msgs[0])
	}
	backend, err := prepareBackend(cfg.BackendURL)
	if err != nil {
		return nil, err
	}
	cfg.BackendURL = backend
	cmd, err := pulumiCommand(cfg.PulumiPath, cfg.WorkRoot)
	if err != nil {
		return nil, err
	}
	if cfg.PulumiHome == "" {
		cfg.PulumiHome = DefaultPulumiHome(cfg.PulumiPath)
	}
	env := map[string]string{
		// No network here and none wanted: never look for CLI updates, never download a
		// plugin behind the user's back (a missing one is reported as ErrPluginMissing).
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		"PULUMI_DIY_BACKEND_NO_LEGACY_WARNING":        "true",
	}
	for k, v := range infra.ProviderEnv() {
		env[k] = v
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	return &Manager{cfg: cfg, cmd: cmd, env: env, settled: map[string]bool{}}, nil
}

// CLIVersion is the version of the pulumi CLI the Manager runs.
func (m *Manager) CLIVersion() semver.Version { return m.cmd.Version() }

// Project is the Pulumi project name.
func (m *Manager) Project() string { return m.cfg.Project }

// QualifiedName is how status shows a stack: "<project>/<stack>".
func (m *Manager) QualifiedName(stack string) string { return m.cfg.Project + "/" + stack }

func hasPassphrase(env map[string]string) bool {
	for _, k := range []string{"PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE"} {
		if _, ok := env[k]; ok {
			return true
		}
		if _, ok := os.LookupEnv(k); ok {
			return true
		}
	}
	return false
}

// secretsProviderSchemes are the KMS URL schemes the pulumi CLI takes as a secrets provider
// (pkg/secrets/cloud: gocloud.dev/secrets drivers, and hashivault).
var secretsProviderSchemes = []string{"awskms", "azurekeyvault", "gcpkms", "hashivault"}

// checkSecretsProvider accepts "passphrase", "default" (Pulumi Cloud's own) and a KMS URL, so
// that a typo fails at start instead of at the first `stack init`.
func checkSecretsProvider(p string) error {
	if p == "passphrase" || p == "default" {
		return nil
	}
	if u, err := url.Parse(p); err == nil && slices.Contains(secretsProviderSchemes, u.Scheme) {
		return nil
	}
	return fmt.Errorf("configure stack manager: secrets provider %q: want passphrase, default (Pulumi Cloud) or a KMS URL (%s://...)",
		p, strings.Join(secretsProviderSchemes, "://, "))
}

// prepareBackend checks the backend URL and creates a file:// backend's directory.
func prepareBackend(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("configure stack manager: empty backend URL")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("configure stack manager: backend URL %q: want file:///dir, postgres://, s3://, gs://, azblob:// or https://", RedactURL(raw))
	}
	if u.Scheme != "file" {
		return raw, nil
	}
	dir := u.Path
	if u.Host != "" && u.Host != "localhost" { // file://relative/dir
		dir = filepath.Join(u.Host, u.Path)
	}
	if dir == "" {
		return "", fmt.Errorf("configure stack manager: backend URL %q names no directory", raw)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("configure stack manager: backend directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("create backend directory: %w", err)
	}
	return "file://" + abs, nil
}

// RedactURL hides a password in a URL so it can appear in errors and logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// pulumiCommand wraps the CLI at path. The Automation API expects the binary at
// <root>/bin/pulumi; when path is laid out otherwise, a symlink under workRoot provides that
// shape.
func pulumiCommand(path, workRoot string) (auto.PulumiCommand, error) {
	if path == "" {
		return nil, errors.New("configure stack manager: no pulumi CLI path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolve pulumi CLI path: %w", err)
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("find pulumi CLI: %w (build it with `make tools`, or pass --pulumi)", err)
	}
	root := filepath.Dir(filepath.Dir(abs))
	if filepath.Base(filepath.Dir(abs)) != "bin" || filepath.Base(abs) != "pulumi" {
		root = filepath.Join(workRoot, ".pulumi-cli")
		link := filepath.Join(root, "bin", "pulumi")
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return nil, fmt.Errorf("link pulumi CLI: %w", err)
		}
		_ = os.Remove(link)
		if err := os.Symlink(abs, link); err != nil {
			return nil, fmt.Errorf("link pulumi CLI: %w", err)
		}
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root})
	if err != nil {
		return nil, fmt.Errorf("run pulumi CLI %s: %w", abs, err)
	}
	return cmd, nil
}

// Result describes one finished operation.
type Result struct {
	// Operation is "up", "preview" or "destroy".
	Operation string
	Start     time.Time
	End       time.Time
	// Changes counts resources by kind of change: "create", "update", "delete", "same", ...
	Changes map[string]int
	// Outputs are the stack outputs after an up, secrets shown as "[secret]".
	Outputs map[string]string
	// Recovered says, one line per entry, what became of the pending operations a killed
	// update had left in the stack before this operation ran (see settlePending); nil when
	// there were none.
	Recovered []string
}

// Changed reports whether the operation created, updated, replaced or deleted anything.
func (r Result) Changed() bool {
	for op, n := range r.Changes {
		if op != string(apitype.OpSame) && n > 0 {
			return true
		}
	}
	return false
}

func (m *Manager) workspaceOptions(stackName string, program pulumi.RunFunc) ([]auto.LocalWorkspaceOption, error) {
	dir := filepath.Join(m.cfg.WorkRoot, stackName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace directory: %w", err)
	}
	proj := workspace.Project{
		Name:    tokens.PackageName(m.cfg.Project),
		Runtime: workspace.NewProjectRuntimeInfo("go", nil),
		Backend: &workspace.ProjectBackend{URL: m.cfg.BackendURL},
	}
	opts := []auto.LocalWorkspaceOption{
		auto.WorkDir(dir),
		auto.Pulumi(m.cmd),
		auto.Project(proj),
		auto.SecretsProvider(m.cfg.SecretsProvider),
		auto.EnvVars(m.env),
		auto.Program(program),
	}
	if m.cfg.PulumiHome != "" {
		opts = append(opts, auto.PulumiHome(m.cfg.PulumiHome))
	}
	return opts, nil
}

func (m *Manager) open(ctx context.Context, stackName string, program pulumi.RunFunc, create bool) (auto.Stack, error) {
	opts, err := m.workspaceOptions(stackName, program)
	if err != nil {
		return auto.Stack{}, err
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return auto.Stack{}, fmt.Errorf("open workspace of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	// auto.UpsertStack does the same select-then-create; written out to know whether the
	// stack is new, and so holds no pending operation.
	st, err := auto.SelectStack(ctx, stackName, ws)
	if err != nil && create && auto.IsSelectStack404Error(err) {
		if st, err = auto.NewStack(ctx, stackName, ws); err == nil {
			m.recordSettled(stackName)
		}
	}
	if err != nil {
		if !create && auto.IsSelectStack404Error(err) {
			// Looking must not leave a workspace behind for a stack that does not exist.
			_ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName))
		}
		return auto.Stack{}, err
	}
	return st, nil
}

// streams is where an operation's progress goes: opts.Progress, else Config.Progress, else
// nowhere (the CLI is then told to suppress it).
func (m *Manager) streams(opts RunOptions) []io.Writer {
	switch {
	case opts.Progress != nil:
		return []io.Writer{opts.Progress}
	case m.cfg.Progress != nil:
		return []io.Writer{m.cfg.Progress}
	}
	return nil
}

func colorOf(opts RunOptions) string {
	if opts.Color == "" {
		return "never"
	}
	return opts.Color
}

// StackName is the stack of the KindCustomHttp namespace/name in this Manager's cluster (see
// Name for the rule).
func (m *Manager) StackName(namespace, name string) (string, error) {
	return Name(m.cfg.ClusterName, namespace, name)
}

// RunOptions change how an operation runs. The zero value: no refresh, no diff, progress to
// Config.Progress (or suppressed).
type RunOptions struct {
	// Refresh reads the live objects into the state before diffing (`pulumi up --refresh`), so
	// that changes made outside Pulumi (drift) are seen and undone. It costs one read per
	// resource.
	Refresh bool
	// Diff shows a detailed diff of every change in the progress output (`--diff`).
	Diff bool
	// Progress receives this operation's progress output instead of Config.Progress.
	Progress io.Writer
	// Color is the CLI's --color: "always", "never" (the default) or "auto".
	Color string
}

// Up creates the stack if needed and runs `pulumi up` with program (for a KindCustomHttp:
// infra.Program of its Desired, on the stack StackName names). Errors: ErrLocked
// when another update holds the lock, ErrPluginMissing when a provider plugin is absent,
// otherwise the CLI's error, trimmed to its "error:" lines.
func (m *Manager) Up(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "up", Start: time.Now()}
	st, err := m.open(ctx, stackName, program, true)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if res.Recovered, err = m.settlePending(ctx, st, stackName); err != nil {
		return res, err
	}
	o := []optup.Option{optup.Color(colorOf(opts))}
	if w := m.streams(opts); w != nil {
		o = append(o, optup.ProgressStreams(w...))
	} else {
		o = append(o, optup.SuppressProgress())
	}
	if opts.Refresh {
		o = append(o, optup.Refresh())
	}
	if opts.Diff {
		o = append(o, optup.Diff())
	}
	up, err := st.Up(ctx, o...)
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return res, fmt.Errorf("up stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if up.Summary.ResourceChanges != nil {
		res.Changes = *up.Summary.ResourceChanges
	}
	res.Outputs = make(map[string]string, len(up.Outputs))
	for k, v := range up.Outputs {
		if v.Secret {
			res.Outputs[k] = "[secret]"
			continue
		}
		res.Outputs[k] = fmt.Sprint(v.Value)
	}
	return res, nil
}

// Preview runs `pulumi preview` of program against the stack, changing nothing. A stack that does not
// exist yet is created for the preview and removed again, so a preview leaves the backend as
// it found it; it previews as all creates.
func (m *Manager) Preview(ctx context.Context, stackName string, program pulumi.RunFunc, opts RunOptions) (Result, error) {
	res := Result{Operation: "preview", Start: time.Now()}
	existed, err := m.Exists(ctx, stackName)
	if err != nil {
		return res, err
	}
	st, err := m.open(ctx, stackName, program, true)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if !existed {
		defer func() {
			_ = st.Workspace().RemoveStack(context.WithoutCancel(ctx), stackName)
			_ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName))
		}()
	}
	o := []optpreview.Option{optpreview.Color(colorOf(opts))}
	if w := m.streams(opts); w != nil {
		o = append(o, optpreview.ProgressStreams(w...))
	} else {
		o = append(o, optpreview.SuppressProgress())
	}
	if opts.Refresh {
		o = append(o, optpreview.Refresh())
	}
	if opts.Diff {
		o = append(o, optpreview.Diff())
	}
	pr, err := st.Preview(ctx, o...)
	res.End = time.Now()
	if err != nil {
		return res, fmt.Errorf("preview stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	res.Changes = make(map[string]int, len(pr.ChangeSummary))
	for op, n := range pr.ChangeSummary {
		res.Changes[string(op)] = n
	}
	return res, nil
}

// Refresh reads the live state of the stack's resources into its state (`pulumi refresh`),
// changing no resource. The stack must exist.
func (m *Manager) Refresh(ctx context.Context, stackName string, opts RunOptions) (Result, error) {
	res := Result{Operation: "refresh", Start: time.Now()}
	noop := func(*pulumi.Context) error { return nil }
	st, err := m.open(ctx, stackName, noop, false)
	if err != nil {
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if res.Recovered, err = m.settlePending(ctx, st, stackName); err != nil {
		return res, err
	}
	o := []optrefresh.Option{optrefresh.Color(colorOf(opts))}
	if w := m.streams(opts); w != nil {
		o = append(o, optrefresh.ProgressStreams(w...))
	} else {
		o = append(o, optrefresh.SuppressProgress())
	}
	r, err := st.Refresh(ctx, o...)
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return res, fmt.Errorf("refresh stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if r.Summary.ResourceChanges != nil {
		res.Changes = *r.Summary.ResourceChanges
	}
	return res, nil
}

// Destroy deletes every resource of the stack and then removes the stack from the backend.
// A stack that does not exist is already destroyed: Destroy returns a zero Result and nil.
// The stack is removed only after destroy succeeded, so a failed destroy leaves the state
// that records what still exists.
func (m *Manager) Destroy(ctx context.Context, stackName string, opts RunOptions) (Result, error) {
	res := Result{Operation: "destroy", Start: time.Now()}
	noop := func(*pulumi.Context) error { return nil }
	st, err := m.open(ctx, stackName, noop, false)
	if err != nil {
		if auto.IsSelectStack404Error(err) {
			err = m.sweepRemoved(ctx, stackName)
			res.End = time.Now()
			return res, err
		}
		return res, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	// A pending create left by a killed up is an object the destroy would not delete.
	if res.Recovered, err = m.settlePending(ctx, st, stackName); err != nil {
		return res, err
	}
	o := []optdestroy.Option{optdestroy.Color(colorOf(opts)), optdestroy.Remove()}
	if w := m.streams(opts); w != nil {
		o = append(o, optdestroy.ProgressStreams(w...))
	} else {
		o = append(o, optdestroy.SuppressProgress())
	}
	d, err := st.Destroy(ctx, o...)
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return res, fmt.Errorf("destroy stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if d.Summary.ResourceChanges != nil {
		res.Changes = *d.Summary.ResourceChanges
	}
	if err := m.forget(stackName); err != nil {
		return res, err
	}
	return res, nil
}

// sweepRemoved makes sure a stack that does not exist leaves no lock behind. A DIY backend's
// `stack rm` takes the stack's lock (pkg/backend/diy RemoveStack) and a process killed after
// the stack is gone but before the unlock leaves a lock that no later operation would meet:
// seen in the crash test, a destroy killed in its final `stack rm`. So the empty stack is
// created again and removed: the removal either takes and releases the lock, or fails with
// ErrLocked naming the dead owner, for the caller's stale-lock handling (CancelLock then
// finds the stack). Costs two CLI runs, only when a destroy finds no stack.
func (m *Manager) sweepRemoved(ctx context.Context, stackName string) error {
	noop := func(*pulumi.Context) error { return nil }
	st, err := m.open(ctx, stackName, noop, true)
	if err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Workspace().RemoveStack(ctx, stackName); err != nil {
		return fmt.Errorf("remove stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	return m.forget(stackName)
}

// forget drops what this Manager keeps of a stack removed from the backend: its settled
// record (a stack of the same name made later starts afresh) and its workspace directory.
func (m *Manager) forget(stackName string) error {
	m.recordPending(stackName)
	if err := os.RemoveAll(filepath.Join(m.cfg.WorkRoot, stackName)); err != nil {
		return fmt.Errorf("remove workspace directory of stack %s: %w", stackName, err)
	}
	return nil
}

// StackInfo describes one stack of the project in the backend.
type StackInfo struct {
	// Name is the stack name; Cluster, Namespace and Name of the KindCustomHttp it belongs to
	// are parsed from it (empty for a hashed long name or a stack of another tool).
	Name                       string
	Cluster, Namespace, CRName string
	// LastUpdate is the time of the last update as the backend reports it (RFC 3339), ""
	// for none; UpdateInProgress is true while an update holds the lock.
	LastUpdate       string
	UpdateInProgress bool
	// Resources counts the resources in the stack's state, -1 when unknown.
	Resources int
}

// ListStacks lists the project's stacks in the backend.
func (m *Manager) ListStacks(ctx context.Context) ([]StackInfo, error) {
	opts, err := m.workspaceOptions(".list", func(*pulumi.Context) error { return nil })
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(filepath.Join(m.cfg.WorkRoot, ".list"))
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", classify(err))
	}
	sums, err := ws.ListStacks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list stacks: %w", classify(err))
	}
	out := make([]StackInfo, 0, len(sums))
	for _, s := range sums {
		name := s.Name
		if i := strings.LastIndex(name, "/"); i >= 0 { // organization/project/stack
			name = name[i+1:]
		}
		info := StackInfo{Name: name, LastUpdate: s.LastUpdate, UpdateInProgress: s.UpdateInProgress, Resources: -1}
		if s.ResourceCount != nil {
			info.Resources = *s.ResourceCount
		}
		if parts := strings.Split(name, "."); len(parts) == 3 {
			info.Cluster, info.Namespace, info.CRName = parts[0], parts[1], parts[2]
		}
		out = append(out, info)
	}
	return out, nil
}

// CancelLock removes the stack's lock (`pulumi cancel`). Only call it for a lock whose owner
// is known to be gone: an update still running would go on without a lock, and two updates at
// once can corrupt the state.
//
// A lock can outlive its stack: a DIY backend's `stack init` and `stack rm` take the lock too
// (pkg/backend/diy CreateStack, RemoveStack), so a process killed inside either leaves the
// lock of a stack that does not exist, and `pulumi cancel` refuses a stack that does not
// exist. Then CancelLock makes the stack exist without taking its lock, by creating a
// throwaway stack and renaming it (renameStack locks only the old name), cancels, and
// removes the stack again.
func (m *Manager) CancelLock(ctx context.Context, stackName string) error {
	noop := func(*pulumi.Context) error { return nil }
	st, err := m.open(ctx, stackName, noop, false)
	if err != nil && auto.IsSelectStack404Error(err) {
		return m.cancelLockOfMissingStack(ctx, stackName)
	}
	if err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	return nil
}

// cancelLockOfMissingStack is CancelLock for a stack that does not exist; see there.
func (m *Manager) cancelLockOfMissingStack(ctx context.Context, stackName string) error {
	noop := func(*pulumi.Context) error { return nil }
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmpName := "lock-sweep-" + hex.EncodeToString(rnd[:])
	defer func() { _ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, tmpName)) }()
	tmp, err := m.open(ctx, tmpName, noop, true)
	if err != nil {
		return fmt.Errorf("create stack %s to take over the lock of missing stack %s: %w", tmpName, stackName, m.classifyStack(tmpName, err))
	}
	// auto's Rename reads the history of the old name after `stack rename` and so always
	// fails once the rename has worked: whether the stack now exists is the answer.
	_, renameErr := tmp.Rename(ctx, optrename.StackName(stackName))
	st, err := m.open(ctx, stackName, noop, false)
	if err != nil {
		_ = tmp.Workspace().RemoveStack(context.WithoutCancel(ctx), tmpName)
		if renameErr != nil {
			err = renameErr
		}
		return fmt.Errorf("rename stack %s to missing stack %s: %w", tmpName, stackName, m.classifyStack(stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Workspace().RemoveStack(ctx, stackName); err != nil {
		return fmt.Errorf("remove stack %s after cancelling its lock: %w", stackName, m.classifyStack(stackName, err))
	}
	return m.forget(stackName)
}

// Exists reports whether the backend holds the stack.
func (m *Manager) Exists(ctx context.Context, stackName string) (bool, error) {
	noop := func(*pulumi.Context) error { return nil }
	_, err := m.open(ctx, stackName, noop, false)
	if err == nil {
		return true, nil
	}
	if auto.IsSelectStack404Error(err) {
		return false, nil
	}
	return false, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
}

// OperationError is a failed CLI run, reduced to what a person needs: the CLI's "error:"
// lines (or the end of its output), not its whole progress log.
type OperationError struct {
	// Summary is the trimmed message, at most maxSummary bytes.
	Summary string
	// Locks are the locks a DIY backend (file, postgres, s3, ...) reported holding the stack
	// when the error is ErrLocked; Pulumi Cloud reports none.
	Locks []Lock
	// Err is the Automation API's error, with the full output.
	Err  error
	kind error
}

// maxSummary bounds OperationError.Summary: status conditions and events must stay small.
const maxSummary = 1024

func (e *OperationError) Error() string { return e.Summary }

// Unwrap gives both the sentinel kind (ErrLocked, ErrPluginMissing, ErrBackendUnavailable)
// and the original error.
func (e *OperationError) Unwrap() []error {
	if e.kind != nil {
		return []error{e.kind, e.Err}
	}
	return []error{e.Err}
}

// classify turns an Automation API error into an *OperationError carrying ErrLocked,
// ErrBackendUnavailable or ErrPluginMissing where they apply. It must see the auto package's own error value: the
// auto.Is* helpers do not unwrap.
//
// A torn checkpoint read is a plain failure here: whether it is a lock's wait depends on the
// stack's lock, which only classifyStack can look at.
func classify(err error) error {
	if err == nil {
		return nil
	}
	oe := &OperationError{Err: redactErr(err), Summary: summarize(redactPasswords(err.Error()))}
	switch {
	case auto.IsConcurrentUpdateError(err):
		oe.kind = ErrLocked
		oe.Locks = parseLocks(err.Error())
	case backendUnavailable(err.Error()):
		oe.kind = ErrBackendUnavailable
	case pluginMissing(err.Error()):
		oe.kind = ErrPluginMissing
		oe.Summary = "the Kubernetes provider plugin (pulumi-resource-kubernetes) is not installed: put it on PATH or install it with `pulumi plugin install resource kubernetes` (" + oe.Summary + ")"
	}
	if len(oe.Summary) > maxSummary {
		oe.Summary = oe.Summary[:maxSummary] + "..."
	}
	return oe
}

// tornRead is how the CLI reports a checkpoint it read empty: the file backend can hand a
// reader an empty checkpoint while another process's update rewrites it (seen under load with
// two updates of one stack).
const tornRead = "failed to load checkpoint: EOF"

// classifyStack is classify for an error of an operation on stackName. A missing provider
// plugin's message says where this Manager's CLI looks (FindKubernetesPlugin). A torn checkpoint read
// (tornRead) is ErrLocked, the same wait as a lock, with the locks as OperationError.Locks, only
// while the file backend holds a lock on the stack (fileBackendLocks): then another update is
// writing the checkpoint. With no lock held, on another backend, or when the lock files cannot
// be read, it stays a plain failure: an empty checkpoint that nobody is writing is damage.
func (m *Manager) classifyStack(stackName string, err error) error {
	cerr := classify(err)
	var oe *OperationError
	if errors.As(cerr, &oe) && oe.kind == ErrPluginMissing {
		// Say where this Manager's CLI looks, and how to install it there.
		if _, ferr := m.KubernetesPlugin(); ferr != nil {
			oe.Summary = ferr.Error()
			if len(oe.Summary) > maxSummary {
				oe.Summary = oe.Summary[:maxSummary] + "..."
			}
		}
		return oe
	}
	if !errors.As(cerr, &oe) || oe.kind != nil || !strings.Contains(err.Error(), tornRead) {
		return cerr
	}
	held, locks, lerr := fileBackendLocks(m.cfg.BackendURL, m.cfg.Project, stackName)
	if lerr != nil || !held {
		return cerr
	}
	oe.kind, oe.Locks = ErrLocked, locks
	return oe
}

// backendUnavailable recognizes a CLI error that says the state backend could not be
// reached or opened: the DIY backends' open error ("unable to open bucket <url>: ...", e.g.
// PostgreSQL down or refusing the password), or the first read of a bucket (the backend's
// .pulumi/meta.yaml) failing to connect, which is how an unreachable S3 endpoint shows.
func backendUnavailable(msg string) bool {
	if strings.Contains(msg, "unable to open bucket") {
		return true
	}
	return strings.Contains(msg, `read ".pulumi/meta.yaml"`) &&
		(strings.Contains(msg, "dial tcp") || strings.Contains(msg, "request send failed") || strings.Contains(msg, "no such host"))
}

func pluginMissing(msg string) bool {
	return strings.Contains(msg, "no resource plugin") ||
		strings.Contains(msg, "could not find latest version for provider") ||
		(strings.Contains(msg, "plugin") && strings.Contains(msg, "not found"))
}

// urlPassword matches the password of a URL's userinfo: the ":secret@" of
// postgres://user:secret@host/db. The CLI prints a backend URL it cannot open as it is,
// password and all ("error: unable to open bucket postgres://user:secret@...", pkg/backend/diy).
var urlPassword = regexp.MustCompile(`(://[^/\s:@]*):[^/\s@]*@`)

// redactPasswords replaces every URL password in s with "xxxxx", as url.URL.Redacted does.
func redactPasswords(s string) string { return urlPassword.ReplaceAllString(s, "${1}:xxxxx@") }

// RedactText is s (any text: an error, a log line) with the password of every URL in it
// replaced by "xxxxx". RedactURL is for one URL.
func RedactText(s string) string { return redactPasswords(s) }

// redactedError is an error whose text showed a URL password. It keeps no reference to the
// original, so that nothing that walks an error chain can find the password.
type redactedError struct{ msg string }

func (e redactedError) Error() string { return e.msg }

// redactErr returns err, or a copy of its text without URL passwords when it has any.
func redactErr(err error) error {
	msg := err.Error()
	if r := redactPasswords(msg); r != msg {
		return redactedError{msg: r}
	}
	return err
}

// summarize keeps the lines of a CLI error that say what went wrong.
func summarize(msg string) string {
	var keep []string
	seen := map[string]bool{}
	for _, line := range strings.Split(msg, "\n") {
		l := strings.TrimSpace(line)
		// The Automation API puts the first line of each output stream after its name:
		// "stderr: error: ...".
		for _, stream := range []string{"stdout:", "stderr:"} {
			l = strings.TrimSpace(strings.TrimPrefix(l, stream))
		}
		if strings.HasPrefix(l, "error:") && !seen[l] {
			seen[l] = true
			keep = append(keep, l)
		}
	}
	if len(keep) > 0 {
		return strings.Join(keep, "; ")
	}
	first, _, _ := bytes.Cut([]byte(strings.TrimSpace(msg)), []byte("\n"))
	return string(first)
}

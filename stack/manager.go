package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// ChildGOGC is the Go garbage collector target (GOGC, percent of the live heap allocated
// between two collections) that the pulumi CLI runs with, and so the provider plugins it
// starts, unless GOGC is set in the operator's environment or in Config.Env. Both are Go
// processes that live for one operation, allocate a lot while starting (the CLI's package
// initialisation) and keep little, so at Go's default of 100 the collector takes a good part
// of their CPU. A higher target trades a little more peak memory per process for less CPU per
// run; GOGC=off saves no more CPU and costs more memory. docs/design/engine-host.md and
// docs/benchmarks.md have the figures.
const ChildGOGC = "400"

// Config says how to reach the pulumi CLI and the backend. The zero value is not usable: set
// at least Project, BackendURL, WorkRoot, PulumiPath and ClusterName.
type Config struct {
	// Project is the Pulumi project name (Pulumi.yaml "name"), e.g. "pulumi-operator".
	Project string
	// BackendURL is where state lives: file:///abs/dir, postgres://..., s3://..., or
	// https://api.pulumi.com (ParseBackend has the rules). A file:// directory is created if
	// missing.
	BackendURL string
	// WorkRoot is a local directory (a relative one is taken from the current directory when
	// New runs); each stack gets WorkRoot/<stack name> as its workspace directory, so
	// concurrent stacks never share workspace files.
	WorkRoot string
	// PulumiPath is the pulumi CLI binary to run.
	PulumiPath string
	// PulumiHome is the CLI's PULUMI_HOME: where it finds plugins (the Kubernetes provider)
	// and keeps its workspace settings. Empty takes DefaultPulumiHome(PulumiPath).
	PulumiHome string
	// SecretsProvider is "passphrase" (the default when empty), "default" (Pulumi Cloud's
	// own) or a KMS URL (awskms://..., gcpkms://..., ...). Only "passphrase" needs a
	// passphrase.
	SecretsProvider string
	// Env is added to the CLI's environment (and so to the provider plugins'), e.g. KUBECONFIG.
	Env map[string]string
	// Progress, when not nil, receives the CLI's progress output of every operation.
	Progress io.Writer
	// ClusterName identifies the Kubernetes cluster in stack names (see Name): a DNS label,
	// by default derived from the kube-system namespace's UID by the caller.
	ClusterName string
	// KeepHistory is how many of its newest updates each stack keeps in a DIY backend's history
	// (which the backend writes on every update and never prunes; its per-update checkpoint
	// backups are turned off: history.go). The engine host's code prunes it: after each of the
	// engine host's ups, and after an up or refresh run as a CLI process, through the engine
	// host or, without one, the pinned CLI's `pulumi operator-request`; without an engine host
	// after every KeepHistory-th only, so a stack keeps up to twice as many. Zero keeps
	// everything.
	KeepHistory int
	// EngineHost is the engine host (EngineHost, pulumi-operator-engine) that runs ups without
	// a CLI process each and answers the Manager's requests (a new stack, pruning, locks, the
	// diagnosis of a failed run): a path, which must exist. Empty runs every up as a `pulumi up`
	// CLI process and each request as a `pulumi operator-request` process of the pinned CLI
	// (cliPerRun): what `--engine-host none` means. It is used only on a DIY backend with the
	// passphrase secrets provider; ups go to it only when they want no progress output (the
	// watcher's; see hostEngine.takes).
	EngineHost string
	// PreviousPassphraseFile, when set, names a file holding the passphrase the stacks were
	// encrypted with before the current one (PULUMI_CONFIG_PASSPHRASE[_FILE]): every up, refresh
	// and destroy first re-encrypts a stack it opens under the current one (rotate.go). Read at
	// each use, as the current one is.
	PreviousPassphraseFile string
	// Fence, when not nil, is the leader's write permission (leader election): no pulumi
	// process starts, and no request goes to a running engine host, once it no longer permits;
	// each process started gets its lease and ends itself at the fence's kill deadline. Nil
	// without leader election.
	Fence *fence.Fence
}

// Manager runs Pulumi operations on the stacks of one project and backend. It is safe for
// concurrent use on different stacks; two updates of one stack never run at once (Pulumi's lock
// fails the second with ErrLocked, or the engine host runs them one after the other). See the
// package comment.
type Manager struct {
	cfg Config
	// backend is Config.BackendURL parsed by New (ParseBackend): every use of the backend reads
	// it, none cfg.BackendURL.
	backend Backend
	cmd     auto.PulumiCommand
	env     map[string]string
	// procs are the pulumi processes running now (Kill).
	procs *processSet
	// salt is the passphrase salt of the stacks the engine host makes (salt.go).
	salt stackSalt
	// credentials is the memory file holding the backend's credentials (credfile.go), kept
	// open for as long as the Manager lives; drop the variables its children's environment
	// leaves out because of it.
	credentials *os.File
	drop        []string
	// eng is how Pulumi's engine is reached: a *hostEngine with an engine host, else a *cliPerRun
	// (cliperrun.go).
	eng engine
	// unpruned counts, per stack, the CLI-run ups and refreshes since its last prune, without an
	// engine host (pruneDue); unprunedMu guards it.
	unprunedMu sync.Mutex
	unpruned   map[string]int
	// cloudOrg is Pulumi Cloud's default organization for QualifiedName, asked once.
	cloudOrgOnce sync.Once
	cloudOrg     string

	mu sync.Mutex
	// settled holds the stacks known to hold no pending operation of a dead update (see
	// settlePending).
	settled map[string]bool
	// named holds the stacks whose name settleName has made sure of (migrate.go).
	named map[string]bool
}

// New checks cfg and the pulumi CLI (it runs `pulumi version` once), parses the backend URL
// (ParseBackend), creates a file:// backend's directory, and returns a Manager. Errors:
// ErrNoPassphrase when a passphrase is needed and not given; ParseBackend's for a backend URL it
// refuses (ErrCredentialsInURL among them); an invalid project, cluster name, secrets provider
// or engine host path; a CLI that cannot be run or is of another major version than
// PinnedCLIVersion.
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
	// Absolute: the CLI runs in a stack's workspace directory, and paths given to it (the
	// event log) must not be read relative to that.
	abs, err := filepath.Abs(cfg.WorkRoot)
	if err != nil {
		return nil, fmt.Errorf("configure stack manager: workspace root %q: %w", cfg.WorkRoot, err)
	}
	cfg.WorkRoot = abs
	if msgs := validation.IsDNS1123Label(cfg.ClusterName); len(msgs) > 0 {
		return nil, fmt.Errorf("configure stack manager: cluster name %q: %s", cfg.ClusterName, msgs[0])
	}
	backend, err := ParseBackend(cfg.BackendURL)
	if err != nil {
		return nil, fmt.Errorf("configure stack manager: %w", err)
	}
	if backend.Kind == BackendFile {
		if err := os.MkdirAll(backend.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("create backend directory: %w", err)
		}
	}
	procs := &processSet{fence: cfg.Fence, holders: newHolders(cfg.WorkRoot)}
	cmd, err := pulumiCommand(cfg.PulumiPath, cfg.WorkRoot, procs)
	if err != nil {
		return nil, err
	}
	if cfg.PulumiHome == "" {
		cfg.PulumiHome = DefaultPulumiHome(cfg.PulumiPath)
	}
	host, err := engineHostFor(cfg, backend, procs)
	if err != nil {
		return nil, err
	}
	env := map[string]string{
		// No network here and none wanted: never look for CLI updates, never download a
		// plugin behind the user's back (a missing one is reported as ErrPluginMissing).
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		"PULUMI_DIY_BACKEND_NO_LEGACY_WARNING":        "true",
		// The checkpoint backups duplicate the history's checkpoints (history.go).
		backupsOff: "true",
		// A create whose answer never reached Pulumi (a cancelled or killed up, a network cut)
		// leaves an object the state does not know; without this every later up fails with
		// "already exists". The callers make sure no object of another owner is taken over
		// (ownership). Not part of infra.ProviderEnv: it changes no plan, only what a
		// create does when the object exists.
		"PULUMI_K8S_UPSERT_EXISTING_OBJECTS": "true",
		// The CLI writes a log file per run under $PULUMI_HOME/logs and prunes them only past 7
		// days or 500 MB (pkg/v3 logging/rotation.go): an operator's runs would fill a small
		// volume long before. One day and 16 MB bound them.
		"PULUMI_LOG_ROTATION_MAX_AGE_DAYS": "1",
		"PULUMI_LOG_ROTATION_MAX_TOTAL_MB": "16",
	}
	for k, v := range infra.ProviderEnv() {
		env[k] = v
	}
	// A GOGC of the operator's own reaches its children unchanged (auto runs the CLI with this
	// process's environment plus env), and one in cfg.Env wins over both.
	if _, set := os.LookupEnv("GOGC"); !set {
		env["GOGC"] = ChildGOGC
	}
	if name := postgresAppName(backend); name != "" {
		env["PGAPPNAME"] = name
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	sweepLeftovers(cfg.WorkRoot) // what runs killed before this process started left behind
	credentials, drop := moveCredentials(backend, env)
	if tc, ok := cmd.(*trackedCommand); ok {
		tc.drop = drop
	}
	m := &Manager{cfg: cfg, backend: backend, cmd: cmd, env: env, procs: procs, settled: map[string]bool{}, named: map[string]bool{},
		credentials: credentials, drop: drop}
	m.eng = m.engineFor(host)
	return m, nil
}

// cliEnv is what every CLI run of the Manager adds to its environment: Config.Env and the
// Manager's settings (m.env), and the backend's URL, which reaches the CLI this way only, never
// through the workspace's Pulumi.yaml on the state volume (workspaceOptions).
func (m *Manager) cliEnv() map[string]string {
	env := make(map[string]string, len(m.env)+1)
	for k, v := range m.env {
		env[k] = v
	}
	env["PULUMI_BACKEND_URL"] = m.backend.String()
	return env
}

// Kill ends every pulumi process the Manager runs now, engine hosts and CLI runs alike, with
// SIGKILL to each one's process group (its provider plugins too), and returns how many it
// signalled. The operations they ran fail as killed runs do, and leave their stack locked: only
// call it when no process of this Manager may write any more (a leader that lost its Lease),
// after a graceful cancel had its chance. No pulumi process starts afterwards.
func (m *Manager) Kill() int {
	m.eng.close()
	return m.procs.killAll()
}

// Stop ends every pulumi process of the Manager before this process gives up its stacks (a
// leader about to release its Lease, whose successor may start on them at once): the engine
// host's input closes, so that it exits once its calls are done (also a run whose client gave
// up on it after a cancel it ignored, which nothing else waits for), and Stop waits until no
// process of the Manager runs, at most wait. What still runs then is killed (Kill), and waited
// for as long again. It returns how many processes it killed: 0 when all ended by themselves.
// No pulumi process starts once Stop had to kill.
func (m *Manager) Stop(wait time.Duration) int {
	m.Close()
	if m.procs.await(wait) {
		return 0
	}
	n := m.Kill()
	m.procs.await(wait)
	return n
}

// Close stops the Manager's engine host process, if one runs, once its runs have finished. The
// Manager stays usable: a later up starts another. Without Close the host exits with this
// process.
func (m *Manager) Close() {
	m.eng.close()
}

// engineFor is the Manager's engine: a hostEngine on host, or a cliPerRun when host is nil.
func (m *Manager) engineFor(host *engineHost) engine {
	cli := &cliPerRun{m: m}
	if host == nil {
		return cli
	}
	return &hostEngine{m: m, host: host, cli: cli}
}

// CLIVersion is the version of the pulumi CLI the Manager runs.
func (m *Manager) CLIVersion() semver.Version { return m.cmd.Version() }

// Project is the Pulumi project name.
func (m *Manager) Project() string { return m.cfg.Project }

// Backend is the Manager's backend URL with its password and secret query parameters hidden
// (RedactURL), for logs: "file:///state", "postgres://user:xxxxx@host/db?table=stacks".
func (m *Manager) Backend() string { return RedactURL(m.backend.String()) }

// FileBackendDir is the directory of a file:// backend, absolute (Backend.Dir), which New
// created; "" for any other backend.
func (m *Manager) FileBackendDir() string { return m.backend.Dir }

// QualifiedName is how status and the commands name a stack: the fully qualified name that the
// CLI's `--stack` (`pulumi -s`, `pulumi stack select`) accepts from any directory on this
// backend. On a DIY backend (file, PostgreSQL, S3) it is "organization/<project>/<stack>" (the
// DIY backends' only organization is "organization": pkg/v3 backend/diy; "<project>/<stack>"
// is refused there). On Pulumi Cloud it is "<org>/<project>/<stack>" with the CLI's default
// organization (`pulumi org get-default`, asked once); when that cannot be had, the bare stack
// name, which the CLI resolves in the project's directory ("<project>/<stack>" would read as
// an organization named after the project).
func (m *Manager) QualifiedName(stack string) string {
	if m.backend.Kind != BackendCloud {
		return diyOrganization + "/" + m.cfg.Project + "/" + stack
	}
	m.cloudOrgOnce.Do(func() { m.cloudOrg = m.defaultOrganization() })
	if m.cloudOrg == "" {
		return stack
	}
	return m.cloudOrg + "/" + m.cfg.Project + "/" + stack
}

// diyOrganization is the organization of every stack of a DIY backend (pkg/v3 backend/diy).
const diyOrganization = "organization"

// defaultOrganization is the CLI's default organization on Pulumi Cloud (`pulumi org
// get-default`), "" when the CLI cannot tell (not logged in, unreachable); the failure is logged.
func (m *Manager) defaultOrganization() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var env []string
	for k, v := range m.cliEnv() {
		env = append(env, k+"="+v)
	}
	out, stderr, _, err := m.cmd.Run(ctx, m.cfg.WorkRoot, nil, nil, nil, env, "org", "get-default")
	org := strings.TrimSpace(out)
	if err != nil || org == "" || strings.ContainsAny(org, "/ \n") {
		slog.Warn("could not learn Pulumi Cloud's default organization: stacks are named without it", "error", err, "stderr", RedactText(strings.TrimSpace(stderr)))
		return ""
	}
	return org
}

// StackName is the stack of the KindCustomHttp namespace/name in this Manager's cluster (see
// Name for the rule).
func (m *Manager) StackName(namespace, name string) (string, error) {
	return Name(m.cfg.ClusterName, namespace, name)
}

// hasPassphrase reports whether the CLI will find a passphrase: PULUMI_CONFIG_PASSPHRASE or
// PULUMI_CONFIG_PASSPHRASE_FILE set in env (Config.Env) or in this process's environment,
// which the CLI inherits. Being set is what counts: the CLI takes an empty
// PULUMI_CONFIG_PASSPHRASE as a passphrase (pkg/secrets/passphrase readPassphrase).
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

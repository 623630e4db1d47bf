package commands

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"

	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/version"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// DefaultProject is the Pulumi project name when no Pulumi.yaml is found. It must equal the
// name in the repository's Pulumi.yaml, so the watcher and the commands reach the same stacks.
const DefaultProject = "kindcustomhttp"

// config is everything the flags and environment say, before any client is built. The
// global flags fill the first block; watch's flags the second.
type config struct {
	kubeconfig   string
	kubeContext  string
	backendURL   string
	secrets      string
	projectFile  string
	stateDir     string
	pulumiPath   string
	stackInit    string // the retired --stack-init: set only to be warned about
	engineHost   string // --engine-host: the engine host's path, "none", or "" to look for it (engineHostPath)
	keepHistory  int    // --keep-history: stack.Config.KeepHistory
	clusterName  string
	logFormat    string
	logLevel     string
	verbose      bool
	kubeQPS      float64 // client-go's rest.Config QPS: sustained API requests per second
	kubeBurst    int     // client-go's rest.Config Burst: requests allowed at once above QPS
	explicitFile bool    // --project-file was given: a missing file is an error

	namespace        string
	selector         string
	workers          int
	resync           time.Duration
	healthAddr       string
	metricsAddr      string
	metricsSecure    bool
	metricsCertDir   string
	leaderElect      bool
	leaseNS          string
	leaseName        string
	lease            watcher.LeaderElection
	grace            time.Duration
	staleLock        time.Duration
	secretNamespaces cli.StringSlice
	previousPhrase   string
	envDigestKeyFile string // --env-digest-key-file: desired.LoadKey's keyFile
	operationTimeout time.Duration
	// requireAdmission is --require-admission-policy: watcher.Options.RequireAdmissionPolicy.
	requireAdmission bool
	// allowServiceTypes is --allow-service-types: watcher.Options.AllowServiceTypes, checked by
	// serviceTypes.
	allowServiceTypes cli.StringSlice
	// fence is the leader's write permission with --leader-elect (runWatch), nil otherwise.
	fence *fence.Fence
	// minRefresh and maxUpsPerNS are watch's --min-refresh-interval and --max-ups-per-namespace.
	minRefresh  time.Duration
	maxUpsPerNS int
	// adoptOriginal and handoverDrain are watch's --adopt-original and --handover-drain.
	adoptOriginal bool
	handoverDrain time.Duration
	// programUpgrades is watch's --program-upgrades-per-minute.
	programUpgrades int
	// stateBudget is --state-budget: watcher.Options.StateBudget as a quantity, checked by
	// parseStateBudget.
	stateBudget string
}

// App builds the pulumi-operator command line. Run it with os.Args; it never exits the
// process itself (ExitErrHandler is a no-op): pass Run's error to ExitCode. Each call returns
// a new App with its own flag values, so tests may run several.
func App() *cli.App { return newApp(&config{}) }

// newApp is App with its flags' destination cfg.
func newApp(cfg *config) *cli.App {
	of := &objectFlags{}
	home, _ := os.UserHomeDir()
	app := &cli.App{
		Name:  "pulumi-operator",
		Usage: "reconcile KindCustomHttp resources with Pulumi stacks",
		Description: "Global options go before or after the command, as in kubectl. Every flag can also be set by\n" +
			"   the environment variable shown with it here. Stacks: one per KindCustomHttp, named <cluster>.<namespace>.<name>, shared by\n" +
			"   `watch` in the cluster and `up`/`preview`/`refresh`/`destroy` on a laptop or in CI.",
		EnableBashCompletion: true,
		Version:              "v" + version.Version,
		// main decides the exit code; urfave/cli would otherwise exit from inside Run.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Destination: &cfg.kubeconfig,
				Usage: "kubeconfig `FILE`; empty: in-cluster config, then ~/.kube/config"},
			&cli.StringFlag{Name: "context", EnvVars: []string{"PULUMI_OPERATOR_CONTEXT"}, Destination: &cfg.kubeContext,
				Usage: "kubeconfig `CONTEXT` to use (default: its current context), as kubectl --context"},
			&cli.StringFlag{Name: "backend-url", EnvVars: []string{"PULUMI_BACKEND_URL"}, Destination: &cfg.backendURL,
				Usage: "Pulumi state backend `URL` (file://DIR, postgres://, s3://, ...); default: Pulumi.yaml's backend, else file://<state-dir>/backend"},
			&cli.StringFlag{Name: "secrets-provider", EnvVars: []string{"PULUMI_OPERATOR_SECRETS_PROVIDER"}, Value: "passphrase", Destination: &cfg.secrets,
				Usage: "secrets provider of new stacks: `passphrase` (PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE) or a KMS URL (awskms://, azurekeyvault://, gcpkms://, hashivault://; credentials from the provider's usual environment)"},
			&cli.StringFlag{Name: "previous-passphrase-file", EnvVars: []string{"PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE"}, Destination: &cfg.previousPhrase,
				Usage: "`FILE` holding the passphrase the stacks were encrypted with before the current one: every up, refresh and destroy first re-encrypts a stack that still needs it (passphrase rotation; see rotate-passphrase)"},
			&cli.StringFlag{Name: "env-digest-key-file", EnvVars: []string{desired.KeyFileEnv}, Destination: &cfg.envDigestKeyFile,
				Usage: "`FILE` holding the key of the digest of spec.envFrom sources on the pod template (an HMAC, so that who may view a Deployment cannot test guesses of a Secret's data); default: derived from the passphrase. Needed with a KMS secrets provider; set it to keep pods from rolling when the passphrase is rotated"},
			&cli.StringFlag{Name: "project-file", EnvVars: []string{"PULUMI_OPERATOR_PROJECT_FILE"}, Value: "Pulumi.yaml", Destination: &cfg.projectFile,
				Usage: "Pulumi project `FILE` giving the project name and backend; a missing default file means project " + DefaultProject},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"PULUMI_OPERATOR_STATE_DIR"}, Value: filepath.Join(home, ".pulumi-operator"), Destination: &cfg.stateDir,
				Usage: "`DIR` for per-stack workspaces and the default file backend"},
			&cli.StringFlag{Name: "pulumi", EnvVars: []string{"PULUMI_OPERATOR_PULUMI"}, Destination: &cfg.pulumiPath,
				Usage: "pulumi CLI `PATH`; default: the pinned CLI next to this binary, else the pulumi on PATH (warned about when it is not the pinned version)"},
			// Kept so that command lines and manifests that set it keep working: the stack-init
			// helper is gone, the engine host creates new stacks (stackManager warns).
			&cli.StringFlag{Name: "stack-init", EnvVars: []string{"PULUMI_OPERATOR_STACK_INIT"}, Destination: &cfg.stackInit, Hidden: true,
				Usage: "no longer used: new stacks are created by the engine host (--engine-host), or by `pulumi stack init` without one"},
			&cli.StringFlag{Name: "engine-host", EnvVars: []string{"PULUMI_OPERATOR_ENGINE_HOST"}, Destination: &cfg.engineHost,
				Usage: "`PATH` of pulumi-operator-engine, one long-lived process that runs the ups of `watch` (and of any command that shows no progress) without a pulumi CLI process each, on a DIY backend with the passphrase secrets provider; `none` runs every up as a `pulumi up` process (the one next to this binary still creates new stacks, removes stale locks and prunes history, started for each such request); default: the one next to this binary, if there is one"},
			&cli.IntFlag{Name: "keep-history", EnvVars: []string{"PULUMI_OPERATOR_KEEP_HISTORY"}, Value: 10, Destination: &cfg.keepHistory,
				Usage: "keep the `N` newest updates of each stack's history in a DIY backend (pruned by the engine host after each update; with --engine-host none or without an engine host after every N-th, so up to 2N are kept); 0 keeps all"},
			&cli.StringFlag{Name: "cluster-name", EnvVars: []string{"PULUMI_OPERATOR_CLUSTER_NAME"}, Destination: &cfg.clusterName,
				Usage: "`NAME` of this cluster in stack names (a DNS label); default: the first 12 hex digits of the kube-system namespace's UID"},
			&cli.StringFlag{Name: "log-format", EnvVars: []string{"PULUMI_OPERATOR_LOG_FORMAT"}, Value: "text", Destination: &cfg.logFormat,
				Usage: "log `FORMAT`: text or json"},
			&cli.StringFlag{Name: "log-level", EnvVars: []string{"PULUMI_OPERATOR_LOG_LEVEL"}, Value: "info", Destination: &cfg.logLevel,
				Usage: "least severe log `LEVEL` written: debug, info, warn or error (client-go's own logs included)"},
			&cli.BoolFlag{Name: "verbose", EnvVars: []string{"PULUMI_OPERATOR_VERBOSE"}, Destination: &cfg.verbose,
				Usage: "the same as --log-level debug (kept for existing installs)"},
			&cli.Float64Flag{Name: "kube-api-qps", EnvVars: []string{"PULUMI_OPERATOR_KUBE_API_QPS"}, Value: defaultKubeQPS, Destination: &cfg.kubeQPS,
				Usage: "sustained Kubernetes API requests per `SECOND` of this process (client-go's default, 5, throttles a burst of objects)"},
			&cli.IntFlag{Name: "kube-api-burst", EnvVars: []string{"PULUMI_OPERATOR_KUBE_API_BURST"}, Value: defaultKubeBurst, Destination: &cfg.kubeBurst,
				Usage: "Kubernetes API requests allowed at once above --kube-api-qps (`N`)"},
		},
		Before: func(c *cli.Context) error { return setupGlobal(c, cfg) },
		Commands: []*cli.Command{
			watchCommand(cfg),
			upCommand(cfg, of),
			previewCommand(cfg, of),
			refreshCommand(cfg, of),
			destroyCommand(cfg, of),
			stacksCommand(cfg, of),
			reconcileCommand(cfg),
			rotatePassphraseCommand(cfg),
			versionCommand(cfg),
			completionCommand(),
		},
	}
	for _, cmd := range app.Commands {
		acceptGlobalFlags(cmd, app.Flags, cfg)
	}
	return app
}

// setupGlobal acts on the global flags once they are all parsed: c is the App's own context,
// whose flag set holds them.
func setupGlobal(c *cli.Context, cfg *config) error {
	cfg.explicitFile = c.IsSet("project-file")
	if err := checkKubeAPILimits(cfg); err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	return setupLogging(cfg, c.App.ErrWriter)
}

// acceptGlobalFlags lets cmd take every global flag after its name too, as kubectl, flux and helm
// do (`pulumi-operator watch --engine-host none`): cmd gets a copy of each, listed in its --help
// under "GLOBAL OPTIONS", and a Before that hands what was given there to the App's flag set
// (and so to cfg) and runs setupGlobal again with it.
//
// Hand-written because urfave/cli v2 parses an App's flags only before the command's name. The
// copies have no destination of their own (applying a flag resets its
// destination to the default, which would undo a value given before the command) and no
// environment variables (the App's flags read those; a copy set from the environment would
// override a value given on the command line before the command).
func acceptGlobalFlags(cmd *cli.Command, global []cli.Flag, cfg *config) {
	names := map[string]bool{}
	for _, f := range global {
		cp := localCopy(f)
		if cp == nil {
			panic(fmt.Sprintf("acceptGlobalFlags: global flag %v of unhandled type %T", f.Names(), f)) // a programming error; TestGlobalFlagsAnywhere covers every flag
		}
		cmd.Flags = append(cmd.Flags, cp)
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	before := cmd.Before
	cmd.Before = func(c *cli.Context) error {
		// The App's context is the command's parent: its flag set holds the App's flags.
		root := c.Lineage()[1]
		given := false
		for _, n := range c.LocalFlagNames() {
			if !names[n] {
				continue
			}
			if err := root.Set(n, fmt.Sprint(c.Value(n))); err != nil {
				return cli.Exit(fmt.Sprintf("--%s: %v", n, err), ExitInvalidInput)
			}
			given = true
		}
		if given {
			if err := setupGlobal(root, cfg); err != nil {
				return err
			}
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
}

// localCopy is f for a command's flag set (acceptGlobalFlags): no destination, no environment
// variables, in the "GLOBAL OPTIONS" category; nil for a flag type no global flag has.
func localCopy(f cli.Flag) cli.Flag {
	const category = "GLOBAL OPTIONS"
	switch f := f.(type) {
	case *cli.StringFlag:
		c := *f
		c.Destination, c.EnvVars, c.Category = nil, nil, category
		return &c
	case *cli.IntFlag:
		c := *f
		c.Destination, c.EnvVars, c.Category = nil, nil, category
		return &c
	case *cli.BoolFlag:
		c := *f
		c.Destination, c.EnvVars, c.Category = nil, nil, category
		return &c
	case *cli.Float64Flag:
		c := *f
		c.Destination, c.EnvVars, c.Category = nil, nil, category
		return &c
	}
	return nil
}

// setupLogging makes slog's default logger write to w (stderr) in --log-format, at
// --log-level (debug with --verbose), and routes klog, which client-go logs through
// (reflector and watch errors, API server warnings, throttling), into the same handler, so
// that one stream has one format. At debug, klog's verbosity is 2 (client-go's
// informer and leader-election detail; 4 and up log every request). An unknown format or
// level is an error naming the flag.
func setupLogging(cfg *config, w io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil || !slices.Contains(logLevels, strings.ToLower(cfg.logLevel)) {
		return fmt.Errorf("--log-level %q: want one of %s", cfg.logLevel, strings.Join(logLevels, ", "))
	}
	if cfg.verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch cfg.logFormat {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return fmt.Errorf("--log-format %q: want text or json", cfg.logFormat)
	}
	logger := slog.New(h)
	slog.SetDefault(logger)
	klog.SetSlogLogger(logger)
	v := "0"
	if level <= slog.LevelDebug {
		v = "2"
	}
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	return fs.Set("v", v)
}

// logLevels are --log-level's values, slog's level names.
var logLevels = []string{"debug", "info", "warn", "error"}

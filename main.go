// Command pulumi-operator reconciles KindCustomHttp custom resources
// (groupsp.measutosh.dev/v1) by running Pulumi: one stack per object, holding its
// Deployment, Service and ConfigMap. `watch` runs the reconciler; see README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// DefaultProject is the Pulumi project name when no Pulumi.yaml is found. It must equal the
// name in the repository's Pulumi.yaml, so the watcher and the laptop reach the same stacks.
const DefaultProject = "kindcustomhttp"

// config is everything the flags and environment say, before any client is built.
type config struct {
	kubeconfig   string
	backendURL   string
	secrets      string
	projectFile  string
	stateDir     string
	pulumiPath   string
	clusterName  string
	namespace    string
	selector     string
	workers      int
	resync       time.Duration
	healthAddr   string
	metricsAddr  string
	leaderElect  bool
	leaseNS      string
	leaseName    string
	lease        watcher.LeaderElection
	grace        time.Duration
	staleLock    time.Duration
	logFormat    string
	verbose      bool
	explicitFile bool
}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-operator:", err)
		code := ExitFailed
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			code = ec.ExitCode()
		}
		os.Exit(code)
	}
}

func newApp() *cli.App {
	cfg := &config{}
	home, _ := os.UserHomeDir()
	return &cli.App{
		Name:  "pulumi-operator",
		Usage: "reconcile KindCustomHttp resources with Pulumi stacks",
		Description: "Global options go before the command. Every flag can also be set by the environment variable\n" +
			"   shown with it. Stacks: one per KindCustomHttp, named <cluster>.<namespace>.<name>, shared by\n" +
			"   `watch` in the cluster and `up`/`preview`/`refresh`/`destroy` on a laptop or in CI.",
		EnableBashCompletion: true,
		// main decides the exit code; urfave/cli would otherwise exit from inside Run.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"}, Destination: &cfg.kubeconfig,
				Usage: "kubeconfig `FILE`; empty: in-cluster config, then ~/.kube/config"},
			&cli.StringFlag{Name: "backend-url", EnvVars: []string{"PULUMI_BACKEND_URL"}, Destination: &cfg.backendURL,
				Usage: "Pulumi state backend `URL` (file://DIR, postgres://, s3://, ...); default: Pulumi.yaml's backend, else file://<state-dir>/backend"},
			&cli.StringFlag{Name: "secrets-provider", EnvVars: []string{"PULUMI_OPERATOR_SECRETS_PROVIDER"}, Value: "passphrase", Destination: &cfg.secrets,
				Usage: "secrets provider of new stacks: `passphrase` (PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE) or a KMS URL (awskms://, azurekeyvault://, gcpkms://, hashivault://; credentials from the provider's usual environment)"},
			&cli.StringFlag{Name: "project-file", EnvVars: []string{"PULUMI_OPERATOR_PROJECT_FILE"}, Value: "Pulumi.yaml", Destination: &cfg.projectFile,
				Usage: "Pulumi project `FILE` giving the project name and backend; a missing default file means project " + DefaultProject},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"PULUMI_OPERATOR_STATE_DIR"}, Value: filepath.Join(home, ".pulumi-operator"), Destination: &cfg.stateDir,
				Usage: "`DIR` for per-stack workspaces and the default file backend"},
			&cli.StringFlag{Name: "pulumi", EnvVars: []string{"PULUMI_OPERATOR_PULUMI"}, Destination: &cfg.pulumiPath,
				Usage: "pulumi CLI `PATH`; default: the pinned CLI next to this binary"},
			&cli.StringFlag{Name: "cluster-name", EnvVars: []string{"PULUMI_OPERATOR_CLUSTER_NAME"}, Destination: &cfg.clusterName,
				Usage: "`NAME` of this cluster in stack names (a DNS label); default: the first 12 hex digits of the kube-system namespace's UID"},
			&cli.StringFlag{Name: "log-format", EnvVars: []string{"PULUMI_OPERATOR_LOG_FORMAT"}, Value: "text", Destination: &cfg.logFormat,
				Usage: "log `FORMAT`: text or json"},
			&cli.BoolFlag{Name: "verbose", EnvVars: []string{"PULUMI_OPERATOR_VERBOSE"}, Destination: &cfg.verbose,
				Usage: "debug logs"},
		},
		Before: func(c *cli.Context) error {
			cfg.explicitFile = c.IsSet("project-file")
			return setupLogging(cfg)
		},
		Commands: append([]*cli.Command{{
			Name:  "watch",
			Usage: "reconcile KindCustomHttp objects of the cluster until stopped (SIGINT/SIGTERM)",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "namespace", EnvVars: []string{"WATCH_NAMESPACE"}, Destination: &cfg.namespace,
					Usage: "watch only `NAMESPACE`; default all namespaces"},
				&cli.IntFlag{Name: "workers", EnvVars: []string{"PULUMI_OPERATOR_WORKERS"}, Value: 2, Destination: &cfg.workers,
					Usage: "`N` objects reconciled at once (each runs one pulumi process)"},
				&cli.DurationFlag{Name: "resync", EnvVars: []string{"PULUMI_OPERATOR_RESYNC"}, Value: 10 * time.Minute, Destination: &cfg.resync,
					Usage: "informer resync `PERIOD`; an unchanged object starts no Pulumi run"},
				&cli.StringFlag{Name: "label-selector", EnvVars: []string{"PULUMI_OPERATOR_LABEL_SELECTOR"}, Destination: &cfg.selector,
					Usage: "reconcile only KindCustomHttps matching `SELECTOR` (sharding across several operators)"},
				&cli.StringFlag{Name: "health-addr", EnvVars: []string{"PULUMI_OPERATOR_HEALTH_ADDR"}, Value: ":8081", Destination: &cfg.healthAddr,
					Usage: "`ADDR` serving /healthz and /readyz; empty disables"},
				&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"PULUMI_OPERATOR_METRICS_ADDR"}, Value: ":8080", Destination: &cfg.metricsAddr,
					Usage: "`ADDR` serving /metrics (Prometheus); empty disables"},
				&cli.BoolFlag{Name: "leader-elect", EnvVars: []string{"PULUMI_OPERATOR_LEADER_ELECT"}, Destination: &cfg.leaderElect,
					Usage: "run several replicas: only the holder of the Lease reconciles"},
				&cli.StringFlag{Name: "leader-election-namespace", EnvVars: []string{"POD_NAMESPACE"}, Value: "default", Destination: &cfg.leaseNS,
					Usage: "`NAMESPACE` of the leader election Lease"},
				&cli.StringFlag{Name: "leader-election-id", EnvVars: []string{"PULUMI_OPERATOR_LEADER_ELECTION_ID"}, Value: "pulumi-operator.groupsp.measutosh.dev", Destination: &cfg.leaseName,
					Usage: "`NAME` of the Lease; operators sharing one must share a label selector"},
				&cli.DurationFlag{Name: "leader-election-lease-duration", EnvVars: []string{"PULUMI_OPERATOR_LEADER_ELECTION_LEASE_DURATION"}, Value: 15 * time.Second, Destination: &cfg.lease.LeaseDuration,
					Usage: "how long followers wait after the leader's last renewal before taking the Lease"},
				&cli.DurationFlag{Name: "leader-election-renew-deadline", EnvVars: []string{"PULUMI_OPERATOR_LEADER_ELECTION_RENEW_DEADLINE"}, Value: 10 * time.Second, Destination: &cfg.lease.RenewDeadline,
					Usage: "how long the leader retries renewing before it gives up leading and cancels its running operations (less than the lease duration)"},
				&cli.DurationFlag{Name: "leader-election-retry-period", EnvVars: []string{"PULUMI_OPERATOR_LEADER_ELECTION_RETRY_PERIOD"}, Value: 2 * time.Second, Destination: &cfg.lease.RetryPeriod,
					Usage: "how often candidates try to take or renew the Lease"},
				&cli.DurationFlag{Name: "shutdown-grace", EnvVars: []string{"PULUMI_OPERATOR_SHUTDOWN_GRACE"}, Value: 25 * time.Second, Destination: &cfg.grace,
					Usage: "on SIGTERM, how long running Pulumi operations may finish before they are cancelled"},
				&cli.DurationFlag{Name: "stale-lock-timeout", EnvVars: []string{"PULUMI_OPERATOR_STALE_LOCK_TIMEOUT"}, Value: 30 * time.Minute, Destination: &cfg.staleLock,
					Usage: "a stack lock older than this is removed (pulumi cancel) even if its owner may live"},
			},
			Action: func(c *cli.Context) error { return runWatch(c.Context, cfg) },
		}}, laptopCommands(cfg)...),
	}
}

func setupLogging(cfg *config) error {
	level := slog.LevelInfo
	if cfg.verbose {
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch cfg.logFormat {
	case "text":
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, opts)))
	case "json":
		slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, opts)))
	default:
		return fmt.Errorf("--log-format %q: want text or json", cfg.logFormat)
	}
	return nil
}

func runWatch(parent context.Context, cfg *config) error {
	if l := cfg.lease; cfg.leaderElect && (l.RetryPeriod <= 0 || l.RetryPeriod >= l.RenewDeadline || l.RenewDeadline >= l.LeaseDuration) {
		// client-go's leaderelection requires this order; checked here to name the flags.
		return fmt.Errorf("leader election: want 0 < --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)",
			l.RetryPeriod, l.RenewDeadline, l.LeaseDuration)
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := restConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	mgr, salt, err := newStackManager(ctx, cfg, client)
	if err != nil {
		return err
	}
	slog.Info("watching", "cluster", cfg.clusterName, "namespace", cfg.namespace, "labelSelector", cfg.selector,
		"workers", cfg.workers, "pulumiVersion", mgr.CLIVersion().String())
	if p, err := mgr.KubernetesPlugin(); err != nil {
		slog.Warn("Kubernetes provider plugin not found: every up will fail with reason PluginMissing until it is installed", "err", err)
	} else {
		slog.Info("Kubernetes provider plugin found", "path", p)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w := watcher.New(client, kube, watcher.ManagerStacks{Manager: mgr}, watcher.Options{
		Namespace: cfg.namespace, LabelSelector: cfg.selector, Resync: cfg.resync, DigestSalt: salt,
		ShutdownGrace: cfg.grace, StaleLockTimeout: cfg.staleLock, Registry: reg, Metadata: meta,
		FindPlugin: mgr.KubernetesPlugin,
	})
	serve(ctx, cfg.metricsAddr, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	serve(ctx, cfg.healthAddr, "/", healthHandler(w, cfg.leaderElect))
	if !cfg.leaderElect {
		return w.Run(ctx, cfg.workers)
	}
	le := cfg.lease
	le.Namespace, le.Name = cfg.leaseNS, cfg.leaseName
	return w.RunLeaderElected(ctx, kube, le, cfg.workers)
}

// healthHandler serves /healthz (the process answers) and /readyz (the informer caches have
// synced; with leader election a follower, which has nothing to sync, is ready too).
func healthHandler(w *watcher.Watcher, leaderElect bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(rw, "ok\n") })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if w.HasSynced() || (leaderElect && !w.Leading()) {
			_, _ = io.WriteString(rw, "ok\n")
			return
		}
		http.Error(rw, "informer caches not synced", http.StatusServiceUnavailable)
	})
	return mux
}

// serve runs an HTTP server on addr until ctx ends; an empty addr serves nothing. A port that
// cannot be bound is logged, not fatal: reconciling matters more than probes.
func serve(ctx context.Context, addr, pattern string, h http.Handler) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle(pattern, h)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("serve HTTP failed", "addr", addr, "err", err)
		}
	}()
}

// restConfig loads kubeconfig (a path, or KUBECONFIG's list) and otherwise the in-cluster
// config, then ~/.kube/config: client-go's own loading rules.
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" && !strings.Contains(kubeconfig, string(os.PathListSeparator)) {
		rules.ExplicitPath = kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client config (set --kubeconfig or KUBECONFIG, or run in a cluster): %w", err)
	}
	rc.UserAgent = "pulumi-operator"
	return rc, nil
}

// newStackManager resolves the project, backend, CLI and cluster name into a stack.Manager.
// The second result is the digest salt: what besides the spec decides an up's outcome.
func newStackManager(ctx context.Context, cfg *config, client dynamic.Interface) (*stack.Manager, string, error) {
	project := DefaultProject
	backend := cfg.backendURL
	if _, err := os.Stat(cfg.projectFile); err == nil || cfg.explicitFile {
		pf, err := stack.LoadProjectFile(cfg.projectFile)
		if err != nil {
			return nil, "", err
		}
		project = pf.Name
		if backend == "" {
			backend = pf.BackendURL
		}
	}
	if backend == "" {
		backend = "file://" + filepath.Join(cfg.stateDir, "backend")
	}
	pulumiPath := cfg.pulumiPath
	if pulumiPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, "", fmt.Errorf("find pinned pulumi CLI: %w (pass --pulumi)", err)
		}
		pulumiPath = filepath.Join(filepath.Dir(exe), "pulumi")
	}
	cluster := cfg.clusterName
	if cluster == "" {
		var err error
		if cluster, err = clusterNameFromUID(ctx, client); err != nil {
			return nil, "", err
		}
		cfg.clusterName = cluster
	}
	env := map[string]string{}
	if cfg.kubeconfig != "" {
		// The provider plugin must reach the same cluster as the watcher.
		env["KUBECONFIG"] = absList(cfg.kubeconfig)
	}
	mgr, err := stack.New(stack.Config{
		Project:     project,
		BackendURL:  backend,
		WorkRoot:    filepath.Join(cfg.stateDir, "workspaces"),
		PulumiPath:  pulumiPath,
		ClusterName: cluster,
		Env:         env,
		// Pulumi records a stack's secrets provider in its state at `stack init`; later
		// runs use that one, so the flag only matters for new stacks.
		SecretsProvider: cfg.secrets,
	})
	if err != nil {
		return nil, "", err
	}
	slog.Debug("stack manager ready", "project", project, "backend", stack.RedactURL(backend),
		"cluster", cluster, "pulumi", pulumiPath, "pulumiVersion", mgr.CLIVersion().String())
	return mgr, stack.RedactURL(backend), nil
}

// clusterNameFromUID names the cluster by its kube-system namespace's UID: stable for the
// life of the cluster and different between clusters, so clusters sharing a backend never
// share a stack.
func clusterNameFromUID(ctx context.Context, client dynamic.Interface) (string, error) {
	ns, err := client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).
		Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read namespace kube-system to name the cluster (or pass --cluster-name): %w", err)
	}
	uid := strings.ReplaceAll(string(ns.GetUID()), "-", "")
	if len(uid) < 12 {
		return "", errors.New("read namespace kube-system: its UID is too short to name the cluster; pass --cluster-name")
	}
	return uid[:12], nil
}

func absList(list string) string {
	parts := filepath.SplitList(list)
	for i, p := range parts {
		if a, err := filepath.Abs(p); err == nil {
			parts[i] = a
		}
	}
	return strings.Join(parts, string(os.PathListSeparator))
}

package commands

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/internal/volume"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// watchCommand is `watch`: the reconciler, run in the cluster until SIGINT or SIGTERM.
func watchCommand(cfg *config) *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "reconcile KindCustomHttp objects of the cluster until stopped (SIGINT/SIGTERM)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", EnvVars: []string{"WATCH_NAMESPACE"}, Destination: &cfg.namespace,
				Usage: "watch only `NAMESPACE`; default all namespaces"},
			&cli.IntFlag{Name: "workers", EnvVars: []string{"PULUMI_OPERATOR_WORKERS"}, Value: 2, Destination: &cfg.workers,
				// 2: an up is CPU-bound, so more workers than cores add memory (a provider plugin
				// each) more than speed; docs/benchmarks.md has the burst by workers.
				Usage: "`N` objects reconciled at once (each runs a provider plugin, some hundred MiB; about the number of cores)"},
			&cli.DurationFlag{Name: "resync", EnvVars: []string{"PULUMI_OPERATOR_RESYNC"}, Value: 10 * time.Minute, Destination: &cfg.resync,
				Usage: "informer resync `PERIOD`; an unchanged object starts no Pulumi run"},
			&cli.StringSliceFlag{Name: "secret-namespaces", EnvVars: []string{"PULUMI_OPERATOR_SECRET_NAMESPACES"}, Destination: &cfg.secretNamespaces,
				Usage: "read Secrets named in spec.envFrom only in `NAMESPACES` (comma-separated; * for all), where the operator must be granted get, list and watch on Secrets; elsewhere their changes do not roll the pods (Event EnvSourceNotWatched). Default: none, no permission on Secrets needed"},
			&cli.StringFlag{Name: "label-selector", EnvVars: []string{"PULUMI_OPERATOR_LABEL_SELECTOR"}, Destination: &cfg.selector,
				Usage: "reconcile only KindCustomHttps matching `SELECTOR` (sharding across several operators)"},
			&cli.StringFlag{Name: "health-addr", EnvVars: []string{"PULUMI_OPERATOR_HEALTH_ADDR"}, Value: ":8081", Destination: &cfg.healthAddr,
				Usage: "`ADDR` serving /healthz and /readyz; empty disables"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"PULUMI_OPERATOR_METRICS_ADDR"}, Value: ":8080", Destination: &cfg.metricsAddr,
				Usage: "`ADDR` serving /metrics (Prometheus); empty disables"},
			&cli.BoolFlag{Name: "metrics-secure", EnvVars: []string{"PULUMI_OPERATOR_METRICS_SECURE"}, Destination: &cfg.metricsSecure,
				Usage: "serve /metrics over HTTPS to callers whose bearer token the API server accepts (TokenReview) and allows `get` on /metrics (SubjectAccessReview)"},
			&cli.StringFlag{Name: "metrics-cert-dir", EnvVars: []string{"PULUMI_OPERATOR_METRICS_CERT_DIR"}, Destination: &cfg.metricsCertDir,
				Usage: "with --metrics-secure, `DIR` holding tls.crt and tls.key; default: a self-signed certificate made at start"},
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
			&cli.DurationFlag{Name: "operation-timeout", EnvVars: []string{"PULUMI_OPERATOR_OPERATION_TIMEOUT"}, Value: 3 * time.Minute, Destination: &cfg.operationTimeout,
				Usage: "cancel an up or destroy that runs longer than `DURATION` (its object is retried with backoff), so that no object holds a worker"},
			&cli.DurationFlag{Name: "min-refresh-interval", EnvVars: []string{"PULUMI_OPERATOR_MIN_REFRESH_INTERVAL"}, Value: 10 * time.Second, Destination: &cfg.minRefresh,
				Usage: "least `DURATION` between two ups of one object that only repair drift or answer a reconcile request (a spec change is never held back); negative: no limit"},
			&cli.IntFlag{Name: "max-ups-per-namespace", EnvVars: []string{"PULUMI_OPERATOR_MAX_UPS_PER_NAMESPACE"}, Destination: &cfg.maxUpsPerNS,
				Usage: "at most `N` ups at once for the objects of one namespace, so that one namespace's work leaves workers to the others (below --workers); 0: no cap"},
			&cli.BoolFlag{Name: "adopt-original", EnvVars: []string{"PULUMI_OPERATOR_ADOPT_ORIGINAL"}, Destination: &cfg.adoptOriginal,
				Usage: "take over the Deployment, Service and ConfigMap the original operator (http-go-operator) made for any object, without a failed request (README \"Switching from http-go-operator\"); the annotation " + api.AdoptOriginalAnnotation + "=true says it for one object"},
			&cli.DurationFlag{Name: "handover-drain", EnvVars: []string{"PULUMI_OPERATOR_HANDOVER_DRAIN"}, Value: watcher.DefaultHandoverDrain, Destination: &cfg.handoverDrain,
				Usage: "during a takeover of the original operator's objects, how long its pods keep running after they left the Service (`DURATION`: at least the cluster DNS's TTL, twice it when clients cache too)"},
			&cli.IntFlag{Name: "program-upgrades-per-minute", EnvVars: []string{"PULUMI_OPERATOR_PROGRAM_UPGRADES_PER_MINUTE"}, Value: 60, Destination: &cfg.programUpgrades,
				Usage: "at most `N` ups a minute whose only cause is this operator's newer program version, each after the other work queued (so an upgrade of the operator does not run one up per stack at once); 0 or less: all at once"},
			&cli.BoolFlag{Name: "require-admission-policy", EnvVars: []string{"PULUMI_OPERATOR_REQUIRE_ADMISSION_POLICY"}, Destination: &cfg.requireAdmission,
				Usage: "roll out no object whose spec.envFrom names a Secret unless the admission policy (config/admission) is in force and checked its spec's writer: Ready False with reason AdmissionPolicyMissing, AdmittedWithoutPolicy or AdmissionPolicyUnknown instead. Default: such objects are only reported (condition ReferencesChecked, a Warning Event)"},
			&cli.StringSliceFlag{Name: "allow-service-types", EnvVars: []string{"PULUMI_OPERATOR_ALLOW_SERVICE_TYPES"}, Destination: &cfg.allowServiceTypes,
				Usage: "spec.serviceType values that expose pods outside the cluster to allow: `TYPES` among NodePort and LoadBalancer (comma-separated). The operator creates those Services with its own rights, past the policies that limit who may create them; an object asking for one not allowed is Stalled (ServiceTypeNotAllowed). Default: none (ClusterIP and Headless are always allowed)"},
			&cli.StringFlag{Name: "state-budget", EnvVars: []string{"PULUMI_OPERATOR_STATE_BUDGET"}, Value: DefaultStateBudget, Destination: &cfg.stateBudget,
				Usage: "the most one object's stack may hold in a DIY backend (file, S3, PostgreSQL), its state and its history together, as a Kubernetes `QUANTITY` (16Mi): a stack with a large state keeps fewer than --keep-history updates, and an object whose state and one history entry would not fit is Stalled (StateBudgetExceeded) and runs no up; 0: no budget"},
			&cli.DurationFlag{Name: "stale-lock-timeout", EnvVars: []string{"PULUMI_OPERATOR_STALE_LOCK_TIMEOUT"}, Destination: &cfg.staleLock,
				Usage: "opt in: a stack lock this process has seen for longer than `DURATION` (its own clock) is removed (pulumi cancel) even if its owner may live, unless a process of this operator holds it; 0 (the default) never removes a lock by age (locks of this operator's processes that have ended, and of earlier operator pods of this installation, are removed at once; others are waited out and reported)"},
		},
		Action: func(c *cli.Context) error { return runWatch(c.Context, cfg) },
	}
}

// runWatch builds the Kubernetes clients and the stack manager, serves metrics and probes,
// and runs the watcher (under leader election with --leader-elect) until ctx ends or a
// signal arrives. Its errors are configuration errors naming the flag, client errors, or
// the watcher's (watcher.ErrLeadershipLost).
func runWatch(parent context.Context, cfg *config) error {
	allowTypes, err := serviceTypes(cfg.allowServiceTypes.Value())
	if err != nil {
		return err
	}
	budget, err := parseStateBudget(cfg.stateBudget)
	if err != nil {
		return err
	}
	var fenced *fence.Fence
	if l := cfg.lease; cfg.leaderElect {
		if err := fence.Validate(l.LeaseDuration, l.RenewDeadline, l.RetryPeriod); err != nil {
			return err
		}
		fenced = fence.New(l.RenewDeadline)
		cfg.fence = fenced
	}
	// Never an unkeyed digest of Secret data on the pod templates (desired.LoadKey).
	envKey, err := desired.LoadKey(cfg.envDigestKeyFile, os.LookupEnv)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := restConfig(cfg)
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	kube, err := kubeclient.NewForConfig(rc)
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
		"workers", cfg.workers, "backend", mgr.Backend(), "pulumiVersion", mgr.CLIVersion().String())
	if p, err := mgr.KubernetesPlugin(); err != nil {
		slog.Warn("Kubernetes provider plugin not found: every up will fail with reason PluginMissing until it is installed", "err", err)
	} else {
		slog.Info("Kubernetes provider plugin found", "path", p)
	}
	checkAdmission(ctx, kube, cfg.requireAdmission)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerRESTClientMetrics(reg)
	registerStateVolumeMetrics(reg, cfg.stateDir)
	w := watcher.New(client, kube, watcher.ManagerStacks{Manager: mgr}, watcher.Options{
		Namespace: cfg.namespace, LabelSelector: cfg.selector, Resync: cfg.resync, DigestSalt: salt,
		ShutdownGrace: cfg.grace, OperationTimeout: cfg.operationTimeout, StaleLockTimeout: cfg.staleLock, Registry: reg, Metadata: meta,
		MinRefreshInterval: cfg.minRefresh, MaxUpsPerNamespace: cfg.maxUpsPerNS,
		AdoptOriginal: cfg.adoptOriginal, HandoverDrain: cfg.handoverDrain, ProgramUpgradesPerMinute: unpacedIfNone(cfg.programUpgrades),
		SecretNamespaces: cfg.secretNamespaces.Value(), EnvDigestKey: envKey,
		FindPlugin:             mgr.KubernetesPlugin,
		RequireAdmissionPolicy: cfg.requireAdmission, AllowServiceTypes: allowTypes,
		StateBudget: budget, StateVolume: mgr.FileBackendDir(),
	})
	var metricsHandler http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	var metricsTLSConfig *tls.Config
	if cfg.metricsSecure {
		if metricsTLSConfig, err = metricsTLS(cfg.metricsCertDir); err != nil {
			return err
		}
		// The reviews' own client: a flood of tokens then draws on its rate limit, not on the
		// one that renews the Lease (metricsauth.go).
		reviews, err := newMetricsReviewClient(rc)
		if err != nil {
			return err
		}
		metricsHandler = newMetricsAuth(reviews, metricsHandler)
	}
	serveTLS(ctx, cfg.metricsAddr, "/metrics", metricsHandler, metricsTLSConfig)
	serve(ctx, cfg.healthAddr, "/", healthHandler(w, cfg.leaderElect))
	if !cfg.leaderElect {
		return w.Run(ctx, cfg.workers)
	}
	le := cfg.lease
	le.Namespace, le.Name, le.Fence = cfg.leaseNS, cfg.leaseName, fenced
	election, err := kubeclient.NewForConfig(electionConfig(rc, le))
	if err != nil {
		return fmt.Errorf("create leader election client: %w", err)
	}
	return w.RunLeaderElected(ctx, election, le, cfg.workers)
}

// electionConfig is rc for the leader election's own client: a connection of its own (client-go
// shares one HTTP/2 connection among clients of equal TLS settings; a Dial of its own makes
// another), so that renewals do not queue behind the watcher's requests on a connection that
// may have died without a reset, and a timeout per request, so that a renewal or the release
// fails instead of hanging: max(RetryPeriod, RenewDeadline/4), room for more than one try within
// the renew deadline. The fence does not depend on it (it expires by its own clock); the
// timeout bounds what the election does after.
func electionConfig(rc *rest.Config, le watcher.LeaderElection) *rest.Config {
	c := rest.CopyConfig(rc)
	c.Timeout = max(le.RetryPeriod, le.RenewDeadline/4)
	c.Dial = (&net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second}).DialContext
	return c
}

// registerStateVolumeMetrics registers the size and use of the file system that holds dir (the
// state directory: workspaces and, by default, the file backend), read at each scrape, so that
// a filling volume shows (and alerts: PulumiOperatorStateVolumeFilling) before it is full.
func registerStateVolumeMetrics(reg prometheus.Registerer, dir string) {
	gauge := func(name, help string, pick func(size, used uint64) uint64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			u, ok := volume.Of(dir)
			if !ok {
				return 0
			}
			return float64(pick(u.Size, u.Used))
		})
	}
	reg.MustRegister(
		gauge("pulumi_operator_state_volume_size_bytes", "Size of the file system holding the state directory (--state-dir).",
			func(size, _ uint64) uint64 { return size }),
		gauge("pulumi_operator_state_volume_used_bytes", "Bytes used on the file system holding the state directory (--state-dir).",
			func(_, used uint64) uint64 { return used }),
	)
}

// readiness is what /healthz and /readyz ask of the watcher (*watcher.Watcher).
type readiness interface {
	HasSynced() bool
	Leading() bool
	Healthy() error
}

// healthHandler serves /healthz (the process answers and, when it leads, may still write: a
// leader past its renew deadline is unhealthy while it ends its operations) and /readyz (the
// informer caches have synced; with leader election a follower, which has nothing to sync, is
// ready too).
func healthHandler(w readiness, leaderElect bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if err := w.Healthy(); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(rw, "ok\n")
	})
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
	serveTLS(ctx, addr, pattern, h, nil)
}

// serveTLS is serve over TLS with tc (plain HTTP when tc is nil).
func serveTLS(ctx context.Context, addr, pattern string, h http.Handler, tc *tls.Config) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle(pattern, h)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tc}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		listen := srv.ListenAndServe
		if tc != nil {
			listen = func() error { return srv.ListenAndServeTLS("", "") }
		}
		if err := listen(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("serve HTTP failed", "addr", addr, "err", err)
		}
	}()
}

// unpacedIfNone maps --program-upgrades-per-minute to watcher.Options.ProgramUpgradesPerMinute,
// where 0 is the default: 0 or less on the command line runs program upgrades unpaced (-1).
func unpacedIfNone(perMinute int) int {
	if perMinute <= 0 {
		return -1
	}
	return perMinute
}

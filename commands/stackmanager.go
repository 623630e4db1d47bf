package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Client-side rate limits of the Kubernetes clients, Flux's defaults (fluxcd/pkg/runtime/client:
// --kube-api-qps 50, --kube-api-burst 300). client-go's own, 5 and 10, allow 5 requests a second
// once 10 are spent, so a burst of new objects (each a finalizer write and two status writes)
// could wait on the limiter. On 2 cores `make bench`'s bursts took as long with either setting:
// they are bound by the CPU of the pulumi runs, not by the limiter; more cores move that bound.
const (
	defaultKubeQPS   = 50.0
	defaultKubeBurst = 300
)

// checkKubeAPILimits rejects --kube-api-qps and --kube-api-burst values client-go cannot use:
// QPS must be above 0 (client-go reads 0 as "use the default 5", and a negative one disables the
// limiter), Burst at least 1 (with a positive QPS client-go requires it).
func checkKubeAPILimits(cfg *config) error {
	if !(cfg.kubeQPS > 0) { // also catches NaN
		return fmt.Errorf("--kube-api-qps %v: want a number of requests per second above 0", cfg.kubeQPS)
	}
	if cfg.kubeBurst < 1 {
		return fmt.Errorf("--kube-api-burst %d: want at least 1", cfg.kubeBurst)
	}
	return nil
}

// clientConfig is kubectl's view of the kubeconfig: cfg.kubeconfig (a path, or KUBECONFIG's
// list), else the in-cluster config, then ~/.kube/config (client-go's own loading rules), at
// the context --context names, else the current context.
func clientConfig(cfg *config) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if k := cfg.kubeconfig; k != "" && !strings.Contains(k, string(os.PathListSeparator)) {
		rules.ExplicitPath = k
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.kubeContext})
}

// restConfig is clientConfig's client configuration, with cfg's client-side rate limits
// (--kube-api-qps, --kube-api-burst). Errors say how to point it at a cluster (a --context
// the kubeconfig lacks is one).
func restConfig(cfg *config) (*rest.Config, error) {
	rc, err := clientConfig(cfg).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client config (set --kubeconfig or KUBECONFIG, --context, or run in a cluster): %w", err)
	}
	rc.UserAgent = "pulumi-operator"
	rc.QPS, rc.Burst = float32(cfg.kubeQPS), cfg.kubeBurst
	return rc, nil
}

// contextNamespace is the namespace kubectl would use without -n: the context's, the pod's
// own in a cluster, else "default" (also when no kubeconfig can be read: commands that read
// only files still work without one).
func contextNamespace(cfg *config) string {
	ns, _, err := clientConfig(cfg).Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
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
	pulumiPath, why, err := pulumiCLI(cfg)
	if err != nil {
		return nil, "", err
	}
	if why == noCLI {
		return nil, "", fmt.Errorf("no pulumi CLI: none at %s and none on PATH; put the pinned one there (`make tools`), install pulumi v%s on PATH, or pass --pulumi",
			pulumiPath, stack.PinnedCLIVersion)
	}
	if cfg.stackInit != "" {
		slog.Warn("--stack-init (PULUMI_OPERATOR_STACK_INIT) is no longer used and is ignored: the engine host creates new stacks, or `pulumi stack init` without one (--engine-host none)",
			"stack-init", cfg.stackInit)
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
		EngineHost:  engineHostPath(cfg, pulumiPath),
		KeepHistory: cfg.keepHistory,
		ClusterName: cluster,
		Env:         env,
		// Pulumi records a stack's secrets provider in its state at `stack init`; later
		// runs use that one, so the flag only matters for new stacks.
		SecretsProvider:        cfg.secrets,
		PreviousPassphraseFile: absList(cfg.previousPhrase),
		Fence:                  cfg.fence,
	})
	if err != nil {
		return nil, "", err
	}
	if v := mgr.CLIVersion().String(); v != stack.PinnedCLIVersion {
		slog.Warn("the pulumi CLI is not the version this operator pins and is tested with: install the pinned version or put the pinned CLI next to this binary",
			"pulumi", pulumiPath, "found", why, "version", v, "pinned", stack.PinnedCLIVersion)
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

// absList makes every path of a path list (KUBECONFIG style) absolute, so the pulumi
// processes, which run in per-stack workspace directories, find the same files.
func absList(list string) string {
	parts := filepath.SplitList(list)
	for i, p := range parts {
		if a, err := filepath.Abs(p); err == nil {
			parts[i] = a
		}
	}
	return strings.Join(parts, string(os.PathListSeparator))
}

// engineHostPath is stack.Config.EngineHost for cfg: --engine-host when given, "" for
// --engine-host none (every up a `pulumi up` process, every request of the engine host's a
// `pulumi operator-request` process of the pinned CLI: no engine host process at all), else the
// engine host next to this binary when it is there (the image and bin/ hold both), else the one
// next to the pulumi CLI pulumiPath (the engine host is that binary under another name:
// agent/cmd/pulumi), else "". The operator uses it for ups by default because it halves an up's
// CPU (docs/benchmarks.md; docs/design/engine-host.md); stack.Config leaves it off unless set.
func engineHostPath(cfg *config, pulumiPath string) string {
	switch cfg.engineHost {
	case stack.NoEngineHost:
		return ""
	case "":
		if p := besideExecutable(stack.EngineHost); p != "" {
			return p
		}
		if pulumiPath == "" {
			return ""
		}
		p := filepath.Join(filepath.Dir(pulumiPath), stack.EngineHost)
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	default:
		return cfg.engineHost
	}
}

// besideExecutable is the file name next to this binary when it exists there, else "".
func besideExecutable(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/pulumi-operator/pulumi-operator/infra"
)

// KubernetesPluginVersion is the version of the Kubernetes provider plugin the program needs:
// infra.ProviderVersion, the version every object is registered with, which is the version of
// github.com/pulumi/pulumi-kubernetes/sdk/v4 in go.mod (a test keeps them in step). The engine
// asks for exactly this version.
const KubernetesPluginVersion = infra.ProviderVersion

// KubernetesPluginBinary is the plugin's executable name.
const KubernetesPluginBinary = "pulumi-resource-kubernetes"

// ProjectPulumiHome is the name of the Pulumi home directory that `make plugins`
// (hack/install-plugins.sh) fills beside the pinned CLI: bin/pulumi-home next to bin/pulumi.
const ProjectPulumiHome = "pulumi-home"

// DefaultPulumiHome returns the Pulumi home (the directory holding plugins/, Pulumi's
// PULUMI_HOME) that the CLI at pulumiPath runs with, in this order:
//   - $PULUMI_HOME when set (Pulumi's own variable; the operator image sets it);
//   - ProjectPulumiHome beside the CLI when that directory exists: where `make plugins`
//     installed the Kubernetes provider for bin/pulumi, so `make run`, `make test` and
//     bin/pulumi-operator find it with no setting;
//   - "" otherwise: Pulumi's default, ~/.pulumi.
func DefaultPulumiHome(pulumiPath string) string {
	if h := os.Getenv("PULUMI_HOME"); h != "" {
		return h
	}
	if pulumiPath == "" {
		return ""
	}
	abs, err := filepath.Abs(pulumiPath)
	if err != nil {
		return ""
	}
	dir := filepath.Join(filepath.Dir(abs), ProjectPulumiHome)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir
	}
	return ""
}

// FindKubernetesPlugin returns where the engine will find the Kubernetes provider plugin when
// it runs with Pulumi home home ("" for Pulumi's default, ~/.pulumi): a
// pulumi-resource-kubernetes on PATH, or home/plugins/resource-kubernetes-v<version>/. It only
// looks at files, so it is cheap enough to poll. The error, wrapping ErrPluginMissing, says
// where it looked and how to install the plugin; callers print it as the reason for a SKIP or
// a failed reconcile.
func FindKubernetesPlugin(home string) (string, error) {
	if p, err := exec.LookPath(KubernetesPluginBinary); err == nil {
		return p, nil
	}
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find Kubernetes provider plugin: %w (set PULUMI_HOME)", err)
		}
		home = filepath.Join(h, ".pulumi")
	}
	dir := filepath.Join(home, "plugins", "resource-kubernetes-v"+KubernetesPluginVersion)
	p := filepath.Join(dir, KubernetesPluginBinary)
	// The engine takes only a real directory as a plugin's (workspace.tryPlugin checks
	// DirEntry.IsDir, which is false for a symbolic link), so Lstat, not Stat.
	di, derr := os.Lstat(dir)
	fi, ferr := os.Stat(p)
	_, perr := os.Stat(dir + ".partial") // Pulumi marks an install still in progress so
	if derr == nil && di.IsDir() && ferr == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && errors.Is(perr, os.ErrNotExist) {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s v%s is neither on PATH nor in the directory %s; install it with `make plugins` "+
		"(PULUMI_KUBERNETES_PLUGIN_FILE=<archive> where there is no internet) or "+
		"`PULUMI_HOME=%s pulumi plugin install resource kubernetes v%s [--file <archive>]`",
		ErrPluginMissing, KubernetesPluginBinary, KubernetesPluginVersion, dir, home, KubernetesPluginVersion)
}

// FindKubernetesPluginFor is FindKubernetesPlugin for the Pulumi home that the CLI at
// pulumiPath runs with by default (DefaultPulumiHome).
func FindKubernetesPluginFor(pulumiPath string) (string, error) {
	return FindKubernetesPlugin(DefaultPulumiHome(pulumiPath))
}

// KubernetesPlugin is FindKubernetesPlugin for the Pulumi home this Manager's CLI runs with.
func (m *Manager) KubernetesPlugin() (string, error) { return FindKubernetesPlugin(m.cfg.PulumiHome) }

// PulumiHome is the Pulumi home the Manager's CLI runs with ("" for Pulumi's default).
func (m *Manager) PulumiHome() string { return m.cfg.PulumiHome }

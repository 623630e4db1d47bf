package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// KubernetesPluginVersion is the version of the Kubernetes provider plugin the program needs:
// the version of github.com/pulumi/pulumi-kubernetes/sdk/v4 in go.mod (a test keeps them in
// step). The engine asks for exactly this version.
const KubernetesPluginVersion = "4.33.0"

// KubernetesPluginBinary is the plugin's executable name.
const KubernetesPluginBinary = "pulumi-resource-kubernetes"

// FindKubernetesPlugin returns where the engine will find the Kubernetes provider plugin: a
// pulumi-resource-kubernetes on PATH, or Pulumi's plugin directory
// ($PULUMI_HOME/plugins/resource-kubernetes-v<version>/, PULUMI_HOME defaulting to
// ~/.pulumi). The error, wrapping ErrPluginMissing, says where it looked; callers print it
// as the reason for a SKIP or a failed reconcile.
func FindKubernetesPlugin() (string, error) {
	if p, err := exec.LookPath(KubernetesPluginBinary); err == nil {
		return p, nil
	}
	home := os.Getenv("PULUMI_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find Kubernetes provider plugin: %w", err)
		}
		home = filepath.Join(h, ".pulumi")
	}
	dir := filepath.Join(home, "plugins", "resource-kubernetes-v"+KubernetesPluginVersion)
	p := filepath.Join(dir, KubernetesPluginBinary)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		if _, err := os.Stat(dir + ".partial"); errors.Is(err, os.ErrNotExist) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s v%s is neither on PATH nor in %s", ErrPluginMissing, KubernetesPluginBinary, KubernetesPluginVersion, dir)
}

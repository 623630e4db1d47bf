package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/version"
)

// cliVersionTimeout bounds `pulumi version`: it reads no state and answers in well under a
// second, so a CLI that takes longer is reported as not answering rather than waited for.
const cliVersionTimeout = 10 * time.Second

// versionCommand is `version`: what runs the stacks, and where it was found. `--version` (of
// the app) prints the operator's version alone.
func versionCommand(cfg *config) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the versions of the operator, the pulumi CLI and the Kubernetes provider plugin, and where each was found",
		Action: func(c *cli.Context) error {
			return printVersion(c.Context, c.App.Writer, cfg)
		},
	}
}

// pulumiCLI is the pulumi CLI the operator runs and why that one, in this order: --pulumi; the
// pinned CLI next to this binary (the image, bin/ and a release archive ship both); the `pulumi`
// on PATH (a `go install` of the operator beside an installed CLI), which may be another
// version (newStackManager warns; stack.New refuses another major version). When there is
// none, the path next to this binary is returned, so that the error of running it names where
// the pinned one belongs. Errors only when the executable's own path is unknown.
func pulumiCLI(cfg *config) (path, why string, err error) {
	if cfg.pulumiPath != "" {
		return cfg.pulumiPath, "--pulumi", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("find pinned pulumi CLI: %w (pass --pulumi)", err)
	}
	beside := filepath.Join(filepath.Dir(exe), "pulumi")
	if _, err := os.Stat(beside); err == nil {
		return beside, "next to this binary", nil
	}
	if onPath, err := exec.LookPath("pulumi"); err == nil {
		if abs, err := filepath.Abs(onPath); err == nil {
			onPath = abs
		}
		return onPath, "on PATH; none next to this binary", nil
	}
	return beside, noCLI, nil
}

// noCLI is pulumiCLI's reason when it found no CLI.
const noCLI = "none next to this binary nor on PATH"

// printVersion writes one line each: the operator's version; the pulumi CLI's (`pulumi
// version`) and path; the Kubernetes provider plugin's and path, with the Pulumi home it was
// looked up in; whether the cluster of --kubeconfig has the admission policy in force. A part that is missing is reported on its line with the reason and what to do;
// that is no error, so that `version` always answers (like `kubectl version` without a server).
func printVersion(ctx context.Context, out io.Writer, cfg *config) error {
	fmt.Fprintf(out, "pulumi-operator: v%s (pins pulumi v%s, Kubernetes provider v%s)\n",
		version.Version, stack.PinnedCLIVersion, stack.KubernetesPluginVersion)
	path, why, err := pulumiCLI(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "pulumi CLI: %s (%s)\n", cliVersion(ctx, path), why)
	home := stack.DefaultPulumiHome(path)
	shownHome := home
	if shownHome == "" {
		shownHome = "~/.pulumi (Pulumi's default)"
	}
	if plugin, err := stack.FindKubernetesPlugin(home); err != nil {
		fmt.Fprintf(out, "Kubernetes provider plugin: not found (%v)\n", err)
	} else {
		fmt.Fprintf(out, "Kubernetes provider plugin: v%s at %s (Pulumi home %s)\n", stack.KubernetesPluginVersion, plugin, shownHome)
	}
	fmt.Fprintf(out, "admission policy: %s\n", clusterAdmissionStatus(ctx, cfg))
	return nil
}

// clusterAdmissionStatus is admissionStatus on the cluster of --kubeconfig, or "unknown (no
// cluster: ...)" when there is none to ask.
func clusterAdmissionStatus(ctx context.Context, cfg *config) string {
	rc, err := restConfig(cfg)
	if err != nil {
		return "unknown (no cluster: " + err.Error() + ")"
	}
	kube, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return "unknown (no cluster: " + err.Error() + ")"
	}
	line, _ := admissionStatus(ctx, kube)
	return line
}

// cliVersion is "<version> at <path>" from `<path> version` (", not the pinned v<pinned>" after
// the version when it differs), or "not found at <path> (...)" /
// "did not answer at <path> (...)" (it exists but failed or timed out), saying how to get the
// pinned CLI.
func cliVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, cliVersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version")
	cmd.Env = stack.Environ() // as every pulumi process the operator starts
	out, err := cmd.Output()
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("not found at %s (%v; build the pinned CLI with `make tools`, install pulumi v%s on PATH, or pass --pulumi)", path, err, stack.PinnedCLIVersion)
	}
	if err != nil {
		return fmt.Sprintf("did not answer at %s (`%s version`: %v; rebuild the pinned CLI with `make tools` or pass --pulumi)", path, path, err)
	}
	v := strings.TrimSpace(string(out))
	if strings.TrimPrefix(v, "v") != stack.PinnedCLIVersion {
		v += ", not the pinned v" + stack.PinnedCLIVersion
	}
	return v + " at " + path
}

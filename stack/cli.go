package stack

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// PinnedCLIVersion is the pulumi CLI version the project builds (agent/go.mod) and tests
// against. A different CLI works if it is at least the Automation API's minimum; New logs
// nothing about it, callers may compare Manager.CLIVersion.
const PinnedCLIVersion = "3.275.0"

// pulumiCommand wraps the CLI at path. The Automation API expects the binary at
// <root>/bin/pulumi; when path is laid out otherwise, a symlink under workRoot provides that
// shape.
func pulumiCommand(path, workRoot string, procs *processSet) (auto.PulumiCommand, error) {
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
	cli := filepath.Join(root, "bin", "pulumi")
	version, err := cliVersionOf(cli)
	if err != nil {
		return nil, fmt.Errorf("run pulumi CLI %s: %w", abs, err)
	}
	return &trackedCommand{path: cli, version: version, procs: procs}, nil
}

// cliVersionOf runs `<cli> version` with the allow-listed environment (Environ) and returns the
// version it prints. It is what auto.NewPulumiCommand does, written out because auto runs it
// with this process's whole environment. The Automation API of this module speaks to CLIs of
// its own major version only (auto's check): another major is an error that says so.
func cliVersionOf(cli string) (semver.Version, error) {
	cmd := exec.Command(cli, "version")
	cmd.Env = append(Environ(), "PULUMI_SKIP_UPDATE_CHECK=true")
	out, err := cmd.Output()
	if err != nil {
		return semver.Version{}, fmt.Errorf("`pulumi version`: %w", err)
	}
	v, err := semver.ParseTolerant(strings.TrimSpace(string(out)))
	if err != nil {
		return semver.Version{}, fmt.Errorf("`pulumi version` printed %q: %w", strings.TrimSpace(string(out)), err)
	}
	if want := semver.MustParse(PinnedCLIVersion); v.Major != want.Major {
		return semver.Version{}, fmt.Errorf("pulumi CLI v%s: the operator needs major version %d (it pins v%s)", v, want.Major, PinnedCLIVersion)
	}
	return v, nil
}

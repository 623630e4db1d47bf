package stack

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// FindKubernetesPlugin must agree with the engine on what an installed plugin is: an
// executable file in a real directory named for the version, no install in progress.
func TestFindKubernetesPlugin(t *testing.T) {
	dirName := "resource-kubernetes-v" + KubernetesPluginVersion
	tests := map[string]struct {
		setup func(t *testing.T, plugins string)
		found bool
	}{
		"empty home": {setup: func(*testing.T, string) {}},
		"installed": {setup: func(t *testing.T, plugins string) {
			writePlugin(t, filepath.Join(plugins, dirName), 0o755)
		}, found: true},
		"not executable": {setup: func(t *testing.T, plugins string) {
			writePlugin(t, filepath.Join(plugins, dirName), 0o644)
		}},
		"install in progress": {setup: func(t *testing.T, plugins string) {
			writePlugin(t, filepath.Join(plugins, dirName), 0o755)
			writeFile(t, filepath.Join(plugins, dirName+".partial"))
		}},
		"other version": {setup: func(t *testing.T, plugins string) {
			writePlugin(t, filepath.Join(plugins, "resource-kubernetes-v4.0.0"), 0o755)
		}},
		// The engine skips a symbolic link in the plugin directory (it reports "no resource
		// plugin found" with such a link), so it must not count as installed.
		"linked directory": {setup: func(t *testing.T, plugins string) {
			real := filepath.Join(t.TempDir(), "real")
			writePlugin(t, real, 0o755)
			if err := os.Symlink(real, filepath.Join(plugins, dirName)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir()) // no plugin on PATH
			home := t.TempDir()
			plugins := filepath.Join(home, "plugins")
			if err := os.MkdirAll(plugins, 0o700); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, plugins)
			p, err := FindKubernetesPlugin(home)
			if tc.found {
				if want := filepath.Join(plugins, dirName, KubernetesPluginBinary); err != nil || p != want {
					t.Fatalf("FindKubernetesPlugin = %q, %v; want %q", p, err, want)
				}
				return
			}
			if !errors.Is(err, ErrPluginMissing) {
				t.Fatalf("FindKubernetesPlugin = %q, %v; want ErrPluginMissing", p, err)
			}
		})
	}
}

// DefaultPulumiHome: PULUMI_HOME wins; else pulumi-home beside the CLI when it exists.
func TestDefaultPulumiHome(t *testing.T) {
	bin := t.TempDir()
	cli := filepath.Join(bin, "pulumi")
	t.Setenv("PULUMI_HOME", "")
	if h := DefaultPulumiHome(cli); h != "" {
		t.Fatalf("no pulumi-home beside the CLI: got %q, want \"\" (Pulumi's default)", h)
	}
	if err := os.Mkdir(filepath.Join(bin, ProjectPulumiHome), 0o700); err != nil {
		t.Fatal(err)
	}
	if h, want := DefaultPulumiHome(cli), filepath.Join(bin, ProjectPulumiHome); h != want {
		t.Fatalf("got %q, want %q", h, want)
	}
	t.Setenv("PULUMI_HOME", "/somewhere")
	if h := DefaultPulumiHome(cli); h != "/somewhere" {
		t.Fatalf("PULUMI_HOME set: got %q", h)
	}
}

func writePlugin(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, KubernetesPluginBinary), []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The engine asks for the plugin version of the SDK in go.mod; KubernetesPluginVersion must
// name the same one, or FindKubernetesPlugin would look for the wrong directory.
func TestKubernetesPluginVersionMatchesSDK(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github.com/pulumi/pulumi-kubernetes/sdk/v4 v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod does not require github.com/pulumi/pulumi-kubernetes/sdk/v4")
	}
	if string(m[1]) != KubernetesPluginVersion {
		t.Fatalf("go.mod has v%s, KubernetesPluginVersion is %s", m[1], KubernetesPluginVersion)
	}
}

package commands

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// globalFlagValue is a value each global flag accepts that is not its default.
func globalFlagValue(t *testing.T, f cli.Flag) string {
	t.Helper()
	name := f.Names()[0]
	switch name {
	case "log-format":
		return "json"
	case "log-level":
		return "debug"
	case "kube-api-qps":
		return "12.5"
	case "kube-api-burst":
		return "17"
	}
	switch f.(type) {
	case *cli.StringFlag:
		return "value-of-" + name
	case *cli.IntFlag:
		return "7"
	case *cli.BoolFlag:
		return "true"
	}
	t.Fatalf("global flag %s of type %T: give it a test value here", name, f)
	return ""
}

// parseOnly runs the App on args with every command's action replaced by a no-op, and returns
// the configuration the flags made (nil when Run failed, with its error).
func parseOnly(t *testing.T, args ...string) (*config, error) {
	t.Helper()
	cfg := &config{}
	app := newApp(cfg)
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	for _, c := range app.Commands {
		c.Action = func(*cli.Context) error { return nil }
	}
	if err := app.Run(append([]string{"pulumi-operator"}, args...)); err != nil {
		return nil, err
	}
	return cfg, nil
}

// TestGlobalFlagsAnywhere: every global flag means the same before and after every command's
// name (kubectl's, flux's and helm's rule), and changes the configuration; a value given after
// the command wins over one given before, as a later flag does; a bad value after the command is
// refused as before it.
func TestGlobalFlagsAnywhere(t *testing.T) {
	defer slog.SetDefault(slog.Default()) // --log-format and --log-level replace it
	t.Setenv("KUBECONFIG", "")
	base, err := parseOnly(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range newApp(&config{}).Flags {
		name, value := f.Names()[0], globalFlagValue(t, f)
		for _, cmd := range newApp(&config{}).Commands {
			t.Run(name+"/"+cmd.Name, func(t *testing.T) {
				before, err := parseOnly(t, "--"+name+"="+value, cmd.Name)
				if err != nil {
					t.Fatalf("--%s before %s: %v", name, cmd.Name, err)
				}
				after, err := parseOnly(t, cmd.Name, "--"+name+"="+value)
				if err != nil {
					t.Fatalf("--%s after %s: %v", name, cmd.Name, err)
				}
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("--%s=%s before %s gives %+v, after it %+v", name, value, cmd.Name, before, after)
				}
				if reflect.DeepEqual(before, base) {
					t.Fatalf("--%s=%s changed nothing in the configuration", name, value)
				}
			})
		}
	}

	// The later of two values wins, wherever they are.
	cfg, err := parseOnly(t, "--engine-host", "first", "watch", "--engine-host", "none")
	if err != nil || cfg.engineHost != "none" {
		t.Errorf("--engine-host first watch --engine-host none: %+v, %v; want none", cfg, err)
	}
	// A value checked at start is checked after the command too.
	for _, args := range [][]string{{"watch", "--log-level", "loud"}, {"watch", "--kube-api-qps", "-1"}} {
		if _, err := parseOnly(t, args...); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestCommandHelpListsGlobalFlags: each command's --help lists every global flag it accepts
// (all but the hidden ones), under GLOBAL OPTIONS.
func TestCommandHelpListsGlobalFlags(t *testing.T) {
	global := App().Flags // before Run adds --help and --version
	for _, cmd := range App().Commands {
		var out bytes.Buffer
		app := App()
		app.Writer, app.ErrWriter = &out, io.Discard
		if err := app.Run([]string{"pulumi-operator", cmd.Name, "--help"}); err != nil {
			t.Fatalf("%s --help: %v", cmd.Name, err)
		}
		help := out.String()
		if !strings.Contains(help, "GLOBAL OPTIONS") {
			t.Errorf("%s --help has no GLOBAL OPTIONS section:\n%s", cmd.Name, help)
		}
		for _, f := range global {
			hidden := false
			if v, ok := f.(cli.VisibleFlag); ok {
				hidden = !v.IsVisible()
			}
			if got := strings.Contains(help, fmt.Sprintf("--%s", f.Names()[0])); got == hidden {
				t.Errorf("%s --help lists --%s: %v, want %v", cmd.Name, f.Names()[0], got, !hidden)
			}
		}
	}
}

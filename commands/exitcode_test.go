package commands

import (
	"errors"
	"fmt"
	"testing"

	"github.com/urfave/cli/v2"
)

// The exit codes are an interface: scripts and CI jobs branch on them, and README.md lists
// them. Changing one is a breaking change, so this pins them, and they must keep the values
// the pulumi CLI gives the same outcomes (the SDK's constants could change under us).
func TestExitCodesPinned(t *testing.T) {
	for name, tc := range map[string]struct{ got, want int }{
		"ExitFailed":       {ExitFailed, 1},
		"ExitInvalidInput": {ExitInvalidInput, 2},
		"ExitChanges":      {ExitChanges, 7},
		"ExitCancelled":    {ExitCancelled, 8},
		"ExitTimeout":      {ExitTimeout, 9},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", name, tc.got, tc.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	tests := map[string]struct {
		err  error
		want int
	}{
		"success":            {nil, 0},
		"plain error":        {errors.New("boom"), ExitFailed},
		"exit coder":         {cli.Exit("locked", ExitTimeout), ExitTimeout},
		"wrapped exit coder": {fmt.Errorf("run: %w", cli.Exit("bad", ExitInvalidInput)), ExitInvalidInput},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ExitCode(tc.err); got != tc.want {
				t.Fatalf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

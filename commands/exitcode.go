package commands

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/urfave/cli/v2"
)

// Exit codes of the commands. They are the pinned Pulumi SDK's exit-code constants
// (cmdutil.Exit*, the contract the pulumi CLI keeps for automation), with the meaning the
// pulumi CLI gives them, so a CI job written for `pulumi preview` reads ours alike. 0 is
// success; watch exits ExitFailed on any error. Pulumi's 3 (authentication), 4 (resource
// error), 5 (policy) and 6 (stack not found) are not produced: a failed operation is
// ExitFailed, as `pulumi up` exits 1 when a resource fails.
const (
	// ExitFailed (1): a Pulumi operation failed (or any other error).
	ExitFailed = cmdutil.ExitCodeError
	// ExitInvalidInput (2): a file, document or flag is wrong; nothing was run or written.
	ExitInvalidInput = cmdutil.ExitConfigurationError
	// ExitChanges (7): `preview --expect-no-changes` found changes (pulumi's own code for
	// `--expect-no-changes`).
	ExitChanges = cmdutil.ExitNoChanges
	// ExitCancelled (8): interrupted (SIGINT, SIGTERM): the running operation was cancelled
	// the way pulumi cancels one (its lock released, its state saved) and later objects were
	// not run.
	ExitCancelled = cmdutil.ExitCancelled
	// ExitTimeout (9, pulumi's timeout code): a wait ran out. Another update (the in-cluster
	// watcher, a colleague) held a stack's lock for longer than --wait-for-lock (0 by
	// default), or `reconcile --wait` saw no result within --timeout.
	ExitTimeout = cmdutil.ExitTimeout
)

// ExitCode is the process exit status for err, the result of App().Run: 0 for nil, the code
// of a cli.ExitCoder anywhere in err's chain (the commands return one for each exit code
// above), else ExitFailed.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return ExitFailed
}

// Main runs the command line args (os.Args, the program's name first) with stderr as its error
// and log stream, and returns the process's exit status (ExitCode). The error a command ends
// with is the last thing written to stderr: under --log-format json one JSON record at level
// ERROR ({"msg":"exiting","error":...,"exitCode":N}), so that every line of the stream is JSON,
// else the line "pulumi-operator: <error>". An error found before the flags were read (an unknown
// flag) is written as text, as is one under an unknown --log-format: no format is known then.
func Main(args []string, stderr io.Writer) int {
	cfg := &config{}
	app := newApp(cfg)
	app.ErrWriter = stderr
	err := app.Run(args)
	if err == nil {
		return 0
	}
	code := ExitCode(err)
	if cfg.logFormat == "json" {
		slog.New(slog.NewJSONHandler(stderr, nil)).Error("exiting", "error", err.Error(), "exitCode", code)
	} else {
		fmt.Fprintln(stderr, "pulumi-operator:", err)
	}
	return code
}

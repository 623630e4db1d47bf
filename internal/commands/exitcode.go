package commands

import (
	"errors"

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

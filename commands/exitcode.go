package commands

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// Exit codes of the commands, distinct so scripts and CI jobs can branch on them. 0 is
// success; watch exits ExitFailed on any error.
const (
	// ExitFailed: a Pulumi operation failed (or any other error).
	ExitFailed = 1
	// ExitInvalidInput: a file, document or flag is wrong; nothing was run or written.
	ExitInvalidInput = 2
	// ExitLocked: another update (the in-cluster watcher, a colleague) holds a stack's lock.
	ExitLocked = 3
	// ExitChanges: `preview --expect-no-changes` found changes.
	ExitChanges = 4
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

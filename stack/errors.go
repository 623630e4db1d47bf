package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/diyfile"
	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNoPassphrase means the passphrase secrets provider is in use but neither
	// PULUMI_CONFIG_PASSPHRASE nor PULUMI_CONFIG_PASSPHRASE_FILE is set. Without this check
	// the CLI would fail late with a less clear message.
	ErrNoPassphrase = errors.New("no passphrase for stack secrets: set PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE (a file holding it, e.g. mounted from a Kubernetes Secret)")
	// ErrLocked means another update (an `up` from the command line, a second operator) holds
	// the stack's lock.
	// It is a wait, not a failure: retry later.
	ErrLocked = errors.New("stack is locked by another update")
	// ErrPluginMissing means the engine could not find a resource provider plugin (the
	// Kubernetes provider) and may not download one.
	ErrPluginMissing = errors.New("a Pulumi resource provider plugin is not installed")
	// ErrBackendUnavailable means the CLI could not open the state backend (a PostgreSQL
	// server down or refusing the password, an S3 endpoint unreachable): nothing ran, the
	// state is as it was; retry later. The error's text names the backend, without password.
	ErrBackendUnavailable = errors.New("the state backend is unavailable")
)

// OperationError is a failed CLI run, reduced to what a person needs: the CLI's "error:"
// lines (or the end of its output), not its whole progress log.
type OperationError struct {
	// Summary is the trimmed message, at most maxSummary bytes.
	Summary string
	// Locks are the locks a DIY backend (file, postgres, s3, ...) reported holding the stack
	// when the error is ErrLocked; Pulumi Cloud reports none.
	Locks []Lock
	// Err is the Automation API's error, with the full output (URL passwords redacted).
	Err  error
	kind error
}

// maxSummary bounds OperationError.Summary: status conditions and events must stay small.
const maxSummary = 1024

// clip cuts a summary to maxSummary bytes, marking the cut with "...".
func clip(s string) string {
	if len(s) > maxSummary {
		return s[:maxSummary] + "..."
	}
	return s
}

// Error is the Summary.
func (e *OperationError) Error() string { return e.Summary }

// Unwrap gives both the sentinel kind (ErrLocked, ErrPluginMissing, ErrBackendUnavailable)
// and the original error.
func (e *OperationError) Unwrap() []error {
	if e.kind != nil {
		return []error{e.kind, e.Err}
	}
	return []error{e.Err}
}

// classify turns err into an *OperationError: the summary of its text for people, and the
// sentinel of its kind when it carries one (a *kindError: the engine host's reply, or a diagnosed
// CLI run): ErrLocked with the locks, ErrBackendUnavailable, ErrPluginMissing, fence.ErrFenced;
// any other kind is a plain failure. An error without a kind is one no diagnosis could be had for
// (diagnose): on Pulumi Cloud, whose lock is its service's, only the Automation API's own test
// for its concurrent-update conflict (auto.IsConcurrentUpdateError, on auto's errors) makes it
// ErrLocked; anything else is a plain failure. nil stays nil.
func classify(err error) error {
	if err == nil {
		return nil
	}
	oe := &OperationError{Err: redactErr(err), Summary: summarize(redactPasswords(err.Error()))}
	var ke *kindError
	switch {
	case errors.As(err, &ke):
		switch ke.kind {
		case protocol.KindLocked:
			oe.kind, oe.Locks = ErrLocked, fromProtocolLocks(ke.locks)
		case protocol.KindBackendUnreachable:
			oe.kind = ErrBackendUnavailable
		case protocol.KindFenced:
			oe.kind = fence.ErrFenced
		case protocol.KindPluginMissing:
			oe.kind = ErrPluginMissing
			oe.Summary = pluginMissingSummary(oe.Summary)
		}
		if ke.repaired > 0 {
			oe.Summary = fmt.Sprintf("%s (removed %d torn metadata file(s) a killed pulumi process left; the next run reads the stack again)", oe.Summary, ke.repaired)
		}
	case auto.IsConcurrentUpdateError(err):
		oe.kind = ErrLocked
	}
	oe.Summary = clip(oe.Summary)
	return oe
}

// pluginMissingSummary is the summary of an ErrPluginMissing whose own text is summary.
func pluginMissingSummary(summary string) string {
	return "the Kubernetes provider plugin (pulumi-resource-kubernetes) is not installed: put it on PATH or install it with `pulumi plugin install resource kubernetes` (" + summary + ")"
}

// classifyStack is classify for an error of an operation on stackName, diagnosed first when it
// has no kind yet (diagnosed: not once ctx has ended). A missing provider plugin's summary says
// where this Manager's CLI looks (Manager.KubernetesPlugin).
func (m *Manager) classifyStack(ctx context.Context, stackName string, err error) error {
	cerr := classify(m.diagnosed(ctx, stackName, err, false, nil))
	var oe *OperationError
	if errors.As(cerr, &oe) && oe.kind == ErrPluginMissing {
		if _, ferr := m.KubernetesPlugin(); ferr != nil {
			oe.Summary = clip(ferr.Error())
		}
	}
	return cerr
}

// repairSidecars removes the torn metadata sidecars of stackName on a file:// backend
// (diyfile.RepairSidecars; nothing on any other backend), logs each file removed as a warning
// with slog's default logger, and returns them. A failure is logged, not returned: the
// operation's own error is the one to report.
func (m *Manager) repairSidecars(stackName string) []string {
	repaired, err := diyfile.RepairSidecars(m.backend.String(), m.cfg.Project, stackName)
	for _, f := range repaired {
		slog.Warn("removed a torn metadata file of the stack, left by a killed pulumi process", "stack", stackName, "file", f)
	}
	if err != nil {
		slog.Warn("could not repair the stack's metadata files", "stack", stackName, "err", err)
	}
	return repaired
}

// summarize keeps the lines of a CLI error that say what went wrong: its "error:" lines, each
// with the "* ..." items that follow it (how the engine lists a program's errors: "error: an
// unhandled error occurred: 1 error occurred:" and "* spec...: ..." on the next line).
func summarize(msg string) string {
	var keep []string
	seen := map[string]bool{}
	lines := strings.Split(msg, "\n")
	for i := 0; i < len(lines); i++ {
		l := trimStream(lines[i])
		if !strings.HasPrefix(l, "error:") {
			continue
		}
		for i+1 < len(lines) && strings.HasPrefix(trimStream(lines[i+1]), "* ") {
			i++
			l += " " + trimStream(lines[i])
		}
		if !seen[l] {
			seen[l] = true
			keep = append(keep, l)
		}
	}
	if len(keep) > 0 {
		return strings.Join(keep, "; ")
	}
	first, _, _ := bytes.Cut([]byte(strings.TrimSpace(msg)), []byte("\n"))
	return string(first)
}

// trimStream trims a line of a CLI error and the output stream's name the Automation API
// puts before the first line of each stream ("stderr: error: ...").
func trimStream(line string) string {
	l := strings.TrimSpace(line)
	for _, stream := range []string{"stdout:", "stderr:"} {
		l = strings.TrimSpace(strings.TrimPrefix(l, stream))
	}
	return l
}

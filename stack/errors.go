package stack

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol/diyfile"
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

// classify turns an Automation API error or a *cliError (a CLI run of engine) into an
// *OperationError carrying ErrLocked, ErrBackendUnavailable or ErrPluginMissing where they
// apply; nil stays nil. It must see the auto package's own error value: the auto.Is* helpers
// do not unwrap.
//
// A torn checkpoint read is a plain failure here: whether it is a lock's wait depends on the
// stack's lock, which only classifyStack can look at.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *replyError
	if errors.As(err, &re) {
		return re.operationError() // the engine host classified it
	}
	oe := &OperationError{Err: redactErr(err), Summary: summarize(redactPasswords(err.Error()))}
	switch {
	case auto.IsConcurrentUpdateError(err) || lockedByAnother(err):
		oe.kind = ErrLocked
		oe.Locks = parseLocks(err.Error())
	case backendUnavailable(err.Error()):
		oe.kind = ErrBackendUnavailable
	case pluginMissing(err.Error()):
		oe.kind = ErrPluginMissing
		oe.Summary = pluginMissingSummary(oe.Summary)
	}
	oe.Summary = clip(oe.Summary)
	return oe
}

// pluginMissingSummary is the summary of an ErrPluginMissing whose own text is summary.
func pluginMissingSummary(summary string) string {
	return "the Kubernetes provider plugin (pulumi-resource-kubernetes) is not installed: put it on PATH or install it with `pulumi plugin install resource kubernetes` (" + summary + ")"
}

// tornRead is how the CLI reports a checkpoint it read empty: the file backend can hand a
// reader an empty checkpoint while another process's update rewrites it (two updates of one
// stack at once).
const tornRead = "failed to load checkpoint: EOF"

// classifyStack is classify for an error of an operation on stackName. A missing provider
// plugin's message says where this Manager's CLI looks (Manager.KubernetesPlugin). A torn
// checkpoint read (tornRead) is ErrLocked, the same wait as a lock, with the locks as
// OperationError.Locks, only while the backend holds a lock on the stack (heldLocks, asked of
// the engine host): then another update is writing the checkpoint. With no lock held, without an
// engine host, or when the host cannot tell, it stays a plain failure: an empty checkpoint that
// nobody is writing is damage, which on a file:// backend is repaired here (repairSidecars) so
// that the retry reads the stack.
func (m *Manager) classifyStack(stackName string, err error) error {
	cerr := classify(err)
	var oe *OperationError
	if errors.As(cerr, &oe) && oe.kind == ErrPluginMissing {
		// Say where this Manager's CLI looks, and how to install it there.
		if _, ferr := m.KubernetesPlugin(); ferr != nil {
			oe.Summary = clip(ferr.Error())
		}
		return oe
	}
	var re *replyError
	if !errors.As(cerr, &oe) || errors.As(err, &re) {
		return cerr // the engine host looked at the locks itself, and repairs in its unlock
	}
	if oe.kind != nil || !strings.Contains(err.Error(), tornRead) {
		return cerr
	}
	held, locks, ok := m.heldLocks(stackName)
	if ok && held {
		oe.kind, oe.Locks = ErrLocked, locks
		return oe
	}
	// Nobody is writing the checkpoint, or nothing here can tell (no engine host): the empty
	// read is what a pulumi process killed while it rewrote a metadata sidecar leaves, and it
	// would fail every later run on the stack, `pulumi cancel` of the dead process's lock
	// included. The retry reads the stack again.
	if repaired := m.repairSidecars(stackName); len(repaired) > 0 {
		oe.Summary = clip(fmt.Sprintf("%s (removed %d torn metadata file(s) a killed pulumi process left; the next run reads the stack again)", oe.Summary, len(repaired)))
	}
	return oe
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

// backendUnavailable recognizes a CLI error that says the state backend could not be
// reached or opened: the DIY backends' open error ("unable to open bucket <url>: ...", and
// pkg/v3's PostgreSQL backend's "unable to open state database <url>: ...", e.g. PostgreSQL
// down or refusing the password), or the first read of a bucket (the backend's
// .pulumi/meta.yaml) failing to connect, which is how an unreachable S3 endpoint shows.
func backendUnavailable(msg string) bool {
	if strings.Contains(msg, "unable to open bucket") || strings.Contains(msg, "unable to open state database") {
		return true
	}
	return strings.Contains(msg, `read ".pulumi/meta.yaml"`) &&
		(strings.Contains(msg, "dial tcp") || strings.Contains(msg, "request send failed") || strings.Contains(msg, "no such host"))
}

// pluginMissing recognizes a CLI error that says the engine found no resource provider plugin
// (it may not download one: PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION, set by New).
func pluginMissing(msg string) bool {
	return strings.Contains(msg, "no resource plugin") ||
		strings.Contains(msg, "could not find latest version for provider") ||
		(strings.Contains(msg, "plugin") && strings.Contains(msg, "not found"))
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

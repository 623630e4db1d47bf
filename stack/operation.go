package stack

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Result describes one finished operation.
type Result struct {
	// Operation is "up", "preview", "refresh" or "destroy".
	Operation string
	Start     time.Time
	End       time.Time
	// Changes counts resources by kind of change: "create", "update", "delete", "same", ...
	Changes map[string]int
	// Outputs are the stack outputs after an up, secrets shown as "[secret]".
	Outputs map[string]string
	// StackMissing is set by Destroy when the stack did not exist in the backend: nothing was
	// destroyed (whatever the stack once created, if anything, is untouched).
	StackMissing bool
	// Recovered says, one line per entry, what became of the pending operations a killed
	// update had left in the stack before this operation ran (see settlePending); nil when
	// there were none.
	Recovered []string
	// created: this operation made the stack (RunOptions.Adopt applies).
	created bool
}

// program is the program an Up or Preview runs: opts.Adopt on a stack the operation created
// (res.created), otherwise program.
func (res *Result) program(program pulumi.RunFunc, opts RunOptions) pulumi.RunFunc {
	if res.created && opts.Adopt != nil {
		return opts.Adopt
	}
	return program
}

// Changed reports whether the operation created, updated, replaced or deleted anything.
func (r Result) Changed() bool {
	for op, n := range r.Changes {
		if op != string(apitype.OpSame) && n > 0 {
			return true
		}
	}
	return false
}

// RunOptions change how an operation runs. The zero value: no refresh, no diff, progress to
// Config.Progress (or suppressed), no color.
type RunOptions struct {
	// Refresh reads the live objects into the state before diffing (`pulumi up --refresh`), so
	// that changes made outside Pulumi (drift) are seen and undone. It costs one read per
	// resource. Up and Preview only; Refresh and Destroy ignore it. An up that creates the
	// stack skips it: a new stack holds nothing to read.
	Refresh bool
	// Diff shows a detailed diff of every change in the progress output (`--diff`). Up and
	// Preview only; Refresh and Destroy ignore it.
	Diff bool
	// Progress receives this operation's progress output instead of Config.Progress.
	Progress io.Writer
	// Color is the CLI's --color: "always", "never" (the default) or "auto".
	Color string
	// KeepHistory, when at least 1 and below Config.KeepHistory (or Config.KeepHistory is 0,
	// which keeps all), is how many of its newest updates the stack keeps in its history after
	// this up or refresh instead: the watcher's per-object state budget (infra.HistoryWithin),
	// so that a stack with a large checkpoint keeps fewer copies of it. The prune then runs
	// after every such operation, not every Config.KeepHistory-th. 0, or not below a nonzero
	// Config.KeepHistory: Config.KeepHistory.
	KeepHistory int
	// Adopt, when set, is the program Up and Preview run instead of theirs on a stack that did
	// not exist before the operation (Up created it; Preview creates one for itself and removes
	// it again): the program that takes the live objects into the new stack by import
	// (infra.ProgramAdopting), which is how a lost stack is rebuilt. On a stack that exists it
	// is never run, so an object the stack holds is never declared with an import ID (which
	// would make Pulumi refuse any replacement of it). Refresh and Destroy ignore it.
	Adopt pulumi.RunFunc
	// Background marks work no user waits on as they wait on a create or a change (a drift
	// repair, a requested refresh, a program upgrade): run as a pulumi CLI process, the process
	// and the provider plugins it starts get the lower CPU priority BackgroundNice, so that on a
	// busy machine the foreground ups of every namespace go first. The engine host's ups share one
	// process and keep its priority.
	Background bool
}

// BackgroundNice is the nice value (Linux setpriority: 0 normal, 19 lowest) that the pulumi
// processes of a RunOptions.Background run get: low enough that a foreground process on the same
// core gets most of it (the kernel's CFS weights fall by about 1.25x per step), not so low that
// background work stops while the foreground keeps the machine busy.
const BackgroundNice = 10

// keep is the history depth of an operation with opts (RunOptions.KeepHistory), and whether it
// is below Config.KeepHistory (a state budget's, pruned every time).
func (m *Manager) keep(opts RunOptions) (n int, budgeted bool) {
	if opts.KeepHistory > 0 && (m.cfg.KeepHistory < 1 || opts.KeepHistory < m.cfg.KeepHistory) {
		return opts.KeepHistory, true
	}
	return m.cfg.KeepHistory, false
}

// streams is where an operation's progress goes: opts.Progress, else Config.Progress, else
// nowhere (the CLI is then told to suppress it).
func (m *Manager) streams(opts RunOptions) []io.Writer {
	switch {
	case opts.Progress != nil:
		return []io.Writer{opts.Progress}
	case m.cfg.Progress != nil:
		return []io.Writer{m.cfg.Progress}
	}
	return nil
}

// colorOf is the CLI's --color for opts: "never" unless opts.Color says otherwise, so that
// logs and status messages hold no escape codes.
func colorOf(opts RunOptions) string {
	if opts.Color == "" {
		return "never"
	}
	return opts.Color
}

// ready makes sure stackName exists in the backend, with its workspace directory, and holds
// no pending operation of a killed update (settlePending), returning settlePending's report.
// It runs no CLI when this process already knows all that (isSettled: it created the stack,
// looked, or its last operation succeeded); otherwise it selects the stack, creating it when
// create is set, and looks. With the engine host, creating is a request to it, no CLI
// (initStack), and writes the stack's passphrase salt (writeSalt), and a stack the host finds
// is selected without a `stack init` first.
// found is false, with a nil error, when create is not set and the stack does not exist;
// created is true when ready made the stack. Errors are classified (*OperationError).
func (m *Manager) ready(ctx context.Context, stackName string, create bool) (recovered []string, found, created bool, err error) {
	if m.isSettled(stackName) {
		return nil, true, false, m.writeWorkspace(stackName)
	}
	initCLI := create
	if create {
		created, exists := m.initStack(ctx, stackName)
		if created {
			if err := m.writeWorkspace(stackName); err != nil {
				return nil, true, true, err
			}
			m.writeSalt(stackName)
			// A new stack holds no pending operation.
			m.recordSettled(stackName)
			return nil, true, true, nil
		}
		initCLI = !exists
	}
	st, created, err := m.openCreated(ctx, stackName, initCLI)
	if err != nil {
		if !create && auto.IsSelectStack404Error(err) {
			return nil, false, false, nil
		}
		return nil, false, false, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	recovered, err = m.settlePending(ctx, st, stackName)
	return recovered, true, created, err
}

// operate runs one engine operation on stackName once ready found it: run is the engine run.
// A stack removed behind this Manager's back since it last saw it (`pulumi stack rm` from a
// laptop) is readied again and run once more. It fills res's Recovered, End and Changes;
// found is ready's. A failed run marks the stack as possibly holding pending operations and
// returns the classified error, "<op> stack <name>: ...".
func (m *Manager) operate(ctx context.Context, stackName string, create bool, res *Result, run func() (engineOutcome, error)) (out engineOutcome, found bool, err error) {
	// A stack named by the rule before Name's moves to its object's name first (migrate.go).
	if err := m.settleName(ctx, stackName); err != nil {
		res.End = time.Now()
		return out, true, fmt.Errorf("%s stack %s: %w", res.Operation, stackName, err)
	}
	if res.Operation != "preview" {
		// With a previous passphrase configured: the stack's secrets under the current one
		// first (rotate.go), before anything reads its state; a no-op otherwise, and for a
		// stack that does not exist yet.
		if _, err := m.reencrypt(ctx, stackName); err != nil && !auto.IsSelectStack404Error(err) {
			res.End = time.Now()
			return out, true, fmt.Errorf("%s stack %s: %w", res.Operation, stackName, err)
		}
	}
	res.Recovered, found, res.created, err = m.ready(ctx, stackName, create)
	if err != nil || !found {
		res.End = time.Now()
		return out, found, err
	}
	out, err = run()
	if err != nil && stackNotFound(err) {
		m.recordPending(stackName)
		var again []string
		again, found, res.created, err = m.ready(ctx, stackName, create)
		res.Recovered = append(res.Recovered, again...)
		if err != nil || !found {
			res.End = time.Now()
			return out, found, err
		}
		out, err = run()
	}
	res.End = time.Now()
	if err != nil {
		m.recordPending(stackName)
		return out, true, fmt.Errorf("%s stack %s: %w", res.Operation, stackName, m.classifyStack(ctx, stackName, err))
	}
	res.Changes = out.changes
	return out, true, nil
}

// engineArgs are the flags of `pulumi up` (op "up") or `pulumi preview` for opts: --refresh and
// --diff where asked. Up also skips its own preview and confirmation (--yes --skip-preview),
// as the Automation API does.
func engineArgs(op string, opts RunOptions) []string {
	var args []string
	if op != "preview" {
		args = append(args, "--yes", "--skip-preview")
	}
	if opts.Refresh {
		args = append(args, "--refresh")
	}
	if opts.Diff {
		args = append(args, "--diff")
	}
	return args
}

package stack

import (
	"io"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
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
	// Recovered says, one line per entry, what became of the pending operations a killed
	// update had left in the stack before this operation ran (see settlePending); nil when
	// there were none.
	Recovered []string
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
	// resource. Up and Preview only; Refresh and Destroy ignore it.
	Refresh bool
	// Diff shows a detailed diff of every change in the progress output (`--diff`). Up and
	// Preview only; Refresh and Destroy ignore it.
	Diff bool
	// Progress receives this operation's progress output instead of Config.Progress.
	Progress io.Writer
	// Color is the CLI's --color: "always", "never" (the default) or "auto".
	Color string
}

// optionSet is one operation's constructors, from its auto option package (optup,
// optpreview, ...), for the settings every operation shares. The packages have one Option type
// each and no common interface, so each operation names its own constructors once (see
// upOptions and the like) and options builds the list from RunOptions. refresh and diff are nil
// for an operation that does not take them from RunOptions.
type optionSet[O any] struct {
	color    func(string) O
	progress func(...io.Writer) O
	suppress func() O
	refresh  func() O
	diff     func() O
}

// options is the operation's option list for opts: color, progress to streams (or suppressed
// when streams is nil), and refresh and diff where opts asks for them and the set has them.
func (s optionSet[O]) options(streams []io.Writer, opts RunOptions) []O {
	o := []O{s.color(colorOf(opts))}
	if streams != nil {
		o = append(o, s.progress(streams...))
	} else {
		o = append(o, s.suppress())
	}
	if opts.Refresh && s.refresh != nil {
		o = append(o, s.refresh())
	}
	if opts.Diff && s.diff != nil {
		o = append(o, s.diff())
	}
	return o
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

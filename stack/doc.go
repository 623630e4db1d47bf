// Package stack runs Pulumi through its Automation API: one stack per KindCustomHttp, against one
// state backend. It is the only package of the operator (tests aside) that imports Pulumi's
// Automation API (auto and its opt* packages; internal/boundaries enforces it); the rest of the
// operator sees this package's own types (Manager, Config, Result, RunOptions, OperationError, the
// sentinel errors, ...), never an auto type.
//
// A Manager holds one project (Config.Project), one backend (Config.BackendURL, parsed once by New:
// ParseBackend), one pulumi CLI and its environment, fixed by New. Each stack gets a local
// workspace directory of its own, Config.WorkRoot/<stack name>, opened afresh for each operation.
// Its operations on a stack, one file each (up.go, preview.go, refresh.go, destroy.go), return a
// Result; a failed pulumi run is an *OperationError (errors.go) that carries ErrLocked,
// ErrPluginMissing, ErrBackendUnavailable or fence.ErrFenced where one applies, with backend
// credentials redacted (redact.go). The backend's stacks are listed in stacks.go, their locks read
// and removed in lock.go. Before an up, refresh or destroy reads a stack, the Manager moves a stack
// named by the earlier naming rule to its name (migrate.go), re-encrypts its secrets under the
// current passphrase when a previous one is configured (rotate.go), and settles the pending
// operations a killed update left in it (pending.go).
//
// Everything the Manager has Pulumi's engine do to a stack goes through one interface, engine
// (engine.go): engine runs (up, preview, refresh, destroy) and protocol.Requests (a new stack's
// creation, the history pruning, the lookup and removal of a stack's locks, the diagnosis of a
// failed run). It has two implementations, chosen once by New. With Config.EngineHost set
// (pulumi-operator sets it to an engine host it finds beside its own binary or the pulumi CLI, or
// to --engine-host: commands/stackmanager.go), a DIY backend and the passphrase secrets provider,
// it is hostEngine (enginehost.go, engineproc.go): the requests and the ups that want no progress
// output (hostEngine.takes) go to the engine host, the pinned CLI's binary running the CLI's pkg/v3
// code (agent/enginehost) for many requests; the Manager replaces its process after
// engineHostRuns requests and stops it after engineHostIdle without one. It replies with what the
// CLI would have printed and the kind of failure. Otherwise it is cliPerRun: one process of the
// pinned CLI per run, and per request `pulumi operator-request`, the engine host's code again.
// Previews, refreshes, destroys and ups with progress output are CLI runs either way; when one
// fails, the Manager asks the host's classifier what kind of failure it was (diagnose.go: the same
// rules, applied to the backend and the run's event log), so every failure reaches the callers with
// a kind, never read from its text. The stack commands that have no engine run (select, export,
// import, rename, rm) are the CLI's either way, through the Automation API's PulumiCommand.
//
// A Manager is safe for concurrent use: operations on different stacks may run at once, and
// ListStacks beside any of them. Each runs its own CLI processes in a workspace directory no other
// call uses (a stack's own; a random one for ListStacks); the Manager's shared mutable state (which
// stacks are settled and named, the counts of unpruned updates, the stack salt, Pulumi Cloud's
// default organization, the running processes, the engine host process) is behind a mutex, an
// atomic or a sync.Once. Two updates of one stack never run at once: Pulumi's stack lock fails the
// second with ErrLocked, except that two this Manager sends to one engine host process run one
// after the other (agent/enginehost).
package stack

// Package stack runs Pulumi through its Automation API: one stack per KindCustomHttp, against
// one state backend. It is the only package of the operator (tests aside) that imports
// Pulumi's Automation API (auto and its opt* packages; internal/boundaries enforces it); the
// rest of the operator sees Manager, Result, RunOptions and the sentinel errors, never an
// auto type.
//
// A Manager holds one project (Config.Project), one backend (Config.BackendURL), one pulumi
// CLI and its environment, fixed by New. Each stack gets a local workspace directory of its
// own, Config.WorkRoot/<stack name>, opened afresh for each operation. Its operations, one file
// each (up.go, preview.go, refresh.go, destroy.go, stacks.go, lock.go), return a Result
// and, on failure, an *OperationError (errors.go) that carries ErrLocked, ErrPluginMissing or
// ErrBackendUnavailable where one applies, with backend passwords redacted (redact.go).
// Before an update runs on a stack a killed update left pending operations in, the Manager
// settles them (pending.go).
//
// With Config.EngineHost set (pulumi-operator sets it to the engine host beside its binary), an
// up that wants no progress output runs in the engine host instead (enginehost.go): one
// long-lived process of the pinned CLI's pkg/v3, to which the Manager sends each up, each new
// stack's creation, the history pruning and the stack's locks (which are held; removing them:
// CancelLock); it replies with what the CLI would have printed and the kind of failure, so
// errors are classified alike. Preview, refresh, destroy and the stack commands stay CLI runs.
//
// A Manager is safe for concurrent use: operations on different stacks may run at once, and
// ListStacks beside any of them. Each runs its own CLI processes in a workspace directory no
// other call uses (a stack's own; a random one for ListStacks' throwaway stack); the Manager's
// only shared mutable state, which stacks are settled, is behind a mutex. Updates of one stack
// are serialized by Pulumi's stack lock: a second one fails with ErrLocked.
package stack

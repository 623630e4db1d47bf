// Package protocol is how the operator (package stack of the root module) talks to its engine
// host (agent/enginehost): the operations, the kinds of error a reply carries, and how an engine
// run's events become the change counts and outputs the operator reports. Both sides import it;
// it imports the standard library, gRPC and protobuf only, so that neither side's dependencies
// reach the other (the engine host links the pinned CLI's pkg/v3, the operator does not).
//
// The wire is the gRPC service Engine of enginepb/engine.proto (generated code in package
// enginepb). Request and Reply are the Go shapes both sides work with; wire.go converts them to
// and from the service's messages, in one place for both sides, and a failed Reply travels as a
// gRPC status whose detail is an enginepb.Error. The design record is
// docs/design/engine-host.md.
package protocol

import (
	"encoding/json"
	"fmt"
	"time"
)

// Op names what a Request asks for.
type Op string

// The operations the engine host runs.
const (
	// OpUp is `pulumi up --yes --skip-preview` of Request.Stack in Request.Dir with the program
	// served at Request.Client; with Keep > 0 the stack's history is pruned after a success.
	OpUp Op = "up"
	// OpInit creates Request.Stack as `pulumi stack init` does on a DIY backend, without the
	// initial state that names a secrets provider (the operator writes the stack's salt; the
	// first up records it). Reply.Created says whether it made the stack or found it.
	OpInit Op = "init"
	// OpPrune keeps the Keep newest history entries and backups of Request.Stack.
	OpPrune Op = "prune"
	// OpLocks reads the locks other processes hold on Request.Stack, whether or not the stack
	// exists: Reply.Locks lists those whose lock file parses, Reply.Held says whether any lock
	// file exists (one still being written is empty and is a lock all the same). With no
	// Request.Stack it lists the locks of every stack of the project (Reply.Locks, each with its
	// Stack).
	OpLocks Op = "locks"
	// OpUnlock removes the locks Request.Locks names (by Lock.ID) from Request.Stack, or every
	// lock on it when Request.Locks is empty (`pulumi cancel`), whether or not the stack exists (a
	// killed `stack init` or `stack rm` leaves the lock of a stack that does not), after removing
	// the stack's torn metadata sidecars on a file:// backend (Reply.Repaired). Only for locks
	// whose owners are known to be gone: an update still running would go on unlocked.
	OpUnlock Op = "unlock"
	// OpDiagnose says what kind of failure a pulumi CLI run of the operator on Request.Stack had
	// (Reply.Kind, never KindNone; Reply.Locks when it is KindLocked), by the rules of the host's
	// own failures applied to what the backend holds now and to what the run's event log said
	// (Request.Steps, Request.Diagnostics). With no lock held it first removes the stack's torn
	// metadata sidecars on a file:// backend (Reply.Repaired), as OpUnlock does. The request
	// itself fails only when it is bad; with no Request.Stack only the backend is looked at.
	OpDiagnose Op = "diagnose"
	// OpExport reads the stack's deployment as `pulumi stack export` prints it (Reply.Deployment),
	// without its passphrase.
	OpExport Op = "export"
)

// RequestCommand is the engine host's service as a command of the pinned CLI (agent/cmd/pulumi),
// for an operator that runs no engine host (--engine-host none, or none beside the CLI): `pulumi
// operator-request <project>`, with the backend in PULUMI_BACKEND_URL as for any CLI run, one or
// more Requests as JSON lines on standard input until its end (any Op but OpUp, which is the CLI's
// own `pulumi up`), run at once with the same code as the host's. It prints one Reply per Request
// as a JSON line on standard output, in the order of the requests, whatever the outcomes, and
// exits with the first non-zero Code among them (0 when all succeeded): a caller that reads no
// Reply knows the CLI is not this project's build. Its one argument is positional so that such a
// CLI refuses the command itself, not a flag first.
const RequestCommand = "operator-request"

// Request is one call to the engine host: Op says which of the service's methods (Call and
// StartUp send it).
type Request struct {
	Op    Op     `json:"op,omitempty"`
	Stack string `json:"stack,omitempty"`
	// Dir is the stack's workspace directory (absolute), holding Pulumi.yaml and
	// Pulumi.<stack>.yaml, as the CLI's working directory would.
	Dir string `json:"dir,omitempty"`
	// Client is the host:port of the LanguageRuntime server that serves the program (the CLI's
	// --client).
	Client  string `json:"client,omitempty"`
	Refresh bool   `json:"refresh,omitempty"`
	// Locks are the IDs (Lock.ID) of the locks an OpUnlock removes; empty: all of them.
	Locks []string `json:"locks,omitempty"`
	// Keep, when positive, prunes the stack's history and backups to its Keep newest updates
	// after an up that succeeded, and is what an OpPrune keeps.
	Keep int `json:"keep,omitempty"`
	// Steps and Diagnostics are what the event log of the CLI run an OpDiagnose asks about said:
	// whether it holds a resource step (the run held the stack's lock), and the messages of its
	// error diagnostics.
	Steps       bool     `json:"steps,omitempty"`
	Diagnostics []string `json:"diagnostics,omitempty"`
}

// Reply is the engine host's answer to one Request: a method's reply message, or the Error of a
// failed call (ReplyOfError). The request command (RequestCommand) prints one per request as a JSON
// line.
type Reply struct {
	// Code is the exit code `pulumi up` would have had: 0 on success.
	Code int `json:"code"`
	// Kind says what kind of failure a non-zero Code is; KindNone on success. It is OpDiagnose's
	// result too (with Code 0: the diagnosis itself succeeded).
	Kind ErrorKind `json:"kind,omitempty"`
	// Locks are the locks other processes hold on the stack when Kind is KindLocked (a failed
	// request's, or OpDiagnose's result), and OpLocks' result.
	Locks []Lock `json:"locks,omitempty"`
	// Stdout and Stderr are what the CLI would have printed with --suppress-progress
	// --color=never: the display, and "error: ..." lines. They are for people; the operator
	// branches on Kind.
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Created is OpInit's result: true when the request made the stack, false when it existed.
	Created bool `json:"created,omitempty"`
	// Held is OpLocks' result: at least one lock file exists on the stack.
	Held bool `json:"held,omitempty"`
	// Repaired lists the torn metadata sidecars OpUnlock or OpDiagnose removed (paths in the
	// file backend's directory), for the operator to log.
	Repaired []string `json:"repaired,omitempty"`
	// Changes counts the engine's steps by operation ("create", "update", "same", ...), the
	// engine's summary event (Changes).
	Changes map[string]int `json:"changes,omitempty"`
	// Outputs are the stack's outputs after the up, each as OutputString shows it.
	Outputs map[string]string `json:"outputs,omitempty"`
	// Pruned is how many history and backup files the request deleted (Keep); PruneError why
	// pruning failed (the up itself did not).
	Pruned     int    `json:"pruned,omitempty"`
	PruneError string `json:"pruneError,omitempty"`
	// Deployment is OpExport's result: the JSON of an apitype.UntypedDeployment (version,
	// deployment, secrets encrypted), as `pulumi stack export` prints it.
	Deployment json.RawMessage `json:"deployment,omitempty"`
}

// ErrorKind classifies a failed request, so that the operator decides what to do (wait, retry
// with backoff, tell the user what to install) without reading the error's text.
type ErrorKind string

// The kinds of failure. A kind the operator does not know is treated as KindFailed.
const (
	KindNone ErrorKind = ""
	// KindLocked: another process holds the stack's lock (Reply.Locks names them). A wait, not
	// a failure.
	KindLocked ErrorKind = "locked"
	// KindPluginMissing: a resource provider plugin the program needs is not installed, and may
	// not be downloaded.
	KindPluginMissing ErrorKind = "plugin-missing"
	// KindBackendUnreachable: the state backend could not be read or written (a database down,
	// an endpoint unreachable, a refused password). Nothing ran; retry later.
	KindBackendUnreachable ErrorKind = "backend-unreachable"
	// KindStackMissing: the backend holds no stack of that name.
	KindStackMissing ErrorKind = "stack-missing"
	// KindCancelled: the request was cancelled (a cancel line, or another request of its stack
	// held it until then). The state is written and the lock released.
	KindCancelled ErrorKind = "cancelled"
	// KindFenced: the request was refused because the lease the operator handed down to this
	// process has expired (LeaseValid): the operator may no longer lead. Nothing ran.
	KindFenced ErrorKind = "fenced"
	// KindBadRequest: the request itself is wrong (unknown op, a missing field). A bug in the
	// operator, not something a user can fix.
	KindBadRequest ErrorKind = "bad-request"
	// KindFailed: anything else: the program, a provider or the engine failed. Stderr says what.
	KindFailed ErrorKind = "failed"
)

// Lock is one lock a DIY backend holds on a stack: the JSON of its lock file
// (.pulumi/locks/<organization>/<project>/<stack>/<id>.json, pkg/v3 backend/diy lockContent).
type Lock struct {
	// ID is the lock file's name without ".json": the lock ID of the DIY backend instance that
	// took it (a random UUID per instance, pkg/v3 backend/diy lockID), so it names this one lock.
	ID string `json:"id,omitempty"`
	// Stack is the stack it locks, in an OpLocks reply for every stack; "" otherwise.
	Stack     string    `json:"stack,omitempty"`
	Pid       int       `json:"pid"`
	Username  string    `json:"username"`
	Hostname  string    `json:"hostname"`
	Timestamp time.Time `json:"timestamp"`
}

// StackType is the type token of a stack's root resource, whose outputs are the stack's.
const StackType = "pulumi:pulumi:Stack"

// SecretOutput is how a secret output is shown: never its value.
const SecretOutput = "[secret]"

// OutputString is how Reply.Outputs (and the operator's results of CLI runs) show one output
// value v, a JSON-shaped value (string, float64, bool, nil, []any, map[string]any): SecretOutput
// when secret, else fmt.Sprint(v), as the Automation API's Outputs shows values.
func OutputString(v any, secret bool) string {
	if secret {
		return SecretOutput
	}
	return fmt.Sprint(v)
}

// Changes is an engine summary event's step counts with string keys; nil for nil. K is the
// engine's operation type (pkg/v3 display.StepOp, or apitype.OpType in an event log).
func Changes[K ~string](counts map[K]int) map[string]int {
	if counts == nil {
		return nil
	}
	out := make(map[string]int, len(counts))
	for op, n := range counts {
		out[string(op)] = n
	}
	return out
}

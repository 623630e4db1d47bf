package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// engine is everything the Manager has done to a stack by Pulumi's engine, one interface with two
// implementations chosen once by New:
//
//   - cliPerRun, one pinned pulumi CLI process per run and per request (`pulumi up`, `pulumi
//     preview`, ..., `pulumi operator-request`): --engine-host none, Pulumi Cloud, a secrets
//     provider other than the passphrase;
//   - hostEngine, the long-lived engine host process for the ups that want no progress output and
//     for every request, the rest as cliPerRun does it.
//
// Stack commands that neither has an engine run for (select, export, import, rename, rm) are the
// CLI's in both, through the Automation API's PulumiCommand (Manager.cmd).
type engine interface {
	// run runs r, one engine operation on one stack, and returns what its event log said. On
	// failure the error is a *kindError when its kind is known already (the engine host's reply),
	// else the run's *cliError, and the outcome holds what the log said of the failed run (steps,
	// diagnostics) for its diagnosis (Manager.diagnosed).
	run(ctx context.Context, r engineRun) (engineOutcome, error)
	// request sends req (any Op but protocol.OpUp) and returns the reply, which may be a failure's
	// (Code non-zero, with its Kind). Errors: errNoRequests when nothing can answer it; no reply
	// could be had (ctx ended, the fence refused, the process could not be started, died, or printed
	// none).
	request(ctx context.Context, req protocol.Request) (protocol.Reply, error)
	// pruneEvery is how many of a stack's ups and refreshes run as CLI processes go between two
	// prunes of its history (Manager.pruneDue): 1 when a request costs no process, else
	// Config.KeepHistory, so that each prune's process is paid once per KeepHistory runs.
	pruneEvery() int
	// close stops a long-lived process, if one runs, once its runs have finished.
	close()
}

// engineRun is one engine operation: `pulumi <op> <args>` on stack, with the program served at
// client (serveProgram) and progress where opts says.
type engineRun struct {
	stack, op, client string
	args              []string
	opts              RunOptions
}

// engineOutcome is what one engine run's event log says.
type engineOutcome struct {
	// changes counts resources by kind of change (the engine's summary event).
	changes map[string]int
	// outputs are the stack resource's outputs, secrets as "[secret]"; nil when the log
	// has none (preview, refresh, destroy).
	outputs map[string]string
	// steps: the log holds a resource step (the run held the stack's lock); diagnostics are the
	// messages of its error diagnostics. Both are what a failed run's diagnosis is given.
	steps       bool
	diagnostics []string
	// pruned: the run pruned the stack's history itself (the engine host's up).
	pruned bool
}

// cliError is a failed CLI run: the command, its exit code and both output streams. Its
// text has the shape of the Automation API's own errors ("...: exit status N\ncode: N\n
// stdout: ...\nstderr: ..."), so that summarize reads both alike, for people.
type cliError struct {
	op             string
	code           int
	stdout, stderr string
	err            error
}

func (e *cliError) Error() string {
	return fmt.Sprintf("failed to run %s: %v\ncode: %d\nstdout: %s\nstderr: %s", e.op, e.err, e.code, e.stdout, e.stderr)
}

func (e *cliError) Unwrap() error { return e.err }

// stackNotFound reports whether err is a failed run of this package on a stack the backend does
// not hold (removed behind this Manager's back, e.g. `pulumi stack rm`): its kind, from the
// engine host's reply or a diagnosis, is protocol.KindStackMissing.
func stackNotFound(err error) bool {
	var ke *kindError
	return errors.As(err, &ke) && ke.kind == protocol.KindStackMissing
}

// engine runs one engine operation, `pulumi <op> <args>` on stackName, through the Manager's
// engine (m.eng: the engine host or a CLI process, which must find the stack's workspace directory
// with its Pulumi.yaml: open made it), with program served to it in-process (runtimeServer): refresh
// and destroy get emptyProgram, which the engine asks only for its plugins. A failed run is
// diagnosed (diagnosed); after an up or refresh the stack's history is pruned unless the run did
// it itself. Errors: a *kindError once diagnosed (the engine host's reply is one already), else
// the run's *cliError; a log that cannot be read.
func (m *Manager) engine(ctx context.Context, stackName, op string, program pulumi.RunFunc, args []string, opts RunOptions) (engineOutcome, error) {
	srv, err := serveProgram(program)
	if err != nil {
		return engineOutcome{}, fmt.Errorf("serve the program to the engine: %w", err)
	}
	defer srv.close()
	out, err := m.eng.run(ctx, engineRun{stack: stackName, op: op, client: srv.address, args: args, opts: opts})
	if err != nil {
		return engineOutcome{}, m.diagnosed(ctx, stackName, err, out.steps, out.diagnostics)
	}
	if !out.pruned && (op == "up" || op == "refresh") {
		m.prune(ctx, stackName, opts) // the history entry this run wrote
	}
	return out, nil
}

// readEventLog reads an engine event log (one JSON apitype.EngineEvent per line) for the
// summary's change counts and the outputs of the stack resource (type pulumi:pulumi:Stack).
func readEventLog(path string) (engineOutcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return engineOutcome{}, fmt.Errorf("read the engine's event log: %w", err)
	}
	defer f.Close()
	return parseEventLog(f)
}

// parseEventLog is readEventLog on an open log. Secret outputs are shown as "[secret]" (the
// CLI writes the log without secrets; a secret value is an object with a "4dabf18193072939
// 515e22adb298388d" signature key when shown); other outputs are fmt.Sprint of their JSON
// value, as auto's Outputs gives them.
func parseEventLog(r io.Reader) (engineOutcome, error) {
	var out engineOutcome
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024) // an event holds a resource's whole state
	for sc.Scan() {
		var e apitype.EngineEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("read the engine's event log: %w", err)
		}
		switch {
		case e.SummaryEvent != nil:
			out.changes = protocol.Changes(e.SummaryEvent.ResourceChanges)
		case e.ResourcePreEvent != nil:
			out.steps = true
		case e.DiagnosticEvent != nil && e.DiagnosticEvent.Severity == "error":
			out.diagnostics = append(out.diagnostics, e.DiagnosticEvent.Message)
		case e.ResOutputsEvent != nil && e.ResOutputsEvent.Metadata.Type == protocol.StackType &&
			e.ResOutputsEvent.Metadata.New != nil && !e.ResOutputsEvent.Planning:
			outs := e.ResOutputsEvent.Metadata.New.Outputs
			out.outputs = make(map[string]string, len(outs))
			for k, v := range outs {
				out.outputs[k] = outputString(v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read the engine's event log: %w", err)
	}
	return out, nil
}

// secretSig is the key that marks a secret value in Pulumi's JSON (resource.SigKey with
// resource.SecretSig as its value).
const secretSig = "4dabf18193072939515e22adb298388d"

// outputString is how Result.Outputs shows one output value of an event log: the engine host's
// rule (protocol.OutputString), a secret told by its signature key.
func outputString(v any) string {
	m, ok := v.(map[string]any)
	_, secret := m[secretSig]
	return protocol.OutputString(v, ok && secret)
}

// runtimeServer serves one program to the engine: the LanguageRuntime gRPC service that the
// CLI calls back through --client. Hand-written because the Automation API's own server
// (auto's languageRuntimeServer) is unexported and only reachable through Stack.Up and the
// like, which add the CLI runs this file avoids. Like auto's, it runs the program with
// pulumi.RunWithContext, declares no plugins (the engine loads the provider when the program
// registers its first resource) and turns a panic into the run's error.
type runtimeServer struct {
	pulumirpc.UnimplementedLanguageRuntimeServer
	program pulumi.RunFunc
	address string
	cancel  chan bool
	done    <-chan error
}

// serveProgram starts a runtimeServer for program on a free 127.0.0.1 port.
func serveProgram(program pulumi.RunFunc) (*runtimeServer, error) {
	s := &runtimeServer{program: program, cancel: make(chan bool)}
	h, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Cancel: s.cancel,
		Init: func(srv *grpc.Server) error {
			pulumirpc.RegisterLanguageRuntimeServer(srv, s)
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	s.address, s.done = fmt.Sprintf("127.0.0.1:%d", h.Port), h.Done
	return s, nil
}

// close stops the server once the CLI has exited (so no Run is in flight).
func (s *runtimeServer) close() {
	close(s.cancel)
	<-s.done
}

// GetRequiredPlugins declares none: the engine loads a provider when a resource needs it.
func (s *runtimeServer) GetRequiredPlugins(context.Context, *pulumirpc.GetRequiredPluginsRequest) (*pulumirpc.GetRequiredPluginsResponse, error) {
	return &pulumirpc.GetRequiredPluginsResponse{}, nil
}

// GetPluginInfo answers the engine's version question; the version is not checked.
func (s *runtimeServer) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: "1.0.0"}, nil
}

// InstallDependencies has nothing to install: the program is compiled into this process.
func (s *runtimeServer) InstallDependencies(*pulumirpc.InstallDependenciesRequest, pulumirpc.LanguageRuntime_InstallDependenciesServer) error {
	return nil
}

// Run runs the program against the engine's resource monitor. A program error (or panic)
// is the response's Error, which the engine reports as the update's failure.
func (s *runtimeServer) Run(ctx context.Context, req *pulumirpc.RunRequest) (*pulumirpc.RunResponse, error) {
	var engineAddr string
	if len(req.GetArgs()) > 0 {
		engineAddr = req.GetArgs()[0]
	}
	pctx, err := pulumi.NewContext(ctx, pulumi.RunInfo{
		EngineAddr:       engineAddr,
		MonitorAddr:      req.GetMonitorAddress(),
		Config:           req.GetConfig(),
		ConfigSecretKeys: req.GetConfigSecretKeys(),
		Project:          req.GetProject(),
		Stack:            req.GetStack(),
		Parallel:         req.GetParallel(),
		DryRun:           req.GetDryRun(),
		Organization:     req.GetOrganization(),
	})
	if err != nil {
		return nil, err
	}
	defer pctx.Close()
	err = func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("program panicked: %v", r)
			}
		}()
		return pulumi.RunWithContext(pctx, s.program)
	}()
	if err != nil {
		return &pulumirpc.RunResponse{Error: err.Error()}, nil
	}
	return &pulumirpc.RunResponse{}, nil
}

package protocol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
)

// The conversions between Request/Reply and the Engine service's messages, for both sides: the
// operator's client (package stack) and the host's server (agent/enginehost).

// maxErrorText is the most of a failed call's stdout or stderr that its Error carries (the last
// bytes: a failure's "error:" lines come last). The Error travels in the status's trailer, and
// gRPC refuses a trailer over its peer's header list limit (16 MiB by default).
const maxErrorText = 1 << 20

// kinds maps each ErrorKind to the service's enum; KindNone has none.
var kinds = map[ErrorKind]enginepb.ErrorKind{
	KindFailed:             enginepb.ErrorKind_ERROR_KIND_FAILED,
	KindLocked:             enginepb.ErrorKind_ERROR_KIND_LOCKED,
	KindPluginMissing:      enginepb.ErrorKind_ERROR_KIND_PLUGIN_MISSING,
	KindBackendUnreachable: enginepb.ErrorKind_ERROR_KIND_BACKEND_UNREACHABLE,
	KindStackMissing:       enginepb.ErrorKind_ERROR_KIND_STACK_MISSING,
	KindCancelled:          enginepb.ErrorKind_ERROR_KIND_CANCELLED,
	KindFenced:             enginepb.ErrorKind_ERROR_KIND_FENCED,
	KindBadRequest:         enginepb.ErrorKind_ERROR_KIND_BAD_REQUEST,
}

// codesByKind is the gRPC status code of a failure of each kind, for gRPC's own tooling and
// logs; the operator reads the Error detail, not the code.
var codesByKind = map[ErrorKind]codes.Code{
	KindFailed:             codes.Unknown,
	KindLocked:             codes.Aborted,
	KindPluginMissing:      codes.FailedPrecondition,
	KindBackendUnreachable: codes.Unavailable,
	KindStackMissing:       codes.NotFound,
	KindCancelled:          codes.Canceled,
	KindFenced:             codes.PermissionDenied,
	KindBadRequest:         codes.InvalidArgument,
}

// kindOf is the ErrorKind of k; KindFailed for one this side does not know.
func kindOf(k enginepb.ErrorKind) ErrorKind {
	for kind, v := range kinds {
		if v == k {
			return kind
		}
	}
	return KindFailed
}

// KindToProto is k as the service's enum: ERROR_KIND_FAILED for a kind it has no value of
// (KindNone among them).
func KindToProto(k ErrorKind) enginepb.ErrorKind {
	if v, ok := kinds[k]; ok {
		return v
	}
	return enginepb.ErrorKind_ERROR_KIND_FAILED
}

// ErrorStatus is the gRPC status error of r, a failed Reply (Code non-zero): its kind's code,
// the last line of r.Stderr as the message, and an enginepb.Error detail holding the kind, the
// code, the locks and the output (each clipped to its last maxErrorText bytes).
func ErrorStatus(r Reply) error {
	kind := r.Kind
	if _, ok := kinds[kind]; !ok {
		kind = KindFailed
	}
	st := status.New(codesByKind[kind], lastLine(r.Stderr))
	detail := &enginepb.Error{Kind: kinds[kind], Code: int32(r.Code), Locks: LocksToProto(r.Locks), Stdout: tail(r.Stdout), Stderr: tail(r.Stderr)}
	if with, err := st.WithDetails(detail); err == nil {
		st = with
	}
	return st.Err()
}

// ReplyOfError is the failed Reply an Engine call's error carries (ErrorStatus's detail); ok is
// false for an error without one: the call failed in transport (the host died, the connection
// broke, the caller's context ended), and nothing is known of the run.
func ReplyOfError(err error) (r Reply, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return Reply{}, false
	}
	for _, d := range st.Details() {
		if e, isError := d.(*enginepb.Error); isError {
			code := int(e.GetCode())
			if code == 0 {
				code = 1
			}
			return Reply{Code: code, Kind: kindOf(e.GetKind()), Locks: LocksFromProto(e.GetLocks()), Stdout: e.GetStdout(), Stderr: e.GetStderr()}, true
		}
	}
	return Reply{}, false
}

// ToUpRequest is req (OpUp) as the Up call's request.
func ToUpRequest(req Request) *enginepb.UpRequest {
	return &enginepb.UpRequest{Stack: req.Stack, Dir: req.Dir, Client: req.Client, Refresh: req.Refresh, Keep: int32(req.Keep)}
}

// FromUpRequest is the Request (OpUp) of an Up call's request.
func FromUpRequest(m *enginepb.UpRequest) Request {
	return Request{Op: OpUp, Stack: m.GetStack(), Dir: m.GetDir(), Client: m.GetClient(), Refresh: m.GetRefresh(), Keep: int(m.GetKeep())}
}

// ToUpReply is r, a successful up's Reply, as the Up call's reply.
func ToUpReply(r Reply) *enginepb.UpReply {
	changes := make(map[string]int32, len(r.Changes))
	for op, n := range r.Changes {
		changes[op] = int32(n)
	}
	return &enginepb.UpReply{Changes: changes, Outputs: r.Outputs, Pruned: int32(r.Pruned), PruneError: r.PruneError, Stdout: r.Stdout, Stderr: r.Stderr}
}

// FromUpReply is the Reply of an Up call's reply.
func FromUpReply(m *enginepb.UpReply) Reply {
	var changes map[string]int
	if len(m.GetChanges()) > 0 {
		changes = make(map[string]int, len(m.GetChanges()))
		for op, n := range m.GetChanges() {
			changes[op] = int(n)
		}
	}
	var outputs map[string]string
	if len(m.GetOutputs()) > 0 {
		outputs = maps.Clone(m.GetOutputs())
	}
	return Reply{Changes: changes, Outputs: outputs, Pruned: int(m.GetPruned()), PruneError: m.GetPruneError(), Stdout: m.GetStdout(), Stderr: m.GetStderr()}
}

// LocksToProto is locks as the service's messages; nil for none.
func LocksToProto(locks []Lock) []*enginepb.Lock {
	if len(locks) == 0 {
		return nil
	}
	out := make([]*enginepb.Lock, len(locks))
	for i, l := range locks {
		out[i] = &enginepb.Lock{Id: l.ID, Stack: l.Stack, Pid: int64(l.Pid), Username: l.Username, Hostname: l.Hostname, Timestamp: timestamppb.New(l.Timestamp)}
	}
	return out
}

// LocksFromProto is the Locks of the service's messages; nil for none.
func LocksFromProto(locks []*enginepb.Lock) []Lock {
	if len(locks) == 0 {
		return nil
	}
	out := make([]Lock, len(locks))
	for i, l := range locks {
		out[i] = Lock{ID: l.GetId(), Stack: l.GetStack(), Pid: int(l.GetPid()), Username: l.GetUsername(), Hostname: l.GetHostname()}
		if l.GetTimestamp() != nil {
			out[i].Timestamp = l.GetTimestamp().AsTime()
		}
	}
	return out
}

// ErrNoReply is the error of an Up call that ended without a reply or an error (a host that
// broke the protocol).
var ErrNoReply = errors.New("the engine host ended the call without a reply")

// tail is s's last maxErrorText bytes.
func tail(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return s[len(s)-maxErrorText:]
}

// lastLine is the last non-empty line of s, or "failed" when s has none.
func lastLine(s string) string {
	for s != "" {
		i := len(s) - 1
		for i >= 0 && s[i] != '\n' {
			i--
		}
		if line := s[i+1:]; line != "" {
			return line
		}
		s = s[:max(i, 0)]
	}
	return "failed"
}

// Call runs req, a request of any Op but OpUp, as its Engine method on c and returns the reply:
// the method's reply, or for a failed call the Reply of its Error (Code non-zero). err is a call
// that failed in transport (ReplyOfError's false): ctx ended, the host died or is not there.
func Call(ctx context.Context, c enginepb.EngineClient, req Request) (Reply, error) {
	var r Reply
	var err error
	switch req.Op {
	case OpInit:
		var m *enginepb.InitReply
		if m, err = c.Init(ctx, &enginepb.InitRequest{Stack: req.Stack}); err == nil {
			r.Created = m.GetCreated()
		}
	case OpPrune:
		var m *enginepb.PruneReply
		if m, err = c.Prune(ctx, &enginepb.PruneRequest{Stack: req.Stack, Keep: int32(req.Keep)}); err == nil {
			r.Pruned = int(m.GetPruned())
		}
	case OpLocks:
		var m *enginepb.LocksReply
		if m, err = c.Locks(ctx, &enginepb.LocksRequest{Stack: req.Stack}); err == nil {
			r.Held, r.Locks = m.GetHeld(), LocksFromProto(m.GetLocks())
		}
	case OpUnlock:
		var m *enginepb.UnlockReply
		if m, err = c.Unlock(ctx, &enginepb.UnlockRequest{Stack: req.Stack, Locks: req.Locks}); err == nil {
			r.Repaired = m.GetRepaired()
		}
	case OpDiagnose:
		var m *enginepb.DiagnoseReply
		if m, err = c.Diagnose(ctx, &enginepb.DiagnoseRequest{Stack: req.Stack, Steps: req.Steps, Diagnostics: req.Diagnostics}); err == nil {
			r.Kind, r.Locks, r.Repaired = kindOf(m.GetKind()), LocksFromProto(m.GetLocks()), m.GetRepaired()
		}
	case OpExport:
		var m *enginepb.ExportReply
		if m, err = c.Export(ctx, &enginepb.ExportRequest{Stack: req.Stack}); err == nil {
			r.Deployment = m.GetDeployment()
		}
	default:
		return Reply{}, fmt.Errorf("call the engine host: operation %q is not a unary call (OpUp is StartUp's)", req.Op)
	}
	if err != nil {
		if failed, ok := ReplyOfError(err); ok {
			return failed, nil
		}
		return Reply{}, err
	}
	return r, nil
}

// UpCall is one Up call under way (StartUp).
type UpCall struct {
	done  chan struct{}
	reply Reply
	err   error

	mu sync.Mutex
	// stream is the call's stream once its request is sent; nil until then.
	stream enginepb.Engine_UpClient
	// cancelled: Cancel was called (once the stream is there, the Cancel message is sent).
	cancelled bool
}

// StartUp starts req (OpUp) as an Up call on c and returns it at once: the call connects, sends
// its request and waits for its reply in a goroutine of its own, so that a host that never
// answers (not even its connection) holds nobody. ctx is the hard stop: ending it ends the call
// at once, whatever the run does (Cancel is the graceful stop). Result says how it ended.
func StartUp(ctx context.Context, c enginepb.EngineClient, req Request) *UpCall {
	u := &UpCall{done: make(chan struct{})}
	go u.run(ctx, c, req)
	return u
}

func (u *UpCall) run(ctx context.Context, c enginepb.EngineClient, req Request) {
	defer close(u.done)
	stream, err := c.Up(ctx)
	if err != nil {
		u.err = err
		return
	}
	if err := stream.Send(&enginepb.UpMessage{Message: &enginepb.UpMessage_Request{Request: ToUpRequest(req)}}); err != nil {
		if _, rerr := stream.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr // the status the call ended with says more than a failed send
		}
		u.finish(err)
		return
	}
	u.mu.Lock()
	u.stream = stream
	cancelled := u.cancelled
	u.mu.Unlock()
	if cancelled {
		_ = stream.Send(cancelMessage()) // Cancel came before the stream: sent now
	}
	m, err := stream.Recv()
	if err == nil {
		u.reply = FromUpReply(m)
		return
	}
	if errors.Is(err, io.EOF) {
		err = ErrNoReply
	}
	u.finish(err)
}

// finish records a call that ended with err: the failed Reply it carries, or err itself.
func (u *UpCall) finish(err error) {
	if failed, ok := ReplyOfError(err); ok {
		u.reply = failed
		return
	}
	u.err = err
}

// Cancel asks the call's run to stop gracefully, at once or as soon as the call's request is
// sent; the reply (KindCancelled, or the run's outcome when it finished first) still comes
// through Result. A second Cancel does nothing.
func (u *UpCall) Cancel() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cancelled {
		return
	}
	u.cancelled = true
	if u.stream != nil {
		_ = u.stream.Send(cancelMessage()) // a call that cannot take it is ending anyway
	}
}

func cancelMessage() *enginepb.UpMessage {
	return &enginepb.UpMessage{Message: &enginepb.UpMessage_Cancel{Cancel: &enginepb.Cancel{}}}
}

// Done is closed once the call has ended (Result is then ready).
func (u *UpCall) Done() <-chan struct{} { return u.done }

// Result is the call's reply, as Call's; it waits for the call's end.
func (u *UpCall) Result() (Reply, error) {
	<-u.done
	return u.reply, u.err
}

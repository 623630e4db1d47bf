package enginehost

import (
	"context"
	"errors"
	"io"

	"github.com/pulumi/pulumi/pkg/v3/util/cancel"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
)

// server is the Engine service over a host: each method turns its message into a
// protocol.Request, runs it (host.call) and answers with the method's reply, or with
// protocol.ErrorStatus for a failure.
type server struct {
	enginepb.UnimplementedEngineServer
	h *host
}

// Up serves one Up call: its first message is the request; a later Cancel, or the call's end
// (the operator gave up on it), cancels the run gracefully, as SIGINT does the CLI's.
func (s *server) Up(stream enginepb.Engine_UpServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	m := first.GetRequest()
	if m == nil {
		return protocol.ErrorStatus(protocol.Reply{Code: 1, Kind: protocol.KindBadRequest, Stderr: "error: bad up call: its first message must be the request\n"})
	}
	req := protocol.FromUpRequest(m)
	// The source's context is never cancelled from outside: only a Cancel, the call's end or the
	// run's end (Terminate) stops it, as SIGINT and the process's exit do the CLI's.
	c, src := cancel.NewContext(context.WithoutCancel(stream.Context()))
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		for {
			msg, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return // the operator sends nothing more; the call goes on
			}
			select {
			case <-finished:
				return
			default:
			}
			if err != nil || msg.GetCancel() != nil {
				src.Cancel()
			}
			if err != nil {
				return
			}
		}
	}()
	r := s.h.call(req, c, src)
	if r.Code != 0 {
		return protocol.ErrorStatus(r)
	}
	return stream.Send(protocol.ToUpReply(r))
}

// Init serves protocol.OpInit.
func (s *server) Init(ctx context.Context, m *enginepb.InitRequest) (*enginepb.InitReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpInit, Stack: m.GetStack()})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.InitReply{Created: r.Created}, nil
}

// Prune serves protocol.OpPrune.
func (s *server) Prune(ctx context.Context, m *enginepb.PruneRequest) (*enginepb.PruneReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpPrune, Stack: m.GetStack(), Keep: int(m.GetKeep())})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.PruneReply{Pruned: int32(r.Pruned)}, nil
}

// Locks serves protocol.OpLocks.
func (s *server) Locks(ctx context.Context, m *enginepb.LocksRequest) (*enginepb.LocksReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpLocks, Stack: m.GetStack()})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.LocksReply{Held: r.Held, Locks: protocol.LocksToProto(r.Locks)}, nil
}

// Unlock serves protocol.OpUnlock.
func (s *server) Unlock(ctx context.Context, m *enginepb.UnlockRequest) (*enginepb.UnlockReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpUnlock, Stack: m.GetStack(), Locks: m.GetLocks()})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.UnlockReply{Repaired: r.Repaired}, nil
}

// Diagnose serves protocol.OpDiagnose.
func (s *server) Diagnose(ctx context.Context, m *enginepb.DiagnoseRequest) (*enginepb.DiagnoseReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpDiagnose, Stack: m.GetStack(), Steps: m.GetSteps(), Diagnostics: m.GetDiagnostics()})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.DiagnoseReply{Kind: protocol.KindToProto(r.Kind), Locks: protocol.LocksToProto(r.Locks), Repaired: r.Repaired}, nil
}

// Export serves protocol.OpExport.
func (s *server) Export(ctx context.Context, m *enginepb.ExportRequest) (*enginepb.ExportReply, error) {
	r := s.unary(ctx, protocol.Request{Op: protocol.OpExport, Stack: m.GetStack()})
	if r.Code != 0 {
		return nil, protocol.ErrorStatus(r)
	}
	return &enginepb.ExportReply{Deployment: r.Deployment}, nil
}

// unary runs req for a unary call whose context ctx cancels it while it waits for its stack.
func (s *server) unary(ctx context.Context, req protocol.Request) protocol.Reply {
	c, src := cancel.NewContext(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, src.Cancel)
	defer stop()
	return s.h.call(req, c, src)
}

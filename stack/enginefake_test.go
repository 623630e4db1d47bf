package stack

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	"google.golang.org/grpc"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/enginepb"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// fakeEngineEnv, set in a stand-in engine host's environment, makes this test binary serve it
// (TestMain) instead of running the tests: "fail" answers every call with a failure, "hang"
// accepts calls and never answers them. A real engine host cannot be made to do either on demand.
const fakeEngineEnv = "STACK_TEST_FAKE_ENGINE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEngineEnv); mode != "" {
		os.Exit(serveFakeEngine(mode))
	}
	os.Exit(m.Run())
}

// fakeEngine is the path of a stand-in engine host for mode (fakeEngineEnv): a script that
// runs this test binary as that host (testenv.StandIn).
func fakeEngine(t *testing.T, mode string) string {
	t.Helper()
	return testenv.StandIn(t, EngineHost, fakeEngineEnv, mode)
}

// serveFakeEngine serves the Engine service on file descriptor 3 as the real host does, until
// standard input closes.
func serveFakeEngine(mode string) int {
	f := os.NewFile(3, "engine socket")
	ln, err := net.FileListener(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f.Close()
	srv := grpc.NewServer()
	enginepb.RegisterEngineServer(srv, fakeEngineServer{hang: mode == "hang"})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		srv.Stop()
	}()
	_ = srv.Serve(ln)
	return 0
}

// fakeEngineServer fails every call with "error: boom" (kind failed), or never answers (hang).
type fakeEngineServer struct {
	enginepb.UnimplementedEngineServer
	hang bool
}

func (s fakeEngineServer) fail(ctx context.Context) error {
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return protocol.ErrorStatus(protocol.Reply{Code: 1, Kind: protocol.KindFailed, Stderr: "error: boom\n"})
}

func (s fakeEngineServer) Up(stream enginepb.Engine_UpServer) error {
	if s.hang {
		for { // reads the request and the cancel, answers neither
			if _, err := stream.Recv(); err != nil {
				return err
			}
		}
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return s.fail(stream.Context())
}

func (s fakeEngineServer) Init(ctx context.Context, _ *enginepb.InitRequest) (*enginepb.InitReply, error) {
	return nil, s.fail(ctx)
}

func (s fakeEngineServer) Prune(ctx context.Context, _ *enginepb.PruneRequest) (*enginepb.PruneReply, error) {
	return nil, s.fail(ctx)
}

func (s fakeEngineServer) Locks(ctx context.Context, _ *enginepb.LocksRequest) (*enginepb.LocksReply, error) {
	return nil, s.fail(ctx)
}

func (s fakeEngineServer) Unlock(ctx context.Context, _ *enginepb.UnlockRequest) (*enginepb.UnlockReply, error) {
	return nil, s.fail(ctx)
}
